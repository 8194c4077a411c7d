"""Vision ops: LRN, GridSample, AffineGrid, RoiAlign, NonMaxSuppression, Col2Im, DeformConv."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, ints_of, kernel


@kernel("LRN")
def _lrn(node: Node) -> Kernel:
    """x / (bias + alpha/size · Σ x²)^beta, the sum over channels c - ⌊(size-1)/2⌋ to
    c + ⌈(size-1)/2⌉ (torch's local_response_norm centres even windows the other way)."""
    size, alpha = node.attrs["size"], node.attr("alpha", 1e-4)
    beta, bias = node.attr("beta", 0.75), node.attr("bias", 1.0)
    before, after = (size - 1) // 2, size // 2

    def run(x):
        sq = F.pad(x.square().reshape(x.shape[0], 1, x.shape[1], -1), (0, 0, before, after))
        mean = F.avg_pool2d(sq, (size, 1), stride=1).view(x.shape)
        return x / (bias + alpha * mean).pow(beta)
    return run


# ---- sampling ------------------------------------------------------------------------------

_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest",
               "cubic": "bicubic", "bicubic": "bicubic"}


@kernel("GridSample")
def _grid_sample(node: Node) -> Kernel:
    """torch's grid_sample: the same modes (opset 16's and 20's names), padding and corner
    alignment."""
    mode = _GRID_MODES[node.attr("mode", "linear")]
    padding, corners = node.attr("padding_mode", "zeros"), bool(node.attr("align_corners", 0))
    return lambda x, grid: F.grid_sample(x, grid, mode, padding, corners)


@kernel("AffineGrid")
def _affine_grid(node: Node) -> Kernel:
    corners = bool(node.attr("align_corners", 0))
    return lambda theta, size: F.affine_grid(theta, ints_of(size), corners)


def _bilinear_axis(coords: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoiAlign's interpolation along one axis of size n: for each sample coordinate, the two
    neighbours [.., 2] and their weights (0 for a sample outside [-1, n])."""
    outside = (coords < -1) | (coords > n)
    c = coords.clamp(min=0)
    low = c.floor().clamp(max=n - 1)
    at_end = low >= n - 1
    c = torch.where(at_end, low, c)
    high = torch.where(at_end, low, low + 1)
    frac = c - low
    weights = torch.stack([1 - frac, frac], -1).masked_fill(outside.unsqueeze(-1), 0.0)
    return torch.stack([low, high], -1).long(), weights


def interpolation_matrix(index: torch.Tensor, weights: torch.Tensor, n: int) -> torch.Tensor:
    """[bins, n]: each bin's summed weights on the n pixels of one axis, from its samples'
    neighbours `index` and `weights` [bins, grid, 2]."""
    bins = torch.arange(index.shape[0]).view(-1, 1, 1).expand_as(index)
    return weights.new_zeros(index.shape[0], n).index_put_((bins, index), weights, accumulate=True)


@kernel("RoiAlign")
def _roi_align(node: Node) -> Kernel:
    """Each region of interest pooled to output_height × output_width bins, averaging (or, in max
    mode, taking the largest of) bilinear samples on a sampling_ratio grid per bin (adaptive:
    ⌈roi size / bins⌉). Max mode keeps ONNX Runtime's form: the largest weighted corner value."""
    oh, ow = node.attr("output_height", 1), node.attr("output_width", 1)
    ratio, scale = node.attr("sampling_ratio", 0), node.attr("spatial_scale", 1.0)
    use_max = node.attr("mode", "avg") == "max"
    half_pixel = node.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    offset = 0.5 if half_pixel else 0.0

    def samples(start, size, bins, grid):
        """[bins, grid] coordinates of one axis's samples."""
        step = size / bins
        return start + torch.arange(bins).view(-1, 1) * step + \
            (torch.arange(grid) + 0.5).view(1, -1) * (step / grid)

    def pool(image, roi):
        h, w = image.shape[-2:]
        x0, y0, x1, y1 = (float(v) * scale - offset for v in roi)
        rw, rh = x1 - x0, y1 - y0
        if not half_pixel:   # a malformed region is taken as 1 × 1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else max(math.ceil(rh / oh), 0)
        gw = ratio if ratio > 0 else max(math.ceil(rw / ow), 0)
        if not gh * gw:   # an empty region: no samples, its bins are 0
            return image.new_zeros(image.shape[0], oh, ow)
        yi, wy = _bilinear_axis(samples(y0, rh, oh, gh).double(), h)    # [oh, gh, 2]
        xi, wx = _bilinear_axis(samples(x0, rw, ow, gw).double(), w)    # [ow, gw, 2]
        wy, wx = wy.to(image.dtype), wx.to(image.dtype)
        if not use_max:   # the average is linear: one interpolation matrix per axis
            my, mx = interpolation_matrix(yi, wy, h), interpolation_matrix(xi, wx, w)
            return torch.einsum("ph,chw,qw->cpq", my, image, mx) / (gh * gw)
        v = image[:, yi][..., xi]                                       # [c, oh, gh, 2, ow, gw, 2]
        weighted = v * wy.view(oh, gh, 2, 1, 1, 1) * wx.view(1, 1, 1, ow, gw, 2)
        return weighted.amax(dim=(6, 3)).amax(dim=(4, 2))

    def run(x, rois, batch_indices):
        check_batch_indices(batch_indices, x.shape[0])
        if rois.shape[0] == 0:
            return x.new_zeros(0, x.shape[1], oh, ow)
        return torch.stack([pool(x[int(b)], r) for r, b in zip(rois, batch_indices)])
    return run


def check_batch_indices(batch_indices: torch.Tensor, images: int) -> None:
    """RoiAlign's regions name images of the batch, counted from 0 (ONNX has no negative ones)."""
    if len(batch_indices) and not (0 <= int(batch_indices.min()) and int(batch_indices.max()) < images):
        raise ValueError(f"a batch index is outside the image's batch of {images}: {batch_indices.tolist()}")


# ---- NonMaxSuppression ----------------------------------------------------------------------

def _corners(boxes: np.ndarray, center_point: bool):
    """x_min, x_max, y_min, y_max of boxes [y1, x1, y2, x2] (corners in any order) or
    [x_centre, y_centre, width, height]."""
    if center_point:
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        return boxes[:, 0] - half_w, boxes[:, 0] + half_w, boxes[:, 1] - half_h, boxes[:, 1] + half_h
    return (np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3]),
            np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2]))


