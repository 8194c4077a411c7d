"""The rule library, one module per family. Order matters: larger patterns come before the
smaller ones they contain (attention before matmul, Conv+BN+ReLU before Conv+ReLU), and
redundancy elimination comes first so the other rules see clean chains."""
from . import activation, attention, conv, head, loss, matmul, norm, redundancy

RULES = [*redundancy.RULES, *conv.RULES, *head.RULES, *attention.RULES, *norm.RULES,
         *matmul.RULES, *activation.RULES, *loss.RULES]

__all__ = ["RULES"]
