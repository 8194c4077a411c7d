// What an attention's two products cost oneDNN 3.2's matmul on this CPU, in the forms
// the runtime's attention step (attention.cpp) chooses between:
//  - q·kᵀ with an additive mask as its binary post-op, against without it (the runtime's
//    softmax adds the mask as it reads each row: softmax.h);
//  - q·kᵀ + p·v over a number of keys that is not a multiple of 32, against the same keys
//    stored padded to one (what the runtime does where the products run on AMX), in bf16 and f32.
// Inputs are dense, k read transposed, scores f32, p in the compute type, as the runtime stores
// them. Built and run by `python -m autofusion.benchmarks.conv_floor --program attention_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "bench.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

// one product [heads, m, k] x [heads, k, n] -> [heads, m, n], b transposed in memory if asked,
// with the given post-ops; its median time and oneDNN's implementation
struct Product {
  matmul::primitive_desc pd;
  std::unordered_map<int, memory> args;
};

static Product product(const engine& eng, memory::dim heads, memory::dim m, memory::dim k, memory::dim n,
                       dt in, dt out, bool b_transposed, const memory::desc* mask) {
  memory::desc a({1, heads, m, k}, in, tag::abcd), b({1, heads, k, n}, in, b_transposed ? tag::abdc : tag::abcd),
      c({1, heads, m, n}, out, tag::abcd);
  primitive_attr attr;
  post_ops po;
  po.append_eltwise(algorithm::eltwise_linear, 0.125f, 0.f);
  if (mask) po.append_binary(algorithm::binary_add, *mask);
  attr.set_post_ops(po);
  Product p{matmul::primitive_desc(eng, a, b, c, attr), {}};
  for (auto [arg, md] : {std::pair{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}}) {
    memory mem(md, eng);
    std::memset(mem.get_data_handle(), 0, md.get_size());
    p.args[arg] = mem;
  }
  if (mask) {
    memory mem(*mask, eng);
    std::memset(mem.get_data_handle(), 0, mask->get_size());
    p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = mem;
  }
  return p;
}

static double time_us(const Product& p, stream& s) {
  matmul prim(p.pd);
  return median_us([&] { prim.execute(s, p.args); s.wait(); }, 600, 100);
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);

  // GPT-2's causal mask, [S, S] over 12 heads of 128 queries and keys, 64 wide
  printf("q·kᵀ with an additive mask as a post-op (bf16 q and k, f32 scores)\n");
  memory::desc causal({1, 1, 128, 128}, dt::f32, tag::abcd);
  Product plain = product(eng, 12, 128, 64, 128, dt::bf16, dt::f32, true, nullptr);
  Product masked = product(eng, 12, 128, 64, 128, dt::bf16, dt::f32, true, &causal);
  printf("  GPT-2 [12,128,64]  %-22s  no mask %7.1f us  mask post-op %7.1f us\n", plain.pd.impl_info_str(),
         time_us(plain, s), time_us(masked, s));

  printf("q·kᵀ + p·v over the keys as they are against padded to a multiple of 32\n");
  struct Case { const char* what; memory::dim heads, queries, keys; };
  for (dt type : {dt::bf16, dt::f32})
    for (auto [what, heads, queries, keys] :
         {Case{"ViT-B/16", 12, 197, 197}, Case{"50 tokens", 12, 50, 50}, Case{"77 keys", 8, 1024, 77},
          Case{"77 keys, 4096 queries", 8, 4096, 77}, Case{"7 keys", 12, 1024, 7}}) {
      const memory::dim padded = (keys + 31) / 32 * 32;
      auto both = [&](memory::dim n) {
        Product qk = product(eng, heads, queries, 64, n, type, dt::f32, true, nullptr);
        Product pv = product(eng, heads, queries, n, 64, type, type, false, nullptr);
        return std::pair{time_us(qk, s) + time_us(pv, s), qk.pd.impl_info_str()};
      };
      auto [as_is, impl] = both(keys);
      auto [pad, _] = both(padded);
      printf("  %-4s %-22s [%ld,%ld,64] %-22s  %3ld keys %8.1f us  padded to %3ld %8.1f us  (%.2fx)\n",
             type == dt::bf16 ? "bf16" : "f32", what, long(heads), long(queries), impl, long(keys), as_is,
             long(padded), pad, as_is / pad);
    }
}
