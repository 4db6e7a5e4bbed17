"""Support tables (package data): one TSV per TensorRT version, made by ``trtconv.analyze.maketables``."""
