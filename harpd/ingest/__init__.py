"""Outcomes into the store: the sacct poller (``poller``) and ``harp import`` (``importer``)."""
