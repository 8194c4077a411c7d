"""Hand-written C++ kernels for ops whose PyTorch form is a Python loop, called from a torch step:
RoiAlign (runtime/roi_align.h; PyTorch: one pooling per region, vision.py).

Their sizes are known only at run time (a detector's regions come out of its NMS), so they are
not steps of a native partition, which is specialised per shape; each is built once into a small
library of its own through the native backend's toolchain and disk cache (native/build.py
`kernel_library`, as generated.py builds a region's kernel) and called through ctypes with the
tensors' pointers and sizes. Lowering picks one by cost where its check accepts (a C++ compiler,
float32); elsewhere the PyTorch kernel runs and the plan says why.
"""
from __future__ import annotations

import ctypes
import functools

import torch

from ...errors import KernelBuildError
from ...fusion.cost import node_roofline
from ...ir import DType, Node
from ..impl import LAUNCH_S, Impl, register
from ..native.build import NativeBuildError, kernel_library, toolchain, unavailable
from .vision import check_batch_indices

ROI_ALIGN_SOURCE = """// autofusion: RoiAlign, called from PyTorch
#include "roi_align.h"

extern "C" void af_roi_align(const float* x, const float* rois, const int64_t* batch, float* y,
                             int64_t n_rois, int64_t channels, int64_t height, int64_t width,
                             int64_t out_h, int64_t out_w, int64_t sampling_ratio, float spatial_scale,
                             int half_pixel, int max_mode) {
  af::roi_align(x, rois, batch, y, n_rois, {channels, height, width, out_h, out_w, sampling_ratio,
                                            spatial_scale, half_pixel != 0, max_mode != 0});
}
"""


@functools.lru_cache(maxsize=None)
def _roi_align_entry():
    try:
        lib = ctypes.CDLL(str(kernel_library(toolchain(), ROI_ALIGN_SOURCE)))
    except (NativeBuildError, OSError) as e:
        raise KernelBuildError(f"the C++ RoiAlign does not build: {e}") from None
    fn, i64, ptr = lib.af_roi_align, ctypes.c_int64, ctypes.c_void_p
    fn.restype = None
    fn.argtypes = [ptr] * 4 + [i64] * 7 + [ctypes.c_float, ctypes.c_int, ctypes.c_int]
    return fn


def _float32_refusal(node: Node) -> str | None:
    why = unavailable()
    if why is not None:
        return f"no native code on this machine: {why}"
    if any(v is None or v.dtype != DType.FLOAT for v in node.inputs[:2]):
        return "its image and regions are not float32"
    return None


def roi_align(node: Node):
    """The regions pooled in C++: each region's bilinear samples found once for all its channels."""
    entry = _roi_align_entry()
    oh, ow = node.attr("output_height", 1), node.attr("output_width", 1)
    attrs = (oh, ow, node.attr("sampling_ratio", 0), node.attr("spatial_scale", 1.0),
             int(node.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"),
             int(node.attr("mode", "avg") == "max"))

    def run(x: torch.Tensor, rois: torch.Tensor, batch_indices: torch.Tensor) -> torch.Tensor:
        # the C++ trusts what it is given: anything else is refused, not read
        if x.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 4 or batch_indices.shape != rois.shape[:1] \
                or x.dtype != torch.float32 or rois.dtype != torch.float32:
            raise ValueError(f"RoiAlign takes a float32 image [N, C, H, W], float32 regions [R, 4] and "
                             f"their batch indices [R]; got {x.dtype}{list(x.shape)}, "
                             f"{rois.dtype}{list(rois.shape)}, {list(batch_indices.shape)}")
        check_batch_indices(batch_indices, x.shape[0])
        batch = batch_indices.to(torch.int64).contiguous()
        x, rois = x.contiguous(), rois.contiguous()
        y = x.new_empty(len(rois), x.shape[1], oh, ow)
        entry(x.data_ptr(), rois.data_ptr(), batch.data_ptr(), y.data_ptr(), len(rois), *x.shape[1:], *attrs)
        return y
    return run


# one ctypes call over the node's bytes; the PyTorch kernel's estimate counts one launch, not one a region
register("RoiAlign", Impl("C++ kernel", "torch", _float32_refusal, build=roi_align,
                          estimate=lambda node: LAUNCH_S["native"] + node_roofline(node),
                          doc="the regions pooled in C++, each region's samples found once for all its channels"))
