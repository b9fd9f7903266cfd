"""The ``opdb`` command-line interface: thin commands over library calls."""
