"""The ``harp`` admin CLI: one module per subcommand, dispatched by ``main``."""
