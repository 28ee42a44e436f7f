"""The command line: one module per verb, each a thin layer over the library."""
