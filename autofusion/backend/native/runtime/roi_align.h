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
// The image is read with its channels innermost (transposed once per call where there are
// enough channels to fill a vector): a sample's four pixels are then four runs of channels, each
// bin accumulated for all channels at once (vectorised: the last bit may round otherwise than
// channel by channel), then stored channel by channel. Keypoint R-CNN's box pooling (1,000
// regions of 256 channels): 43 ms with each channel's plane read apart.
inline void roi_align(const float* x, const float* rois, const int64_t* batch, float* y, int64_t n_rois,
                      const RoiAlignAttrs& a, int64_t images) {
  const int64_t plane = a.height * a.width, bins = a.out_h * a.out_w, C = a.channels;
  const float offset = a.half_pixel ? .5f : 0.f;
  const bool channels_last = C >= 16;
  std::vector<float> transposed;
  if (channels_last) {
    transposed.resize(size_t(images * plane * C));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < images; ++n)
      for (int64_t i = 0; i < plane; ++i)
        for (int64_t c = 0; c < C; ++c)
          transposed[size_t((n * plane + i) * C + c)] = x[(n * C + c) * plane + i];
  }
#pragma omp parallel
  {
    std::vector<Tap> taps;         // [bin][sample]
    std::vector<float> sums;       // [bin][channel] (channels last)
#pragma omp for schedule(dynamic)
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
      const float count = static_cast<float>(std::max<int64_t>(samples, 1));
      taps.clear();
      for (int64_t ph = 0; ph < a.out_h; ++ph)
        for (int64_t pw = 0; pw < a.out_w; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix)
              taps.push_back(bilinear_tap(y0 + ph * bin_h + (iy + .5f) * bin_h / static_cast<float>(gh),
                                          x0 + pw * bin_w + (ix + .5f) * bin_w / static_cast<float>(gw),
                                          a.height, a.width));
      float* out = y + r * C * bins;
      if (channels_last) {
        const float* image = transposed.data() + batch[r] * plane * C;
        sums.assign(size_t(bins * C), 0.f);
        for (int64_t b = 0; b < bins; ++b) {
          float* v = sums.data() + b * C;
          for (int64_t s = 0; s < samples; ++s) {
            const Tap& k = taps[size_t(b * samples + s)];
            const float *p0 = image + k.pos[0] * C, *p1 = image + k.pos[1] * C, *p2 = image + k.pos[2] * C,
                        *p3 = image + k.pos[3] * C;
            if (a.max_mode) {
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) {
                const float m = std::max(std::max(std::max(k.w[0] * p0[c], k.w[1] * p1[c]), k.w[2] * p2[c]), k.w[3] * p3[c]);
                v[c] = s ? std::max(v[c], m) : m;
              }
            } else {
#pragma omp simd
              for (int64_t c = 0; c < C; ++c)
                v[c] += k.w[0] * p0[c] + k.w[1] * p1[c] + k.w[2] * p2[c] + k.w[3] * p3[c];
            }
          }
        }
        for (int64_t c = 0; c < C; ++c)
          for (int64_t b = 0; b < bins; ++b)
            out[c * bins + b] = a.max_mode ? sums[size_t(b * C + c)] : sums[size_t(b * C + c)] / count;
        continue;
      }
      const float* image = x + batch[r] * C * plane;
      for (int64_t c = 0; c < C; ++c) {
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
          out[c * bins + b] = a.max_mode ? v : v / count;
        }
      }
    }
  }
}

}  // namespace af
