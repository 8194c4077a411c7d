// A 2-D convolution's patches as rows: for each output pixel (batch, row, column), the kh·kw
// input pixels its kernel covers, each pixel's channels in turn, zeros where the kernel hangs
// over the image's edge. The input is channels-last ([n, h, w, c]); the rows [n·oh·ow, kh·kw·c]
// times the weight seen as [kh·kw·c, o] are the convolution (any_size.cpp, a tile of rows at a
// time).
#pragma once

#include <cstdint>
#include <cstring>

namespace af {

struct Patches {
  int64_t batch, channels, h, w, out_h, out_w, kh, kw, stride_h, stride_w, pad_h, pad_w;
};

// the rows of output pixels first .. first + count - 1 (counted row-major over [n, oh, ow]) into
// rows [count, kh·kw·c]
inline void im2col(const float* x, float* rows, const Patches& p, int64_t first, int64_t count) {
  const int64_t row = p.kh * p.kw * p.channels, run = p.kw * p.channels;
  const size_t pixel_bytes = size_t(p.channels) * sizeof(float), run_bytes = size_t(run) * sizeof(float);
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t ow = i % p.out_w, oh = (i / p.out_w) % p.out_h, n = i / (p.out_w * p.out_h);
    const int64_t left = ow * p.stride_w - p.pad_w;
    float* to = rows + (i - first) * row;
    for (int64_t a = 0; a < p.kh; ++a, to += run) {
      const int64_t ih = oh * p.stride_h - p.pad_h + a;
      if (ih < 0 || ih >= p.h) {
        std::memset(to, 0, run_bytes);
        continue;
      }
      const float* image_row = x + (n * p.h + ih) * p.w * p.channels;
      if (left >= 0 && left + p.kw <= p.w) {   // the kernel's row inside the image: one run of pixels
        std::memcpy(to, image_row + left * p.channels, run_bytes);
        continue;
      }
      for (int64_t b = 0; b < p.kw; ++b) {
        const int64_t iw = left + b;
        if (iw < 0 || iw >= p.w) std::memset(to + b * p.channels, 0, pixel_bytes);
        else std::memcpy(to + b * p.channels, image_row + iw * p.channels, pixel_bytes);
      }
    }
  }
}

}  // namespace af
