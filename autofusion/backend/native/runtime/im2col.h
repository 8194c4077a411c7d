// A 2-D convolution's patches as rows: for each output pixel (batch, row, column), the values its
// kernel covers, zeros where the kernel hangs over the image's edge; the rows [n·oh·ow, k] times
// the weight seen as [k, o] are the convolution (any_size.cpp, a tile of rows at a time). The
// image is held channels-last ([n, h, w, c]); a row holds (kh, kw, c) in that order: per kernel
// row, one run of kw pixels' channels. (Read planar, [n, c, h, w], a first convolution's 3
// channels make runs of 3 values: that loop took 2.8x this one's time.)
#pragma once

#include <cstdint>
#include <cstring>

namespace af {

struct Patches {
  int64_t batch, channels, h, w, out_h, out_w, kh, kw, stride_h, stride_w, pad_h, pad_w;
};

// the kw pixels (of `pixel` values each) of image row `row` from column `left` on into `to`
inline void patch_run(const float* row, float* to, int64_t left, const Patches& p, int64_t pixel) {
  const int64_t n = p.kw * pixel;
  if (left >= 0 && left + p.kw <= p.w) {   // inside the image: one copy (a few values: a loop)
    if (n > 16) std::memcpy(to, row + left * pixel, size_t(n) * sizeof(float));
    else
      for (int64_t i = 0; i < n; ++i) to[i] = row[left * pixel + i];
    return;
  }
  for (int64_t b = 0; b < p.kw; ++b) {
    const int64_t iw = left + b;
    if (iw < 0 || iw >= p.w) std::memset(to + b * pixel, 0, size_t(pixel) * sizeof(float));
    else std::memcpy(to + b * pixel, row + iw * pixel, size_t(pixel) * sizeof(float));
  }
}

// the rows of output pixels first .. first + count - 1 (counted row-major over [n, oh, ow]) into
// rows [count, kh·kw·c]
inline void im2col(const float* x, float* rows, const Patches& p, int64_t first, int64_t count) {
  const int64_t row = p.kh * p.kw * p.channels, run = p.kw * p.channels;
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t ow = i % p.out_w, oh = (i / p.out_w) % p.out_h, n = i / (p.out_w * p.out_h);
    const int64_t left = ow * p.stride_w - p.pad_w;
    float* to = rows + (i - first) * row;
    for (int64_t a = 0; a < p.kh; ++a, to += run) {
      const int64_t ih = oh * p.stride_h - p.pad_h + a;
      if (ih < 0 || ih >= p.h) std::memset(to, 0, size_t(run) * sizeof(float));
      else patch_run(x + (n * p.h + ih) * p.w * p.channels, to, left, p, p.channels);
    }
  }
}

}  // namespace af
