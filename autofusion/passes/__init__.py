"""Graph passes that clean a graph before fusion: dead code, CSE, constant folding."""
from .cleanup import (Evaluator, eliminate_common_subexpressions, eliminate_dead_code,
                      fold_constants, fold_static_shapes, read_shapes_upstream, refine_shapes,
                      resolve_cast_like, shapes_from_inputs)
from .precision import widen_float16
from .quantization import dequantize_per_reader
from .decompose import batch_norms_as_affine
from .control_flow import close_over_constants, inline_constant_ifs

__all__ = ["Evaluator", "batch_norms_as_affine", "close_over_constants", "dequantize_per_reader", "inline_constant_ifs", "eliminate_common_subexpressions",
           "eliminate_dead_code", "fold_constants", "fold_static_shapes", "read_shapes_upstream", "refine_shapes", "shapes_from_inputs", "resolve_cast_like",
           "widen_float16"]
