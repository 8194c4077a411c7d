"""Graph passes that clean a graph before fusion: dead code, CSE, constant folding."""
from .cleanup import (Evaluator, eliminate_common_subexpressions, eliminate_dead_code,
                      fold_constants, fold_static_shapes, read_shapes_upstream, refine_shapes,
                      resolve_cast_like)

__all__ = ["Evaluator", "eliminate_common_subexpressions", "eliminate_dead_code", "fold_constants",
           "fold_static_shapes", "read_shapes_upstream", "refine_shapes", "resolve_cast_like"]
