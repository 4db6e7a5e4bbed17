"""ONNX Runtime's fused transformer ops (``com.microsoft``, and its contrib norms in the default
domain) -> standard ONNX in the forms TensorRT fuses, one rule per module, each proven against
ONNX Runtime's own kernel for the original op (:mod:`.fused`).

Every rule states its ops (``ops``), the model opsets it rewrites (``opsets``) and the TensorRT
targets that need it (``targets``: empty, i.e. all of them; neither TensorRT 10/11 nor TensorRT-RTX imports
these ops). Shared emitters (LayerNorm, RMSNorm, GELU, attention) are in :mod:`.std_forms`.
"""

from trtconv.rewrites.rule import RewriteRule, RuleFamily
from trtconv.rewrites.transformer.attention import AttentionRule
from trtconv.rewrites.transformer.bias_add import BiasAddRule
from trtconv.rewrites.transformer.bias_gelu import BiasGeluRule
from trtconv.rewrites.transformer.embed_layernorm import EmbedLayerNormRule
from trtconv.rewrites.transformer.fast_gelu import FastGeluRule
from trtconv.rewrites.transformer.gelu import GeluRule
from trtconv.rewrites.transformer.layernorm import LayerNormRule
from trtconv.rewrites.transformer.multihead_attention import MultiHeadAttentionRule
from trtconv.rewrites.transformer.quick_gelu import QuickGeluRule
from trtconv.rewrites.transformer.rotary_embedding import RotaryEmbeddingRule
from trtconv.rewrites.transformer.simplified_layernorm import SimplifiedLayerNormRule
from trtconv.rewrites.transformer.skip_layernorm import SkipLayerNormRule
from trtconv.rewrites.transformer.skip_simplified_layernorm import SkipSimplifiedLayerNormRule

TRANSFORMER_RULES: tuple[RewriteRule, ...] = (
    AttentionRule(),
    MultiHeadAttentionRule(),
    EmbedLayerNormRule(),
    SkipLayerNormRule(),
    SkipSimplifiedLayerNormRule(),
    SimplifiedLayerNormRule(),
    LayerNormRule(),
    BiasGeluRule(),
    FastGeluRule(),
    GeluRule(),
    QuickGeluRule(),
    BiasAddRule(),
    RotaryEmbeddingRule(),
)
FAMILY = RuleFamily("transformer", TRANSFORMER_RULES)

__all__ = ["FAMILY", "TRANSFORMER_RULES"]
