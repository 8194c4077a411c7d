// The oneDNN floor of the conv-chain micro benchmark: 64 1x1 Conv(64->64) + bias + ReLU on
// 1x64x14x14, each one oneDNN 3.2 primitive created once, run back to back with no framework
// around them. Built and run by `python -m autofusion.benchmarks.conv_floor`; prints the median of 200
// chains for each activation layout. BatchNorm is absent: level 2 folds it into the weights.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;

constexpr int kBlocks = 64, kChannels = 64, kSize = 14, kRuns = 200;

double median_chain_us(std::vector<primitive>& prims,
                       std::vector<std::unordered_map<int, memory>>& args, stream& s) {
  std::vector<double> us;
  for (int r = 0; r < kRuns + 20; ++r) {   // the first 20: warm-up
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < prims.size(); ++i) prims[i].execute(s, args[i]);
    s.wait();
    if (r >= 20)
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  post_ops relu;
  relu.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(relu);
  for (auto [name, layout] : {std::pair{"any", tag::any}, {"nhwc", tag::nhwc}, {"nChw16c", tag::nChw16c}}) {
    memory::desc act({1, kChannels, kSize, kSize}, memory::data_type::f32, layout);
    memory::desc w({kChannels, kChannels, 1, 1}, memory::data_type::f32, tag::any);
    memory::desc b({kChannels}, memory::data_type::f32, tag::a);
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference,
                                           algorithm::convolution_direct, act, w, b, act,
                                           {1, 1}, {0, 0}, {0, 0}, attr);
    std::vector<primitive> prims;
    std::vector<std::unordered_map<int, memory>> args;
    memory x(pd.src_desc(), eng);
    for (int i = 0; i < kBlocks; ++i) {
      memory wm(pd.weights_desc(), eng), bm(b, eng), y(pd.dst_desc(), eng);
      std::fill_n(static_cast<float*>(wm.get_data_handle()), wm.get_desc().get_size() / 4, 0.01f);
      std::fill_n(static_cast<float*>(bm.get_data_handle()), kChannels, 0.f);
      prims.push_back(convolution_forward(pd));
      args.push_back({{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, y}});
      x = y;
    }
    double us = median_chain_us(prims, args, s);
    std::printf("%-8s %-24s %8.1f us per chain  %6.2f us per conv\n", name, pd.impl_info_str(), us,
                us / kBlocks);
  }
}
