"""The rule library, one module per family. Order matters: redundancy first, so the others see
clean chains; activations next, so spelled-out GELU/SiLU/… are single nodes that the conv and
matmul epilogue rules can absorb; larger patterns before the smaller ones they contain
(attention before matmul)."""
from . import activation, attention, conv, head, loss, matmul, norm, redundancy

RULES = [*redundancy.RULES, *activation.RULES, *conv.RULES, *head.RULES, *attention.RULES,
         *norm.RULES, *matmul.RULES, *loss.RULES]

__all__ = ["RULES"]
