// What the bare oneDNN programs here share (run by `python -m autofusion.benchmarks.conv_floor`): a median
// timer and EfficientNet-B4's depthwise convolution shapes.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

// the median of `runs` timed calls of run(), in µs, after `warmup` untimed ones; before() runs
// untimed ahead of each timed call
template <class F, class B>
double median_us(F run, int runs, int warmup, B before) {
  for (int r = 0; r < warmup; ++r) run();
  std::vector<double> us;
  for (int r = 0; r < runs; ++r) {
    before();
    auto start = std::chrono::steady_clock::now();
    run();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

template <class F>
double median_us(F run, int runs, int warmup) {
  return median_us(run, runs, warmup, [] {});
}

// x [1, channels, size, size] through a k x k depthwise convolution of this stride, padding k / 2
struct Depthwise { int channels, size, k, stride; };

inline const std::vector<Depthwise> EFFICIENTNET_B4_DEPTHWISE = {
    {48, 190, 3, 1}, {144, 190, 3, 2}, {192, 95, 3, 1}, {192, 95, 5, 2}, {336, 48, 5, 1}, {336, 48, 3, 2},
    {672, 24, 3, 1}, {672, 24, 5, 1}, {960, 24, 5, 2}, {1632, 12, 5, 1}, {1632, 12, 3, 1}};

// MobileNetV3-L's fifteen, in order (the 14x14 3x3 of 184 channels twice)
inline const std::vector<Depthwise> MOBILENET_V3_LARGE_DEPTHWISE = {
    {16, 112, 3, 1}, {64, 112, 3, 2}, {72, 56, 3, 1}, {72, 56, 5, 2}, {120, 28, 5, 1}, {120, 28, 5, 1},
    {240, 28, 3, 2}, {200, 14, 3, 1}, {184, 14, 3, 1}, {184, 14, 3, 1}, {480, 14, 3, 1}, {672, 14, 3, 1},
    {672, 14, 5, 2}, {960, 7, 5, 1}, {960, 7, 5, 1}};
