// The runtime's inside, shared by its rooms (native.h is its outside: what a program calls).
//
// A Partition::Impl holds a partition's values and its steps' executables. Its rooms:
//   values.cpp     values, views and layouts: memory descriptors, reorders, what a step writes where
//   steps.cpp      the step builders (Partition::conv, ::matmul, ...): each picks its primitive
//                  or the runtime's own loop, and records why (decide())
//   attention.cpp  the attention step (q·kᵀ, softmax, p·v and where the mask goes)
//   quantized.cpp  the int8 steps: quantize, dequantize, convolution and product of integers
//   own_loops.cpp  the runtime's own loops (softmax.h, gemv.h, depthwise.h, ...) as executables
//   arena.cpp      finalize() (the arena's placement, arguments bound) and run()
//   c_api.cpp      the C functions Python calls (native.h), thread pinning
//   runner.cpp     a model's streams: threads of its own that run the calls handed to them
// native.h includes no oneDNN header; this one does, and only the runtime's own files include it.
#pragma once

#include "native.h"
#include "gated.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace af {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// ---- values and views (values.cpp): memory descriptors

int64_t product(const Dims& shape, size_t from, size_t to);
memory::desc plain(const Dims& shape, dt type = dt::f32);
memory::desc any(const Dims& shape, dt type = dt::f32);
memory::desc channels_last(const Dims& shape, dt type);
dt type_of(Precision p);
memory::desc retyped(const memory::desc& md, dt type);
bool implemented_by(const dnnl::primitive_desc_base& pd, const char* prefix);
bool is_reference(const dnnl::primitive_desc_base& pd);
bool strided(const memory::desc& md);
bool next_index(Dims& at, const Dims& dims);
bool view_reshaped(const Dims& dims, const Dims& strides, const Dims& to, Dims& out);
std::pair<memory::desc, memory::desc> simplified(const memory::desc& src, const memory::desc& dst);
bool channel_minor(const memory::desc& md, int64_t& outer, int64_t& pixels, int64_t& inner);
Dims onednn_dilations(const Dims& d);
Dims grouped_weight(const Dims& onnx, int64_t groups);
// a transposed convolution's weight: oneDNN's dims, and ONNX's bytes seen in them
struct DeconvWeight {
  Dims dims;
  memory::desc as_held;
};
DeconvWeight deconv_weight(const Dims& onnx, int64_t groups);
size_t align_up(size_t n);
memory::desc in_order_of(const memory::desc& b, const memory::desc& a);

// ---- activations (steps.cpp): oneDNN's forms of the runtime's enums

dnnl::algorithm eltwise_alg(Alg a);
dnnl::algorithm binary_alg(Bin b);
Alg gate_after(const Acts& acts);
const char* gate_name(Alg gate);
Acts post_ops_of(const Acts& acts);

// whether the runtime computes `a` itself when it is last in a step (eltwise.h's gates)
constexpr bool runtime_gate(Alg a) {
  switch (a) {
#define AF_ALG_GATE(name, onednn, gate) \
  case Alg::name: return gate;
    AF_ALGS(AF_ALG_GATE)
#undef AF_ALG_GATE
  }
  return false;
}
#define AF_ALG_GATES(name, onednn, gate) +gate
static_assert(runtime_gate(Alg::SiLU) && runtime_gate(Alg::GeluTanh) && 0 AF_ALGS(AF_ALG_GATES) == 2,
              "gated.h computes SiLU and tanh-GELU, and no other gate");
#undef AF_ALG_GATES

// a gate over n values of x into y (gated.h), and the same summing each channel as it goes
template <class In, class Out>
void gate_into(Alg gate, const In* x, Out* y, int64_t n) {
  if (gate == Alg::SiLU) gated_into<Gate::SiLU>(x, y, n);
  else gated_into<Gate::GeluTanh>(x, y, n);
}

template <class In, class Out>
void gate_summed_into(Alg gate, const In* x, Out* y, int64_t outer, int64_t pixels, int64_t inner,
                      float* sums, float* partial) {
  if (gate == Alg::SiLU) gated_summed_into<Gate::SiLU>(x, y, outer, pixels, inner, sums, partial);
  else gated_summed_into<Gate::GeluTanh>(x, y, outer, pixels, inner, sums, partial);
}

// x·0 is 0 for a finite x and NaN for NaN and ±inf (arena.cpp)
bool all_finite(const float* p, int64_t n);

enum class Kind { Input, Output, Constant, Internal };

