"""Rules about types TensorRT refuses or changes: one rule per module.

* :mod:`.uint8_input`: a uint8 input moved through layout ops before its ``Cast`` (an NHWC image
  transposed to NCHW) -> the ``Cast`` first, the layout ops in float; the engine keeps the uint8 input;
* :mod:`.float64`: float64 models narrowed to float32 explicitly (inputs, outputs, initializers,
  constants, Cast targets), every input and output whose type changed reported.
"""
