"""History readers: each turns one trace format into an iterator of JobRecord."""
