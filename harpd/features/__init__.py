"""Features: command signatures and per-group history, the inputs every model sees."""