// a recurrent op's cell, as oneDNN names its primitives
enum class Cell { Lstm, Gru, LbrGru };

struct Val {
  Kind kind = Kind::Internal;
  int slot = -1;
  Dims shape;
  Layout layout = Layout::Any;
  int first = -1, last = -1;   // steps; set for internals by the plan, widened for temporaries
  bool bf16_only = false;      // only products in bf16 read it (value())
  Dims order;                  // its axes in memory, outermost first, when written dense (value())
  int alias = -1;              // a view of this value's bytes
  size_t view_bytes = 0;       // a view's bytes start this far into its alias's
  bool spread = false;         // a view through strides (a transpose, a block): not dense
  std::vector<int> copies;     // temporaries holding its values in other layouts (ensure())
  dt type = dt::f32;           // what it holds (typed(): the integers of a quantized model)
  bool has_md = false;
  memory::desc md;
  memory owned;                // constants: the caller's array, plain, read in place
  size_t offset = 0;
};

// an argument of a primitive: a value (seen through `md` if set) or an owned memory
struct Arg {
  int key;
  int value = -1;
  memory::desc md;
  bool has_md = false;
  memory mem;
};

// the arguments of an Exec whose gate writes a bf16 copy of its f32 destination, and the channel
// means it sums (the runtime's, not oneDNN's)
constexpr int GATED_INTO = DNNL_ARG_DST_1, MEANS_INTO = DNNL_ARG_DST_2;

// a global average pool summed by a gate as it writes (mean_in_gate): the gated values' layout
// (channel_minor), the real channels and where the means go
struct ChannelMeans {
  int64_t outer = 0, pixels = 0, inner = 0, batches = 0, channels = 0;
  memory out;                          // [N, C, 1...], f32 or bf16, bound by finalize()
  std::vector<float> sums, partial;    // outer·inner; the threads' own rows of them
};

struct Exec {
  dnnl::primitive prim;                // none: only the gate, over a value in place
  std::vector<Arg> args;
  std::unordered_map<int, memory> bound;
  std::string node;
  int step = -1;                       // the graph node it belongs to (node() calls counted)
  KernelFn fn = nullptr;               // a generated kernel instead of a primitive
  std::vector<memory> fn_in, fn_out;   // its operands, bound by finalize()
  Dims fn_sizes;                       // its run-time sizes
  std::function<void(Exec&)> own;      // the runtime's own loop instead (softmax.h), over bound
  Alg gate = Alg::None;                // then this activation over DNNL_ARG_DST, in place:
  memory gated;                        // that memory, bound by finalize():
  int64_t gated_values = 0;            // its values, padding included,
  bool gated_bf16 = false;             // bf16 (else f32);
  memory rounded;                      // or from it (f32) into this bf16 one (GATED_INTO)
  std::optional<ChannelMeans> means;   // summing the channel means of the result as it goes
  std::string kernel;                  // what runs: oneDNN's implementation, or the runtime's loop
};

// What a native partition's builds for every set of sizes share: its constants as its steps lay
// them out (a weight reordered for a convolution, in bf16 for a bf16 one), made once: a new size
// costs no reorder of weights a step lays out as before, and the builds hold one copy between
// them (the constants themselves are read where the caller gave them: the arrays stay alive with
// the program that holds them, backend/native/library.py). Builds on several threads at once
// take the lock; runs only read.
struct Shared {
  std::mutex lock;
  // (slot, part, layout, the values): part, where a step lays out a constant's parts apart
  std::vector<std::tuple<int, int, memory::desc, memory>> laid_out;

  template <class Make>
  memory as(int slot, const memory::desc& md, Make make, int part = -1) {
    std::lock_guard<std::mutex> held(lock);
    for (auto& [s, p, d, m] : laid_out)
      if (s == slot && p == part && d == md) return m;
    laid_out.emplace_back(slot, part, md, make());
    return std::get<3>(laid_out.back());
  }
};

// One execution context's intermediates, as large as the largest of its builds': the builds of a
// partition that run in one context (one caller at a time, library.py) share it, so a new size
// allocates no pages of its own; a build finds where the arena is now before each run. Calls in
// different contexts run at once, each in its own arena.
struct Arena {
  std::unique_ptr<char[]> storage;   // not zeroed: every step writes what it reads
  char* at = nullptr;                // 64-byte aligned
  size_t size = 0;
  uint64_t moves = 0;                // how often it grew (and moved)

