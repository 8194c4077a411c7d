"""The rule library, one module per family. Order matters: redundancy first, so the others see
clean chains; quantized ops (DequantizeLinear → op → QuantizeLinear) before the float rules that
would take their op; activations next, so spelled-out GELU/SiLU/… are single nodes that the conv
and matmul epilogue rules can absorb; larger patterns before the smaller ones they contain
(attention before matmul); a norm joins the linear layer it feeds once that layer is complete."""
from . import activation, attention, conv, head, loss, matmul, norm, quantized, redundancy

RULES = [*redundancy.RULES, *quantized.RULES, *activation.RULES, *conv.RULES, *head.RULES, *attention.RULES,
         *norm.RULES, *matmul.RULES, *norm.INTO_MATMUL_RULES, *loss.RULES]

__all__ = ["RULES"]