def _overlaps(x_min, x_max, y_min, y_max, threshold: np.float32, chunk: int = 1 << 22):
    """(i, j), i < j: the pairs of boxes whose IoU is over the threshold, in float32 with ONNX
    Runtime's checks (a degenerate box suppresses nothing). A sweep along x: only boxes whose x
    ranges meet are compared, `chunk` pairs at a time, so boxes spread over an image (or over the
    per-class offsets of a batched NMS) cost far less than all n² pairs."""
    by_x = np.argsort(x_min, kind="stable")
    n = len(by_x)
    ends = np.searchsorted(x_min[by_x], x_max[by_x], side="left")
    counts = np.maximum(ends - np.arange(n) - 1, 0)
    first_pair = np.cumsum(counts) - counts
    area = (x_max - x_min) * (y_max - y_min)
    pairs = []
    for rows in np.split(np.arange(n), np.searchsorted(first_pair, np.arange(chunk, counts.sum(), chunk))):
        k = counts[rows]
        a = np.repeat(rows, k)
        b = a + 1 + np.arange(k.sum()) - np.repeat(first_pair[rows] - first_pair[rows[:1]], k)
        a, b = by_x[a], by_x[b]
        inter_w = np.minimum(x_max[a], x_max[b]) - np.maximum(x_min[a], x_min[b])
        inter_h = np.minimum(y_max[a], y_max[b]) - np.maximum(y_min[a], y_min[b])
        inter = inter_w * inter_h
        union = area[a] + area[b] - inter
        valid = (inter_w > 0) & (inter_h > 0) & (inter > 0) & (union > 0) & (area[a] > 0) & (area[b] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            over = valid & (inter / union > threshold)
        pairs.append((np.minimum(a[over], b[over]), np.maximum(a[over], b[over])))
    return tuple(np.concatenate(p) for p in zip(*pairs))


def _greedy(n: int, pairs, limit: int) -> list[int]:
    """Boxes 0…n-1 in score order, each kept unless an earlier kept box overlaps it: at most limit."""
    earlier, later = pairs
    by_earlier = np.argsort(earlier, kind="stable")
    later = later[by_earlier]
    starts = np.searchsorted(earlier[by_earlier], np.arange(n + 1)).tolist()
    removed, kept = np.zeros(n, bool), []
    for i in range(n):
        if not removed[i]:
            kept.append(i)
            if len(kept) == limit:
                break
            removed[later[starts[i]:starts[i + 1]]] = True
    return kept


def _scalar(t: torch.Tensor | None, default):
    """An optional one-element input's value (absent or empty: the default)."""
    return default if t is None or not t.numel() else t.reshape(-1)[0].item()


@kernel("NonMaxSuppression")
def _non_max_suppression(node: Node) -> Kernel:
    """[selected, 3] (batch, class, box): per batch and class, boxes by falling score (the lower
    index first among equals), above score_threshold where given, each kept unless a kept box
    overlaps it by more than iou_threshold, at most max_output_boxes_per_class (default 0)."""
    center_point = bool(node.attr("center_point_box", 0))

    def run(boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
        limit, floor = max(int(_scalar(max_output, 0)), 0), _scalar(score_threshold, None)
        iou = np.float32(_scalar(iou_threshold, 0.0))
        boxes, scores = boxes.numpy(), scores.numpy()
        selected = []
        for batch in range(scores.shape[0] if limit else 0):
            x_min, x_max, y_min, y_max = _corners(boxes[batch].astype(np.float32), center_point)
            for cls, s in enumerate(scores[batch]):
                order = np.argsort(-s, kind="stable")
                if floor is not None:
                    order = order[s[order] > floor]
                corners = x_min[order], x_max[order], y_min[order], y_max[order]
                kept = order[_greedy(len(order), _overlaps(*corners, iou), limit)]
                selected += [(batch, cls, int(i)) for i in kept]
        return torch.tensor(selected, dtype=torch.int64).reshape(-1, 3)
    return run


# ---- Col2Im, DeformConv ---------------------------------------------------------------------

def _block_positions(block, blocks, strides, dilations, padded) -> torch.Tensor:
    """[prod(block)·prod(blocks)]: the flat index into the padded image of each kernel tap
    (k_0, …) of each block (b_0, …), Σ (k_i·d_i + b_i·s_i)·stride_i, taps outermost."""
    nd = len(block)
    index = torch.zeros([1] * (2 * nd), dtype=torch.int64)
    for i in range(nd):
        pos = (torch.arange(block[i]) * dilations[i]).view(-1, 1) + torch.arange(blocks[i]) * strides[i]
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = block[i], blocks[i]
        index = index + pos.view(shape) * math.prod(padded[i + 1:])
    return index.reshape(-1)


@kernel("Col2Im")
def _col2im(node: Node) -> Kernel:
    """The inverse of im2col in any number of spatial axes: each column's values summed into the
    image at the positions of its block (torch's fold has only 2)."""
    def run(x, image_shape, block_shape):
        image, block = ints_of(image_shape), ints_of(block_shape)
        nd = len(image)
        strides = node.attr("strides") or [1] * nd
        dilations, pads = node.attr("dilations") or [1] * nd, node.attr("pads") or [0] * (2 * nd)
        padded = [n + pads[i] + pads[nd + i] for i, n in enumerate(image)]
        blocks = [(p - (d * (k - 1) + 1)) // s + 1
                  for p, k, s, d in zip(padded, block, strides, dilations)]
        n, c = x.shape[0], x.shape[1] // math.prod(block)
        y = x.new_zeros(n, c, math.prod(padded))
        y.index_add_(2, _block_positions(block, blocks, strides, dilations, padded), x.reshape(n, c, -1))
        y = y.view(n, c, *padded)
        for i in range(nd):
            y = y.narrow(2 + i, pads[i], image[i])
        return y
    return run


def _bilinear_zero_padded(x: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """x [n, c, h, w] sampled at points (ys, xs) [n, p] by bilinear interpolation, pixels outside
    the image 0 (GridSample with align_corners and zero padding): [n, c, p]."""
    n, c, h, w = x.shape
    flat = x.reshape(n, c, h * w)
    y0, x0 = ys.floor(), xs.floor()
    out = x.new_zeros(n, c, ys.shape[1])
    for yi in (y0, y0 + 1):
        for xi in (x0, x0 + 1):
            weight = (1 - (ys - yi).abs()) * (1 - (xs - xi).abs())
            weight = weight * ((yi >= 0) & (yi < h) & (xi >= 0) & (xi < w))
            index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long()
            out += flat.gather(2, index.unsqueeze(1).expand(n, c, -1)) * weight.unsqueeze(1).to(x.dtype)
    return out


@kernel("DeformConv")
def _deform_conv(node: Node) -> Kernel:
    """2-D deformable convolution: each kernel tap samples x at its place plus its learned offset
    (bilinear, zero outside), scaled by the mask, then the taps are contracted with W per group."""
    group, offset_groups = node.attr("group", 1), node.attr("offset_group", 1)
    (sh, sw), (dh, dw) = node.attr("strides") or [1, 1], node.attr("dilations") or [1, 1]
    top, left = (node.attr("pads") or [0, 0, 0, 0])[:2]

    def run(x, w, offset, b=None, mask=None):
        n, c = x.shape[:2]
        oc, kh, kw = w.shape[0], w.shape[2], w.shape[3]
        oh, ow = offset.shape[2:]
        taps, per_offset_group = kh * kw, c // offset_groups
        off = offset.reshape(n, offset_groups, kh, kw, 2, oh, ow)
        # where each tap of each output position reads: rows [kh, 1, oh, 1], columns [kw, 1, ow]
        rows = (torch.arange(kh) * dh).view(kh, 1, 1, 1) + (torch.arange(oh) * sh - top).view(oh, 1)
        cols = (torch.arange(kw) * dw).view(kw, 1, 1) + (torch.arange(ow) * sw - left)
        ys = (rows + off[:, :, :, :, 0]).reshape(n * offset_groups, -1)      # [n·G, taps·oh·ow]
        xs = (cols + off[:, :, :, :, 1]).reshape(n * offset_groups, -1)
        per_group = x.reshape(n * offset_groups, per_offset_group, *x.shape[2:])
        sampled = _bilinear_zero_padded(per_group, ys, xs)
        sampled = sampled.view(n, offset_groups, per_offset_group, taps, oh * ow)
        if mask is not None:
            sampled = sampled * mask.reshape(n, offset_groups, 1, taps, oh * ow)
        sampled = sampled.reshape(n, group, (c // group) * taps, oh * ow)
        y = torch.einsum("gok,ngkl->ngol", w.reshape(group, oc // group, -1), sampled)
        y = y.reshape(n, oc, oh, ow)
        return y if b is None else y + b.view(1, -1, 1, 1)
    return run
