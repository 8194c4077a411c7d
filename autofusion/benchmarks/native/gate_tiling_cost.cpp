// What a SiLU after a 1x1 convolution costs when the runtime gates the whole result after the
// convolution has written all of it (the result f32 in memory, then the gate into the bf16 or f32
// destination) against tiles of pixels, each thread convolving its own tile with oneDNN inside
// the parallel region (so on one thread) into an f32 buffer that stays in its cache and gating it
// from there into the destination (the runtime's own_loops.cpp gate_in_tiles, where the f32 result reaches 16 MB). EfficientNet-B4's expansions (the 1x1
// convolutions its SiLUs follow), bf16 and fp32; the tiled result is checked against the whole
// one. (A tile length oneDNN 3.2 runs on its reference kernel shows as such: the runtime refuses
// to tile there.) Built and run by `python -m autofusion.benchmarks.conv_floor --program gate_tiling_cost`.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "bench.h"
#include "gated.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Pointwise { int in, out, size; };
const Pointwise EXPANDS[] = {{24, 144, 190}, {32, 192, 95}, {56, 336, 48}, {112, 672, 24}, {160, 960, 24},
                             {272, 1632, 12}};

primitive_attr user_scratchpad() {
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  return attr;
}

convolution_forward::primitive_desc pointwise(engine& eng, int in, int out, int h, int w, dt type, dt result,
                                              const memory::desc& weights) {
  return convolution_forward::primitive_desc(
      eng, prop_kind::forward_inference, algorithm::convolution_direct,
      memory::desc({1, in, h, w}, type, tag::nhwc), weights, memory::desc({out}, dt::f32, tag::x),
      memory::desc({1, out, h, w}, result, tag::nhwc), {1, 1}, {0, 0}, {0, 0}, user_scratchpad());
}

double value_at(const memory& m, int64_t i) {
  if (m.get_desc().get_data_type() == dt::bf16) return af::bf16_to_f32(static_cast<const uint16_t*>(m.get_data_handle())[i]);
  return static_cast<const float*>(m.get_data_handle())[i];
}

void fill(memory& m, float scale) {
  const int64_t n = int64_t(m.get_desc().get_size() / memory::data_type_size(m.get_desc().get_data_type()));
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale * std::sin(0.37f * float(i % 1009));
    if (m.get_desc().get_data_type() == dt::bf16) static_cast<uint16_t*>(m.get_data_handle())[i] = af::f32_to_bf16(v);
    else static_cast<float*>(m.get_data_handle())[i] = v;
  }
}

template <class Out>
void gate(const float* x, Out* y, int64_t n) {
  af::gated_into<af::Gate::SiLU>(x, y, n);
}

