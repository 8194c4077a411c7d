// elementwise-8's generated kernel (autofusion/benchmarks/micro.py: SiLU, a per-channel add, ReLU, a scale,
// tanh, a residual subtract, |·| over 1x64x112x112) as kernels.py writes it, one vector a step
// and 2, 4 and 8 vectors a step (AF_EACH, each statement over all of them in turn), side by side
// in one process: a sigmoid and a tanh are chains of ~20 dependent operations, and the
// out-of-order core overlaps the chains of independent vectors only when they sit side by side.
// The best of 200 calls each, six times. Built and run by
// `python -m autofusion.benchmarks.conv_floor --program unroll_cost`.
#include <chrono>
#include <cstdio>
#include <vector>

#include "scalar.h"

using namespace af;

template <int U>
void elementwise_8(const float* in0, const float* in1, float* out0) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < 64; ++i0) {
    for (int64_t i1 = 0; i1 < 12544; i1 += 16 * U) {
      vec16 x0[U], t0[U], t1[U], t2[U], t3[U], t4[U], t5[U], t6[U];
      AF_EACH(U) x0[u] = load16(&in0[i0 * 12544 + i1 + 16 * u], ALL_LANES);
      const float x1 = in1[i0];
      AF_EACH(U) t0[u] = af_silu(x0[u]);
      AF_EACH(U) t1[u] = (t0[u] + x1);
      AF_EACH(U) t2[u] = af_relu(t1[u]);
      AF_EACH(U) t3[u] = (t2[u] * 0.5f);
      AF_EACH(U) t4[u] = tanhf(t3[u]);
      AF_EACH(U) t5[u] = (t4[u] - x0[u]);
      AF_EACH(U) t6[u] = fabsf(t5[u]);
      AF_EACH(U) store16(&out0[i0 * 12544 + i1 + 16 * u], t6[u], ALL_LANES);
    }
  }
}

int main() {
  const int64_t n = 64 * 12544;
  std::vector<float> x(n), shift(64), y(n), first(n);
  for (int64_t i = 0; i < n; ++i) x[i] = float(i % 1000) * 0.01f - 5.f;
  for (int c = 0; c < 64; ++c) shift[c] = float(c % 9) * 0.02f - 0.08f;
  void (*kernels[])(const float*, const float*, float*) = {elementwise_8<1>, elementwise_8<2>,
                                                           elementwise_8<4>, elementwise_8<8>};
  elementwise_8<1>(x.data(), shift.data(), first.data());
  std::printf("%-8s %10s %10s %10s %10s   (ms, the best of 200 calls)\n", "round", "1 vector", "2 vectors",
              "4 vectors", "8 vectors");
  for (int round = 1; round <= 6; ++round) {
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int call = 0; call < 200; ++call)
      for (int k = 0; k < 4; ++k) {
        auto start = std::chrono::steady_clock::now();
        kernels[k](x.data(), shift.data(), y.data());
        best[k] = std::min(best[k], std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
    std::printf("%-8d %10.3f %10.3f %10.3f %10.3f\n", round, best[0], best[1], best[2], best[3]);
  }
  for (int64_t i = 0; i < n; ++i)
    if (y[i] != first[i]) {
      std::printf("8 vectors a step differ from 1 at %lld\n", (long long)i);
      return 1;
    }
}
