"""The command line: a thin click layer over the stage functions."""
