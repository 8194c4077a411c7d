"""Vision ops: sampling grids, regions of interest, deformable convolution, box suppression."""
from __future__ import annotations

import math

from ..attributes import const_ints
from ..dims import dim_quotient
from ..dtypes import DType
from ..graph import Node
from ..ops import OpClass, OpDef, register
from .elementwise import same_as_input

I, R, O = OpClass.INJECTIVE, OpClass.REDUCTION, OpClass.OPAQUE

register(OpDef("LRN", R, same_as_input))


def _grid_sample(node: Node):
    """[N, C, grid's spatial dims]."""
    x, grid = node.inputs[0], node.inputs[1]
    if x.shape is None or grid.shape is None:
        return [(None, x.dtype)]
    return [((grid.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def _affine_grid(node: Node):
    """[N, spatial dims of `size`..., spatial rank]."""
    theta, size = node.inputs[0], const_ints(node.inputs[1])
    if size is None:
        return [(None, theta.dtype)]
    return [((size[0], *size[2:], len(size) - 2), theta.dtype)]


def _col2im(node: Node):
    """[N, C / prod(block), image...]."""
    x, image, block = node.inputs[0], const_ints(node.inputs[1]), const_ints(node.inputs[2])
    if x.shape is None or image is None or block is None:
        return [(None, x.dtype)]
    return [((x.shape[0], dim_quotient(x.shape[1], math.prod(block)), *image), x.dtype)]


register(OpDef("GridSample", I, _grid_sample))
register(OpDef("AffineGrid", I, _affine_grid))
register(OpDef("Col2Im", I, _col2im))


def _roi_align(node: Node):
    x, rois = node.inputs[0], node.inputs[1]
    n = rois.shape[0] if rois.shape is not None else None
    c = x.shape[1] if x.shape is not None else None
    return [((n, c, node.attr("output_height", 1), node.attr("output_width", 1)), x.dtype)]


def _deform_conv(node: Node):
    """[N, W.shape[0], offset's spatial dims]."""
    x, w, offset = node.inputs[:3]
    if x.shape is None or w.shape is None or offset.shape is None:
        return [(None, x.dtype)]
    return [((x.shape[0], w.shape[0], *offset.shape[2:]), x.dtype)]


def _non_max_suppression(node: Node):
    """[selected, 3] int64: how many boxes are selected is known only at run time."""
    return [((None, 3), DType.INT64)]


register(OpDef("RoiAlign", O, _roi_align))
register(OpDef("DeformConv", O, _deform_conv))
register(OpDef("NonMaxSuppression", O, _non_max_suppression))