  // the arena, grown to at least `bytes`
  char* grown_to(size_t bytes) {
    if (bytes > size || !at) {
      storage.reset(new char[bytes + 64]);
      at = reinterpret_cast<char*>((reinterpret_cast<size_t>(storage.get()) + 63) / 64 * 64);
      size = bytes;
      ++moves;
    }
    return at;
  }
};

// an int8 step's scales and zero points per tensor (its weight's scales are a constant)
struct Quantization {
  float src_scale;
  int32_t src_zero_point;
  float dst_scale;          // 0: an f32 result, not quantized
  int32_t dst_zero_point;
};

struct Partition::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  const void* const* constants;
  Shared* shared;
  Arena* context;   // the arena this build runs in; null: its own
  bool any_size;    // primitives made for any size where a step has them (any_size.cpp)
  std::unordered_map<int, Val> vals;
  std::vector<Exec> execs;
  int step = -1;
  int next_temp = 1 << 30;
  std::string node = "<start>";
  dt compute = dt::f32;   // the current step's precision (node())
  // per slot: every memory over the caller's buffer, with its offset into it
  std::vector<std::vector<std::pair<memory, size_t>>> input_mems, output_mems;
  std::vector<int64_t> input_elems;   // per input slot, its float32 elements
  std::unique_ptr<char[]> arena_storage;   // its own, where it has no context
  char* arena = nullptr;
  size_t arena_size = 0;
  uint64_t arena_moves = 0;                   // the context's, when its memories were bound
  std::vector<std::pair<memory, size_t>> in_arena;   // every memory over the arena, with its offset
  memory scratch;
  size_t scratch_size = 0;
  bool profiling = false;
  std::vector<double> step_ns;   // per step, the nanoseconds its primitives took while profiling
  // per step, what its builder chose where the plan left it open, and why (decide(): the plan
  // prints them under the node)
  std::vector<std::vector<std::string>> choices;

  Impl(const void* const* c, Shared* s, Arena* a, bool any) : constants(c), shared(s), context(a), any_size(any) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("node '" + node + "': " + what);
  }

  Val& val(int id) {
    auto it = vals.find(id);
    if (it == vals.end()) fail("value " + std::to_string(id) + " is not declared");
    return it->second;
  }

  int root(int id) {
    while (val(id).alias >= 0) id = val(id).alias;
    return id;
  }

  const memory::desc& md_of(int id) {
    Val& v = val(id);
    if (!v.has_md) fail("value " + std::to_string(id) + " is read before it is written");
    return v.md;
  }

  static Arg use(int key, int id) { return Arg{key, id}; }
  static Arg view(int key, int id, const memory::desc& md) {
    Arg a{key, id};
    a.md = md;
    a.has_md = true;
    return a;
  }
  static Arg owned(int key, const memory& m) {
    Arg a{key};
    a.mem = m;
    return a;
  }

  // ---- values and views (values.cpp)
  Val& declare(int id, Kind kind, int slot, const Dims& shape);
  int temp(const memory::desc& md);
  void reorder(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md);
  bool copy_rows(int src, const memory::desc& from, int dst, const memory::desc& to);
  int padded_rows(int src, int64_t padded, dt type);
  static dnnl::primitive_attr reorder_attr();
  int ensure(int src, const memory::desc& md);
  int dense(int src);
  int plain_residual(int residual);
  void view_of(int dst, int src, const memory::desc& md, size_t bytes = 0);
  dt result_type(int dst);
  memory::desc dense_result(int dst);
  int produce(int dst, const memory::desc& md);
  int write_over(int dst, int src, bool in_place);
  memory constant_as(int id, const memory::desc& md);
  memory constant_as(int id, const memory::desc& seen_as, const memory::desc& md);
  memory constant_part_as(int id, int part, int parts, const memory::desc& md);
  memory constant_laid_out(int id, int part, const memory::desc& seen_as, const memory::desc& md);
  memory reordered(memory from, const memory::desc& md);

  // ---- steps (steps.cpp)
  void decide(const std::string& choice);
  dnnl::primitive_attr attr(const Acts& acts, const std::vector<memory::desc>& binary_adds = {},
                            bool sum = false);
  void add(const dnnl::primitive_desc_base& pd, dnnl::primitive prim, std::vector<Arg> args,
           const Acts& acts = {});
  void gate_over_dst(Alg gate);
  void finish(int dst, int written);

  // ---- steps made for any size (any_size.cpp)
  std::optional<dnnl::matmul::primitive_desc> product_for_any_rows(const memory::desc& x_md,
                                                                   const memory::desc& w_md, bool bias,
                                                                   const memory::desc& y_md, const Acts& acts,
                                                                   bool sum = false);
  std::optional<dnnl::matmul::primitive_desc> matmul_for_any_size(const memory::desc& x, const memory::desc& w,
                                                                  const memory::desc& y,
                                                                  const dnnl::primitive_attr& attr);
  bool attention_for_any_size(int dst, int q, int k, int v, int mask, float scale);
  bool gather_for_any_size(int src, const memory::desc& from, int dst, const memory::desc& to);
  bool conv_for_any_size(int dst, int src, int w, int b, const Dims& strides, const Dims& pad_begin,
                         const Dims& pad_end, const Acts& acts);
  static constexpr int64_t PATCH_TILE_BYTES = int64_t(256) << 10;   // one thread's rows of patches

  // ---- recurrent (recurrent.cpp): c, c0 -1 but for an LSTM
  void recurrent(Cell cell, int y, int y_h, int y_c, int x, int w, int r, int b, int h0, int c0, int reverse);
  bool one_thread_each(Cell cell, int64_t dirs, bool reverse, int out, int h, int c, int x, int w, int r, int b,
                       int h0, int c0);
  // a time step's multiply-adds, batch·G·H·H: small (directions side by side on more than two
  // threads), tiny (a one-direction GRU on one thread)
  static constexpr int64_t SMALL_TIME_STEP = int64_t(1) << 20, TINY_TIME_STEP = int64_t(1) << 16;

  // ---- int8 (quantized.cpp)
  // dst_scale false: an f32 result (no output quantization)
  dnnl::primitive_attr int8_attr(const Acts& acts, int weight_mask, bool src_zero_point, bool dst_zero_point,
                                 bool dst_scale);
  void int8_args(std::vector<Arg>& args, int w_scales, const Quantization& q);

  // ---- the runtime's own loops (own_loops.cpp)
  bool own_softmax(const memory::desc& src_md, const memory::desc& dst_md, int axis) const;
  void softmax(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md, int axis,
               bool log, int mask = -1, const Dims& mask_dims = {}, int64_t cols = 0);
  bool scale_channels(int a, int b, int y);
  int gemv(int dst, int x, int w, int bias, const memory::desc& out, int64_t k, int64_t n);
  bool depthwise(int y, int x, int w, int b, const dnnl::convolution_forward::primitive_desc& pd,
                 const Dims& strides, const Dims& dilations, const Dims& pad_begin, int64_t groups,
                 const Acts& acts);
  bool sum_in_gate(int dst, int src);
  // A gated 1x1 convolution (stride 1, no padding, a constant weight; channels-last, a product
  // over pixels) whose f32 result would not stay in cache runs in tiles of pixels: each thread
  // convolves its own tiles (oneDNN run inside a parallel region runs on one thread) into an f32
  // buffer in its L2, and gates it from there into dst. Whole, the result goes to memory and is
  // read back by the gate (EfficientNet-B4's 24 -> 144 at 190x190 in bf16: 2.5 -> 1.5 ms;
  // smaller results stay in L3, 32 MB here, and whole is as fast: `python -m autofusion.benchmarks.conv_floor
  // --program gate_tiling_cost`). False, adding nothing, where the step does not qualify.
  static constexpr int64_t TILED_GATE_FROM = int64_t(16) << 20;   // bytes of f32 result
  static constexpr int64_t TILE_BYTES = int64_t(512) << 10;       // one thread's f32 tile
  bool gate_in_tiles(int dst, int src, int w, int b, const memory::desc& bias_md,
                     const dnnl::convolution_forward::primitive_desc& pd, const Acts& acts);
  void reduction(int x, int y, Reduce op, int64_t outer, int64_t run, int64_t inner);
  void fill(int y, float value);
  void pad_from_input(int x, int y, const Dims& begin, const Dims& end, PadMode mode);
  void column_softmax(int x, int y, int64_t outer, int64_t run, int64_t inner, bool log);
  void row_layer_norm(int x, int r, int scale, int bias, int y, int64_t rows, int64_t cols, float epsilon);
  bool gemv_takes_rows() const;

  // ---- the arena and the run (arena.cpp)
  void finalize();
  void run(void* const* inputs, void* const* outputs);
  void execute(Exec& e, std::vector<const float*>& in, std::vector<float*>& out);
  template <class In, class Out>
  void run_gate(Exec& e, const In* x, Out* y);
  void run_primitive(Exec& e);
  void profile(bool on);
};

}  // namespace af
