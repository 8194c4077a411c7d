"""Hand-written C++ kernels for ops whose PyTorch form is a Python loop, called from a torch step:
RoiAlign (runtime/roi_align.h; PyTorch: one pooling per region, vision.py) and NonMaxSuppression
(runtime/nms.h; PyTorch: numpy over every overlapping pair, then a Python loop over the boxes).

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
from .vision import _scalar, check_batch_indices

ROI_ALIGN_SOURCE = """// autofusion: RoiAlign, called from PyTorch
#include "roi_align.h"

extern "C" void af_roi_align(const float* x, const float* rois, const int64_t* batch, float* y,
                             int64_t n_rois, int64_t images, int64_t channels, int64_t height, int64_t width,
                             int64_t out_h, int64_t out_w, int64_t sampling_ratio, float spatial_scale,
                             int half_pixel, int max_mode) {
  af::roi_align(x, rois, batch, y, n_rois, {channels, height, width, out_h, out_w, sampling_ratio,
                                            spatial_scale, half_pixel != 0, max_mode != 0}, images);
}
"""


I64, PTR, F32, FLAG = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float, ctypes.c_int


@functools.lru_cache(maxsize=None)
def _entry(op: str, source: str, name: str, restype, argtypes: tuple):
    """The C function `name` of `source`'s library, built unless cached."""
    try:
        lib = ctypes.CDLL(str(kernel_library(toolchain(), source)))
    except (NativeBuildError, OSError) as e:
        raise KernelBuildError(f"the C++ {op} does not build: {e}") from None
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def _roi_align_entry():
    return _entry("RoiAlign", ROI_ALIGN_SOURCE, "af_roi_align", None, (PTR,) * 4 + (I64,) * 8 + (F32, FLAG, FLAG))


NMS_SOURCE = """// autofusion: NonMaxSuppression, called from PyTorch
#include "nms.h"

extern "C" int64_t af_nms(const float* boxes, const float* scores, int64_t batches, int64_t classes,
                          int64_t n, int center_point, float threshold, int has_floor, float floor,
                          int64_t limit, int64_t* selected) {
  int64_t count = 0;
  std::vector<int64_t> kept;
  for (int64_t b = 0; b < batches; ++b) {
    const af::Corners corners = af::corners_of(boxes + b * n * 4, n, center_point != 0);
    for (int64_t c = 0; c < classes; ++c) {
      kept.clear();
      af::select_boxes(corners, scores + (b * classes + c) * n, n, has_floor != 0, floor, threshold, limit, kept);
      for (int64_t i : kept) {
        selected[3 * count] = b, selected[3 * count + 1] = c, selected[3 * count + 2] = i;
        ++count;
      }
    }
  }
  return count;
}
"""


def _nms_entry():
    return _entry("NonMaxSuppression", NMS_SOURCE, "af_nms", I64,
                  (PTR, PTR, I64, I64, I64, FLAG, F32, FLAG, F32, I64, PTR))


def non_max_suppression(node: Node):
    """Each batch's and class's boxes kept in C++ (runtime/nms.h), compared only with kept boxes
    their x-range can meet."""
    entry = _nms_entry()
    center_point = int(bool(node.attr("center_point_box", 0)))

    def run(boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
        if boxes.dim() != 3 or boxes.shape[2] != 4 or scores.dim() != 3 or scores.shape[0] != boxes.shape[0] \
                or scores.shape[2] != boxes.shape[1]:
            raise ValueError(f"NonMaxSuppression takes boxes [batches, n, 4] and scores [batches, classes, n]; "
                             f"got {list(boxes.shape)} and {list(scores.shape)}")
        limit = max(int(_scalar(max_output, 0)), 0)
        floor = _scalar(score_threshold, None)
        batches, classes, n = scores.shape
        limit = min(limit, n)
        selected = torch.empty(batches * classes * limit, 3, dtype=torch.int64)
        boxes, scores = boxes.to(torch.float32).contiguous(), scores.to(torch.float32).contiguous()
        count = entry(boxes.data_ptr(), scores.data_ptr(), batches, classes, n, center_point,
                      float(_scalar(iou_threshold, 0.0)), int(floor is not None),
                      0.0 if floor is None else float(floor), limit, selected.data_ptr())
        return selected[:count].clone()
    return run


def _float32_refusal(what: str):
    """The check of a kernel reading float32 `what` (its first two inputs)."""
    def refusal(node: Node) -> str | None:
        why = unavailable()
        if why is not None:
            return f"no native code on this machine: {why}"
        if any(v is None or v.dtype != DType.FLOAT for v in node.inputs[:2]):
            return f"its {what} are not float32"
        return None
    return refusal


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
        entry(x.data_ptr(), rois.data_ptr(), batch.data_ptr(), y.data_ptr(), len(rois), *x.shape, *attrs)
        return y
    return run


# one ctypes call over the node's bytes; the PyTorch kernel's estimate counts one launch, not one a region
register("RoiAlign", Impl("C++ kernel", "torch", _float32_refusal("image and regions"), build=roi_align,
                          estimate=lambda node: LAUNCH_S["native"] + node_roofline(node),
                          doc="the regions pooled in C++, each region's samples found once for all its channels"))
register("NonMaxSuppression", Impl("C++ kernel", "torch", _float32_refusal("boxes and scores"),
                                   build=non_max_suppression,
                                   estimate=lambda node: LAUNCH_S["native"] + node_roofline(node),
                                   doc="boxes kept in C++, each compared only with kept boxes its x-range meets"))
