"""trtconv's own TensorRT plugins.

Importing this package imports nothing from TensorRT: ``dcnv2_kernel`` holds the kernel's
facts (PTX, entry names, launch geometry) and runs without TensorRT; ``dcnv2`` registers the
``tensorrt.plugin`` AOT definition and is imported only when a TensorRT network is built.
"""
