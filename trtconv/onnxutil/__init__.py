"""ONNX helpers every stage shares, written once: walking subgraphs, topological order,
fresh names, domain names, the graph view and clean-up of passes that edit protos.

The bottom layer above ``errors``: plain functions over ``onnx`` protos (and
onnx-graphsurgeon graphs where a stage edits with it), no trtconv stage imported.
"""
