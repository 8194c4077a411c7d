"""Graph passes that clean a graph before fusion: dead code, CSE, constant folding."""
from .cleanup import (Evaluator, eliminate_common_subexpressions, eliminate_dead_code,
                      fold_constants, fold_static_shapes, read_shapes_upstream, refine_shapes,
                      resolve_cast_like)
from .precision import widen_float16

__all__ = ["Evaluator", "eliminate_common_subexpressions", "eliminate_dead_code", "fold_constants",
           "fold_static_shapes", "read_shapes_upstream", "refine_shapes", "resolve_cast_like",
           "widen_float16"]