void compare(engine& eng, stream& s, const Pointwise& c, dt type, int tile_bytes) {
  const int pixels = c.size * c.size;
  // as the runtime splits them: evenly long tiles of at most about tile_bytes of f32 result
  const int even = int((int64_t(pixels) * 4 * c.out + tile_bytes - 1) / tile_bytes),
            tile = std::max(64, (pixels + even - 1) / even);
  // the whole convolution, as the runtime builds it: an f32 result, then the gate into dst
  auto whole = pointwise(eng, c.in, c.out, c.size, c.size, type, dt::f32,
                         memory::desc({c.out, c.in, 1, 1}, type, tag::any));
  auto bare = pointwise(eng, c.in, c.out, c.size, c.size, type, type, memory::desc({c.out, c.in, 1, 1}, type, tag::any));
  memory src(whole.src_desc(), eng), wei(whole.weights_desc(), eng), bias({{c.out}, dt::f32, tag::x}, eng),
      f32_result(whole.dst_desc(), eng), dst(bare.dst_desc(), eng), tiled_dst(bare.dst_desc(), eng),
      pad(whole.scratchpad_desc(), eng), bare_wei(bare.weights_desc(), eng), bare_pad(bare.scratchpad_desc(), eng);
  fill(src, 1.f), fill(wei, 0.3f), fill(bias, 0.1f);
  convolution_forward whole_conv(whole), bare_conv(bare);
  const int64_t values = int64_t(pixels) * c.out;
  auto run_whole = [&] {
    whole_conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_BIAS, bias},
                           {DNNL_ARG_DST, f32_result}, {DNNL_ARG_SCRATCHPAD, pad}});
    s.wait();
    const float* x = static_cast<const float*>(f32_result.get_data_handle());
    if (type == dt::bf16) gate(x, static_cast<uint16_t*>(dst.get_data_handle()), values);
    else gate(x, static_cast<float*>(dst.get_data_handle()), values);
  };
  auto run_bare = [&] {
    bare_conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, bare_wei}, {DNNL_ARG_BIAS, bias},
                          {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, bare_pad}});
    s.wait();
  };
  // a [1, in, 1, tile] convolution, the same weights, and one for the last tile
  const int tiles = (pixels + tile - 1) / tile, last = pixels - (tiles - 1) * tile;
  auto part = pointwise(eng, c.in, c.out, 1, tile, type, dt::f32, whole.weights_desc());
  auto rest = pointwise(eng, c.in, c.out, 1, last, type, dt::f32, whole.weights_desc());
  convolution_forward part_conv(part), rest_conv(rest);
  const int threads = omp_get_max_threads();
  std::vector<memory> bufs, pads, ins;
  std::vector<stream> streams;
  for (int t = 0; t < threads; ++t) {
    bufs.emplace_back(part.dst_desc(), eng);
    pads.emplace_back(part.scratchpad_desc().get_size() > rest.scratchpad_desc().get_size() ? part.scratchpad_desc()
                                                                                            : rest.scratchpad_desc(), eng);
    ins.emplace_back(part.src_desc(), eng, nullptr);
    streams.emplace_back(eng);
  }
  const size_t in_bytes = memory::data_type_size(type) * c.in, out_bytes = memory::data_type_size(type) * c.out;
  auto run_tiled = [&] {
#pragma omp parallel
    {
      const int t = omp_get_thread_num();
#pragma omp for schedule(static)
      for (int i = 0; i < tiles; ++i) {
        const int n = i + 1 == tiles ? last : tile;
        ins[t].set_data_handle(static_cast<char*>(src.get_data_handle()) + size_t(i) * tile * in_bytes);
        (n == tile ? part_conv : rest_conv)
            .execute(streams[t], {{DNNL_ARG_SRC, ins[t]}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_BIAS, bias},
                                  {DNNL_ARG_DST, bufs[t]}, {DNNL_ARG_SCRATCHPAD, pads[t]}});
        const float* x = static_cast<const float*>(bufs[t].get_data_handle());
        char* y = static_cast<char*>(tiled_dst.get_data_handle()) + size_t(i) * tile * out_bytes;
        const int64_t count = int64_t(n) * c.out;
        // one thread's share, in a parallel region already: gated_into's own region runs on one
        if (type == dt::bf16) gate(x, reinterpret_cast<uint16_t*>(y), count);
        else gate(x, reinterpret_cast<float*>(y), count);
      }
    }
  };
  run_whole();
  run_tiled();
  double worst = 0;
  for (int64_t i = 0; i < values; ++i) worst = std::max(worst, std::fabs(value_at(dst, i) - value_at(tiled_dst, i)));
  const double t_bare = median_us(run_bare, 40, 10), t_whole = median_us(run_whole, 40, 10),
               t_tiled = median_us(run_tiled, 40, 10);
  std::printf("%s 1x1 %4d -> %4d x %3d, tiles of %4d pixels: convolution alone %7.1f us | then the gate %7.1f us "
              "| tiled %7.1f us (%.2fx; max |diff| %.1e) [%s]\n",
              type == dt::bf16 ? "bf16" : "fp32", c.in, c.out, c.size, tile, t_bare, t_whole, t_tiled,
              t_whole / t_tiled, worst, part.impl_info_str());
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  for (dt type : {dt::bf16, dt::f32})
    for (const Pointwise& c : EXPANDS)
      for (int tile_bytes : {128 << 10, 512 << 10})   // 512 KB: the runtime's
        compare(eng, s, c, type, tile_bytes);
}
