// ONNX RoiAlign over an NCHW float32 image, computed as ONNX Runtime computes it (float32 region
// geometry, its bilinear rule, its max mode). Per region, the four pixels and weights of each
// bilinear sample are found once, then every channel is pooled from them: a region's samples
// are shared by its channels, and a Python loop over regions (the PyTorch kernel) costs ~0.2 ms
// a region in calls alone. Regions in parallel; the number of regions is known only at run time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace af {

struct RoiAlignAttrs {
  int64_t channels, height, width, out_h, out_w, sampling_ratio;
  float spatial_scale;
  bool half_pixel, max_mode;   // coordinate_transformation_mode, mode
};

// One bilinear sample: four pixel offsets in a channel's plane and their weights.
struct Tap {
  int64_t pos[4];
  float w[4];
};

// The sample at (y, x): nothing (weights 0) outside [-1, size]; clamped to the image inside it.
inline Tap bilinear_tap(float y, float x, int64_t h, int64_t w) {
  Tap t{};
  if (y < -1.f || y > h || x < -1.f || x > w) return t;
  y = std::max(y, 0.f);
  x = std::max(x, 0.f);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y = static_cast<float>(y1 = y0 = h - 1);
  if (x0 >= w - 1) x = static_cast<float>(x1 = x0 = w - 1);
  const float ly = y - y0, lx = x - x0, hy = 1.f - ly, hx = 1.f - lx;
  t = Tap{{y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1}, {hy * hx, hy * lx, ly * hx, ly * lx}};
  return t;
}

// y[r, c, ph, pw] for n_rois regions (x1, y1, x2, y2) on the images batch[r] (checked by the caller).
inline void roi_align(const float* x, const float* rois, const int64_t* batch, float* y, int64_t n_rois,
                      const RoiAlignAttrs& a) {
  const int64_t plane = a.height * a.width, bins = a.out_h * a.out_w;
  const float offset = a.half_pixel ? .5f : 0.f;
#pragma omp parallel for schedule(dynamic)
  for (int64_t r = 0; r < n_rois; ++r) {
    const float* roi = rois + 4 * r;
    const float x0 = roi[0] * a.spatial_scale - offset, y0 = roi[1] * a.spatial_scale - offset;
    float rw = roi[2] * a.spatial_scale - offset - x0, rh = roi[3] * a.spatial_scale - offset - y0;
    if (!a.half_pixel) {   // a malformed region is taken as 1 x 1
      rw = std::max(rw, 1.f);
      rh = std::max(rh, 1.f);
    }
    const float bin_h = rh / a.out_h, bin_w = rw / a.out_w;
    const int64_t gh = std::max<int64_t>(a.sampling_ratio > 0 ? a.sampling_ratio : std::ceil(rh / a.out_h), 0);
    const int64_t gw = std::max<int64_t>(a.sampling_ratio > 0 ? a.sampling_ratio : std::ceil(rw / a.out_w), 0);
    const int64_t samples = gh * gw;
    std::vector<Tap> taps;   // [bin][sample]
    taps.reserve(bins * samples);
    for (int64_t ph = 0; ph < a.out_h; ++ph)
      for (int64_t pw = 0; pw < a.out_w; ++pw)
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t ix = 0; ix < gw; ++ix)
            taps.push_back(bilinear_tap(y0 + ph * bin_h + (iy + .5f) * bin_h / static_cast<float>(gh),
                                        x0 + pw * bin_w + (ix + .5f) * bin_w / static_cast<float>(gw),
                                        a.height, a.width));
    const float* image = x + batch[r] * a.channels * plane;
    float* out = y + r * a.channels * bins;
    for (int64_t c = 0; c < a.channels; ++c) {
      const float* p = image + c * plane;
      for (int64_t b = 0; b < bins; ++b) {
        const Tap* t = taps.data() + b * samples;
        float v = 0.f;
        for (int64_t s = 0; s < samples; ++s) {
          const Tap& k = t[s];
          if (a.max_mode) {
            const float m = std::max({k.w[0] * p[k.pos[0]], k.w[1] * p[k.pos[1]], k.w[2] * p[k.pos[2]],
                                      k.w[3] * p[k.pos[3]]});
            v = s ? std::max(v, m) : m;
          } else {
            v += k.w[0] * p[k.pos[0]] + k.w[1] * p[k.pos[1]] + k.w[2] * p[k.pos[2]] + k.w[3] * p[k.pos[3]];
          }
        }
        out[c * bins + b] = a.max_mode ? v : v / static_cast<float>(std::max<int64_t>(samples, 1));
      }
    }
  }
}

}  // namespace af
