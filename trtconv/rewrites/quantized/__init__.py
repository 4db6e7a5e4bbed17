"""Rules for models quantized by ONNX Runtime: what its quantizers emit, turned into what TensorRT
takes. One rule per module; each is registered in :mod:`trtconv.rewrites.catalog`.

* :mod:`.dynamic_integer`: ``DynamicQuantizeLinear`` + ``ConvInteger``/``MatMulInteger`` (+ the
  Cast/Mul tail) -> a float Conv/MatMul on dequantized weights;
* :mod:`.dynamic_lstm`: ``com.microsoft::DynamicQuantizeLSTM`` -> ``LSTM`` on dequantized weights;
* :mod:`.dynamic_matmul`: ``com.microsoft::DynamicQuantizeMatMul`` / ``MatMulIntegerToFloat`` ->
  ``MatMul`` (+ bias) on dequantized weights;
* :mod:`.matmul_nbits`: ``com.microsoft::MatMulNBits`` (4-bit blocked weights) -> int4 blocked
  ``DequantizeLinear`` + ``MatMul`` (or float weights);
* :mod:`.qattention`: ``DynamicQuantizeLinear`` + ``com.microsoft::QAttention`` -> standard-ONNX
  attention on dequantized weights;
* :mod:`.qembed_layernorm`: ``com.microsoft::QEmbedLayerNormalization`` -> Gather + Add +
  LayerNormalization on the dequantized tables;
* :mod:`.quantized_gather`: ``Gather`` of a quantized embedding table -> ``Gather`` of the float table;
* :mod:`.qdq_boundary`: static QDQ's int32 bias ``DequantizeLinear`` folded into a float bias, and the
  Q/DQ TensorRT refuses;
* :mod:`.qoperator`: QOperator ops (``QLinearConv``, ``QLinearMatMul``, ...) -> Q/DQ around float ops.

The dynamic rules drop the per-call activation quantization: they change the numbers by the
original's own quantization noise, so their node proofs hold a measured bound, not 1e-5.
"""

from trtconv.rewrites.quantized.dynamic_integer import DynamicIntegerRule
from trtconv.rewrites.quantized.dynamic_lstm import DynamicLstmRule
from trtconv.rewrites.quantized.dynamic_matmul import DynamicMatMulRule
from trtconv.rewrites.quantized.matmul_nbits import MatMulNBitsRule
from trtconv.rewrites.quantized.qattention import QAttentionRule
from trtconv.rewrites.quantized.qdq_boundary import QdqRule
from trtconv.rewrites.quantized.qembed_layernorm import QEmbedLayerNormRule
from trtconv.rewrites.quantized.qoperator import QOperatorRule
from trtconv.rewrites.quantized.quantized_gather import QuantizedGatherRule
from trtconv.rewrites.rule import RuleFamily

FAMILY = RuleFamily("quantized", (DynamicIntegerRule(), DynamicLstmRule(), DynamicMatMulRule(), QAttentionRule(),
                                  QEmbedLayerNormRule(), MatMulNBitsRule(), QuantizedGatherRule(), QdqRule(), QOperatorRule()))

__all__ = ["FAMILY", "DynamicIntegerRule", "DynamicLstmRule", "DynamicMatMulRule", "MatMulNBitsRule", "QAttentionRule", "QEmbedLayerNormRule", "QOperatorRule",
           "QdqRule", "QuantizedGatherRule"]
