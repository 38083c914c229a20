"""The ``harpd`` process: wiring (``main``), the socket server and the operations behind it."""
