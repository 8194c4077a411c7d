// ONNX NonMaxSuppression over float32 boxes, decided as ONNX Runtime decides it (float32 IoU,
// a degenerate box suppresses nothing, score order falling with the lower index first among
// equals, NaN scores last). Per batch and class: the boxes over the score floor in score order,
// each kept unless a kept box overlaps it by more than the threshold, at most `limit`.
//
// Kept boxes are filed in cells along x (a box in every cell its x-range meets), so a candidate
// is compared only with kept boxes whose x-range can meet its own, and stops at the first that
// suppresses it: a batched NMS (torchvision's, every class's boxes offset apart into one call)
// compares a box with its own class's kept boxes, not all of them. The PyTorch kernel's pairs of
// every overlapping box cost 50 ms for SSDlite's 27,000 boxes, a Python loop over them 10 more.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace af {

struct Corners {
  std::vector<float> x0, x1, y0, y1, area;
};

// boxes [n, 4]: [y1, x1, y2, x2] (corners in either order) or, center_point, [xc, yc, w, h]
inline Corners corners_of(const float* boxes, int64_t n, bool center_point) {
  Corners c;
  for (auto* v : {&c.x0, &c.x1, &c.y0, &c.y1, &c.area}) v->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* b = boxes + 4 * i;
    if (center_point) {
      const float hw = b[2] / 2.f, hh = b[3] / 2.f;
      c.x0[i] = b[0] - hw, c.x1[i] = b[0] + hw, c.y0[i] = b[1] - hh, c.y1[i] = b[1] + hh;
    } else {
      c.x0[i] = std::min(b[1], b[3]), c.x1[i] = std::max(b[1], b[3]);
      c.y0[i] = std::min(b[0], b[2]), c.y1[i] = std::max(b[0], b[2]);
    }
    const float w = c.x1[i] - c.x0[i], h = c.y1[i] - c.y0[i];
    c.area[i] = w * h;
  }
  return c;
}

// whether boxes a and b overlap by more than `threshold` (ONNX Runtime's float32 checks)
inline bool suppresses(const Corners& c, int64_t a, int64_t b, float threshold) {
  const float w = std::min(c.x1[a], c.x1[b]) - std::max(c.x0[a], c.x0[b]);
  const float h = std::min(c.y1[a], c.y1[b]) - std::max(c.y0[a], c.y0[b]);
  if (!(w > 0.f) || !(h > 0.f) || !(c.area[a] > 0.f) || !(c.area[b] > 0.f)) return false;
  const volatile float inter = w * h;   // rounded as numpy rounds it: no fused multiply-add below
  const float both = c.area[a] + c.area[b];
  const float joined = both - inter;
  if (!(inter > 0.f) || !(joined > 0.f)) return false;
  return inter / joined > threshold;
}

// One class's selection, its kept box indices appended to `kept` in order.
inline void select_boxes(const Corners& c, const float* scores, int64_t n, bool has_floor, float floor,
                         float threshold, int64_t limit, std::vector<int64_t>& kept) {
  std::vector<int64_t> order;
  order.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    if (!has_floor || scores[i] > floor) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool na = std::isnan(scores[a]), nb = std::isnan(scores[b]);
    return na != nb ? nb : (!na && scores[a] > scores[b]);
  });
  if (order.empty() || limit <= 0) return;
  // cells along x, each as wide as the candidates' median box (a box meets two or three), over
  // their x extent; at most MAX_CELLS
  constexpr int64_t MAX_CELLS = int64_t(1) << 16;
  float lo = c.x0[order[0]], hi = c.x1[order[0]];
  std::vector<float> widths;
  widths.reserve(order.size());
  for (int64_t i : order) {
    lo = std::min(lo, c.x0[i]), hi = std::max(hi, c.x1[i]);
    const float w = c.x1[i] - c.x0[i];
    if (w > 0.f && std::isfinite(w)) widths.push_back(w);
  }
  double typical = 0.0;
  if (!widths.empty()) {
    std::nth_element(widths.begin(), widths.begin() + widths.size() / 2, widths.end());
    typical = widths[widths.size() / 2];
  }
  const double extent = double(hi) - double(lo);
  const int64_t cells = typical > 0.0 && std::isfinite(extent)
                            ? int64_t(std::clamp(std::ceil(extent / typical), 1.0, double(MAX_CELLS)))
                            : 1;
  const double width = extent / double(cells);
  const bool one_cell = !(width > 0.0) || !std::isfinite(width);   // NaN or infinite corners too
  auto cell = [&](float x) {
    if (one_cell || !std::isfinite(x)) return int64_t(0);
    return int64_t(std::clamp((double(x) - double(lo)) / width, 0.0, double(cells - 1)));
  };
  std::vector<std::vector<int64_t>> filed(static_cast<size_t>(cells));
  int64_t taken = 0;
  for (int64_t i : order) {
    const int64_t first = cell(c.x0[i]), last = std::max(first, cell(c.x1[i]));
    bool suppressed = false;
    for (int64_t k = first; k <= last && !suppressed; ++k)
      for (int64_t j : filed[size_t(k)])
        if (suppresses(c, j, i, threshold)) {
          suppressed = true;
          break;
        }
    if (suppressed) continue;
    kept.push_back(i);
    if (++taken == limit) return;
    for (int64_t k = first; k <= last; ++k) filed[size_t(k)].push_back(i);
  }
}

}  // namespace af
