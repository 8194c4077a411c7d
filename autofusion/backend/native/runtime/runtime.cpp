// The native runtime: Partition over oneDNN primitives (see native.h).
//
// Creation follows OpenVINO's order: each step, in execution order, creates its primitive
// descriptors with the memory descriptors its inputs already have (oneDNN chooses the layout
// of what it writes where the plan says Any), inserts a reorder only where a primitive needs
// another layout than its input has or where the plan wants a value Plain, and reorders
// constant weights once into the layout the primitive wants. finalize() then sizes every
// intermediate, places them in one arena by their lifetimes (two values share bytes only if
// their step ranges do not meet) and binds the primitives' arguments. run() binds the caller's
// buffers and executes the primitives in order; with profiling on it also adds each primitive's
// time to its step's count (af_profile, af_step_times). A step whose last activation is SiLU
// or tanh-GELU runs its primitive without it and the activation after, over the result in place
// (gated.h); a softmax or a layer norm over dense rows is the runtime's own loop (softmax.h,
// layernorm.h). A transpose, a block or a reshape makes no copy: its value is a view of its
// input's bytes (an alias, a byte offset, strides), copied once by the first reader that needs
// it dense (ensure(), dense()).
#include "native.h"
#include "channel_scale.h"
#include "depthwise.h"
#include "gated.h"
#include "gemv.h"
#include "layernorm.h"
#include "reduce.h"
#include "softmax.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <tuple>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

namespace af {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

thread_local std::string last_error;

// x·0 is 0 for a finite x and NaN for NaN and ±inf: one vectorised pass, no branch; a large
// array split over the OpenMP team (the scan reads memory a model's run left cold)
bool all_finite(const float* p, int64_t n) {
  float zero = 0.f;
#pragma omp parallel for simd reduction(+ : zero) schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) zero += p[i] * 0.f;
  return zero == 0.f;
}

// The calling thread held on one CPU while it lives, the one no OpenMP worker is pinned to
// (affinity.py says why), and given its own set back after; not where that set is one CPU or
// lacks it, or cpu < 0.
class CallerHeld {
 public:
  explicit CallerHeld(int cpu) {
    if (cpu < 0 || pthread_getaffinity_np(pthread_self(), sizeof own_, &own_) != 0) return;
    if (CPU_COUNT(&own_) < 2 || !CPU_ISSET(cpu, &own_)) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    held_ = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~CallerHeld() {
    if (held_) pthread_setaffinity_np(pthread_self(), sizeof own_, &own_);
  }
  CallerHeld(const CallerHeld&) = delete;
  CallerHeld& operator=(const CallerHeld&) = delete;

 private:
  cpu_set_t own_;
  bool held_ = false;
};

// the product of dims [from, to) of a shape
int64_t product(const Dims& shape, size_t from, size_t to) {
  return std::accumulate(shape.begin() + from, shape.begin() + to, int64_t(1), std::multiplies<>());
}

memory::desc plain(const Dims& shape, dt type = dt::f32) {   // dense row-major
  Dims strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return memory::desc(shape, type, strides);
}

memory::desc any(const Dims& shape, dt type = dt::f32) { return memory::desc(shape, type, tag::any); }

// channels innermost (nwc, nhwc, ndhwc): the layout oneDNN's brgemm convolutions read and write
memory::desc channels_last(const Dims& shape, dt type) {
  const tag t = shape.size() == 3 ? tag::acb : shape.size() == 4 ? tag::acdb : tag::acdeb;
  return memory::desc(shape, type, t);
}

dt type_of(Precision p) { return p == Precision::BF16 ? dt::bf16 : dt::f32; }

// md's layout with another data type: strides carry over; a blocked layout is found among the
// tags oneDNN picks for activations (nChw16c and kin), else the values go plain.
memory::desc retyped(const memory::desc& md, dt type) {
  if (md.get_data_type() == type) return md;
  Dims dims = md.get_dims();
  if (md.get_format_kind() == memory::format_kind::blocked && md.get_inner_nblks() == 0)
    return memory::desc(dims, type, md.get_strides());
  for (tag t : {tag::aBc16b, tag::aBcd16b, tag::aBcde16b, tag::aBc8b, tag::aBcd8b, tag::aBcde8b,
                tag::aBc4b, tag::aBcd4b, tag::aBcde4b}) {
    if (int(dims.size()) != (t == tag::aBc16b || t == tag::aBc8b || t == tag::aBc4b ? 3
                             : t == tag::aBcde16b || t == tag::aBcde8b || t == tag::aBcde4b ? 5 : 4))
      continue;
    if (memory::desc(dims, md.get_data_type(), t) == md) return memory::desc(dims, type, t);
  }
  return plain(dims, type);
}

// whether oneDNN runs pd with the implementation family named `prefix` ("ref", "brg", "jit_dw")
bool implemented_by(const dnnl::primitive_desc_base& pd, const char* prefix) {
  return std::string(pd.impl_info_str()).rfind(prefix, 0) == 0;
}

// oneDNN's reference implementation: what it picks where no fast kernel takes the problem
bool is_reference(const dnnl::primitive_desc_base& pd) { return implemented_by(pd, "ref"); }

// strides without inner blocks: row-major, permuted (a transpose seen in place) or with gaps (a
// block of a larger array)
bool strided(const memory::desc& md) {
  return md.get_format_kind() == memory::format_kind::blocked && md.get_inner_nblks() == 0;
}

// the next of the indices `at` over the leading at.size() axes of dims, row-major: false after
// the last
bool next_index(Dims& at, const Dims& dims) {
  for (size_t i = at.size(); i-- > 0;) {
    if (++at[i] < dims[i]) return true;
    at[i] = 0;
  }
  return false;
}

// The strides that show the values of (dims, strides), in row-major order, with the dims `to`,
// as a view reshape: each run of axes merged or split must be contiguous in memory. False when
// one is not (the values must be copied first).
bool view_reshaped(const Dims& dims, const Dims& strides, const Dims& to, Dims& out) {
  out.assign(to.size(), 0);
  int j = int(to.size()) - 1;
  int64_t base = 1, run = 1, seen = 1;   // the innermost stride of this run; values in and out
  for (int i = int(dims.size()) - 1; i >= 0; --i) {
    if (dims[i] == 1) continue;
    if (run == 1) base = strides[i];
    run *= dims[i];
    // the run goes on while the next axis out steps over exactly this run's values
    int k = i - 1;
    while (k >= 0 && dims[k] == 1) --k;
    if (k >= 0 && strides[k] == run * base) continue;
    for (; j >= 0 && (seen < run || to[j] == 1); --j) {
      out[j] = seen * base;
      seen *= to[j];
    }
    if (seen != run) return false;
    run = seen = 1;
  }
  for (; j >= 0; --j) {
    if (to[j] != 1) return false;
    out[j] = seen * base;
  }
  return true;
}

// (src, dst) of a reorder between two strided layouts of one shape, with the axes of size 1
// dropped and the axes contiguous in both merged: the same copy, which oneDNN's fast kernels
// take where a 5-D form with unit axes falls to a slow one
std::pair<memory::desc, memory::desc> simplified(const memory::desc& src, const memory::desc& dst) {
  if (!strided(src) || !strided(dst) || src.get_dims() != dst.get_dims() ||
      src.get_submemory_offset() || dst.get_submemory_offset())
    return {src, dst};
  Dims dims, s, d;
  const Dims all = src.get_dims(), ss = src.get_strides(), ds = dst.get_strides();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == 1) continue;
    if (!dims.empty() && s.back() == ss[i] * all[i] && d.back() == ds[i] * all[i]) {
      dims.back() *= all[i];
      s.back() = ss[i];
      d.back() = ds[i];
      continue;
    }
    dims.push_back(all[i]);
    s.push_back(ss[i]);
    d.push_back(ds[i]);
  }
  if (dims.empty()) dims = s = d = {1};
  return {memory::desc(dims, src.get_data_type(), s), memory::desc(dims, dst.get_data_type(), d)};
}

// md as `outer` blocks of `pixels` rows of `inner` values with channels innermost, the layout
// gated_summed_into sums over (nhwc: N × HW × C; nChw16c: N·⌈C/16⌉ × HW × 16); false for any
// other (nchw, a view with gaps, blocks of another axis)
bool channel_minor(const memory::desc& md, int64_t& outer, int64_t& pixels, int64_t& inner) {
  const int nd = md.get_ndims();
  if (md.get_format_kind() != memory::format_kind::blocked || nd < 3 || md.get_submemory_offset())
    return false;
  const int blocks = md.get_inner_nblks();
  if (blocks > 1 || (blocks == 1 && md.get_inner_idxs()[0] != 1)) return false;
  const Dims dims = md.get_dims(), padded = md.get_padded_dims(), s = md.get_strides();
  inner = blocks ? md.get_inner_blks()[0] : dims[1];
  pixels = 1;
  for (int i = nd - 1; i >= 2; --i) {
    if (s[i] != inner * pixels) return false;
    pixels *= dims[i];
  }
  if (s[1] != (blocks ? inner * pixels : 1) || s[0] != padded[1] * pixels) return false;
  outer = dims[0] * (padded[1] / inner);
  return true;
}

dnnl::algorithm eltwise_alg(Alg a) {
  using A = dnnl::algorithm;
  switch (a) {
    case Alg::Relu: return A::eltwise_relu;
    case Alg::Clip: return A::eltwise_clip_v2;
    case Alg::Logistic: return A::eltwise_logistic;
    case Alg::Tanh: return A::eltwise_tanh;
    case Alg::HardSigmoid: return A::eltwise_hardsigmoid;
    case Alg::HardSwish: return A::eltwise_hardswish;
    case Alg::Elu: return A::eltwise_elu;
    case Alg::SiLU: return A::eltwise_swish;   // alpha 1 (a SiLU not last, as a post-op)
    case Alg::GeluErf: return A::eltwise_gelu_erf;
    case Alg::GeluTanh: return A::eltwise_gelu_tanh;
    case Alg::Exp: return A::eltwise_exp;
    case Alg::Log: return A::eltwise_log;
    case Alg::Sqrt: return A::eltwise_sqrt;
    case Alg::Abs: return A::eltwise_abs;
    case Alg::Linear: return A::eltwise_linear;
    case Alg::SoftRelu: return A::eltwise_soft_relu;
    case Alg::Round: return A::eltwise_round;
    case Alg::Mish: return A::eltwise_mish;
    case Alg::Square: return A::eltwise_square;
    case Alg::None: break;
  }
  throw std::runtime_error("no eltwise algorithm");
}

dnnl::algorithm binary_alg(Bin b) {
  using A = dnnl::algorithm;
  switch (b) {
    case Bin::Add: return A::binary_add;
    case Bin::Sub: return A::binary_sub;
    case Bin::Mul: return A::binary_mul;
    case Bin::Div: return A::binary_div;
    case Bin::Max: return A::binary_max;
    case Bin::Min: return A::binary_min;
  }
  throw std::runtime_error("no binary algorithm");
}

// a last SiLU or tanh-GELU the runtime computes itself, after the primitive (gated.h); the
// rest are oneDNN post-ops
Alg gate_after(const Acts& acts) {
  if (acts.empty() || !VECTORISED) return Alg::None;
  Alg last = acts.back().alg;
  return last == Alg::SiLU || last == Alg::GeluTanh ? last : Alg::None;
}

const char* gate_name(Alg gate) { return gate == Alg::SiLU ? "runtime silu" : "runtime tanh-gelu"; }

Acts post_ops_of(const Acts& acts) {
  return gate_after(acts) != Alg::None ? Acts(acts.begin(), acts.end() - 1) : acts;
}

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

// oneDNN counts dilation from 0 (dense), ONNX from 1
Dims onednn_dilations(const Dims& d) {
  Dims out(d);
  for (auto& x : out) x -= 1;
  return out;
}

size_t align_up(size_t n) { return (n + 63) / 64 * 64; }

// A dense operand `b` seen with the axis order of `a`'s strides (nhwc for an nhwc `a`): the same
// bytes where b broadcasts (its size-1 axes have no stride that matters), and the form oneDNN's
// fast binary kernels want; b as it is where a has inner blocks or b is not dense.
memory::desc in_order_of(const memory::desc& b, const memory::desc& a) {
  if (a.get_format_kind() != memory::format_kind::blocked || a.get_inner_nblks() != 0 ||
      b.get_format_kind() != memory::format_kind::blocked || b.get_inner_nblks() != 0 ||
      a.get_ndims() != b.get_ndims() || b != plain(b.get_dims()))
    return b;
  Dims sa = a.get_strides(), dims = b.get_dims();
  std::vector<int> order(dims.size());   // axes from the outermost stride to the innermost
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return sa[x] > sa[y]; });
  std::vector<int> moved;   // b's axes of size > 1, in a's order: b's bytes only if ascending
  for (int x : order)
    if (dims[x] > 1) moved.push_back(x);
  if (!std::is_sorted(moved.begin(), moved.end())) return b;
  Dims strides(dims.size());
  int64_t step = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = step;
    step *= dims[order[i]];
  }
  return memory::desc(dims, dt::f32, strides);
}

}  // namespace

enum class Kind { Input, Output, Constant, Internal };

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

}  // namespace af

// A native partition's constants as its steps lay them out (a weight reordered for a
// convolution, in bf16 for a bf16 one), made once and shared by the partition's builds for every
// set of sizes: a new size costs no reorder of weights a step lays out as before, and the
// builds hold one copy between them. Partitions read the constants themselves where the caller
// gave them (the arrays stay alive with the program that holds them: backend/native/library.py).
struct af::Constants {
  std::mutex lock;
  std::vector<std::tuple<int, memory::desc, memory>> laid_out;   // (slot, layout, the values)

  template <class Make>
  memory as(int slot, const memory::desc& md, Make make) {
    std::lock_guard<std::mutex> held(lock);
    for (auto& [s, d, m] : laid_out)
      if (s == slot && d == md) return m;
    laid_out.emplace_back(slot, md, make());
    return std::get<2>(laid_out.back());
  }
};

namespace af {

struct Partition::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  const void* const* constants;
  Constants* shared;
  std::unordered_map<int, Val> vals;
  std::vector<Exec> execs;
  int step = -1;
  int next_temp = 1 << 30;
  std::string node = "<start>";
  dt compute = dt::f32;   // the current step's precision (node())
  // per slot: every memory over the caller's buffer, with its offset into it
  std::vector<std::vector<std::pair<memory, size_t>>> input_mems, output_mems;
  std::vector<int64_t> input_elems;   // per input slot, its float32 elements
  std::unique_ptr<char[]> arena_storage;   // not zeroed: every step writes what it reads
  char* arena = nullptr;
  size_t arena_size = 0;
  memory scratch;
  size_t scratch_size = 0;
  bool profiling = false;
  std::vector<double> step_ns;   // per step, the nanoseconds its primitives took while profiling

  Impl(const void* const* c, Constants* s) : constants(c), shared(s) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("node '" + node + "': " + what);
  }

  // a value bound by slot (input, output, constant): dense, its layout fixed
  Val& declare(int id, Kind kind, int slot, const Dims& shape) {
    Val v;
    v.kind = kind;
    v.slot = slot;
    v.shape = shape;
    v.layout = Layout::Plain;
    v.md = plain(shape);
    v.has_md = true;
    return vals[id] = v;
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

  // `sum`: the destination's own values are added first (a residual the result is written over)
  dnnl::primitive_attr attr(const Acts& acts, const std::vector<memory::desc>& binary_adds = {},
                            bool sum = false) {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    if (sum) po.append_sum(1.f);
    for (const auto& md : binary_adds) po.append_binary(dnnl::algorithm::binary_add, md);
    for (const auto& act : post_ops_of(acts))
      if (act.alg != Alg::None) po.append_eltwise(eltwise_alg(act.alg), act.alpha, act.beta);
    a.set_post_ops(po);
    return a;
  }

  int temp(const memory::desc& md) {
    int id = next_temp++;
    Val v;
    v.md = md;
    v.has_md = true;
    v.first = v.last = step;
    v.shape = md.get_dims();
    vals[id] = v;
    return id;
  }

  // a primitive; with `acts` (those its attr() was made from), the gate after it
  void add(const dnnl::primitive_desc_base& pd, dnnl::primitive prim, std::vector<Arg> args,
           const Acts& acts = {}) {
    scratch_size = std::max(scratch_size, pd.scratchpad_desc().get_size());
    execs.push_back(Exec{std::move(prim), std::move(args), {}, node, step});
    const bool moves = pd.get_kind() == dnnl::primitive::kind::reorder;
    execs.back().kernel = std::string(moves ? "reorder " : "") + pd.impl_info_str();
    if (Alg gate = gate_after(acts); gate != Alg::None) gate_over_dst(gate);
  }

  // the gate over the last exec's DNNL_ARG_DST, in place, after its primitive
  void gate_over_dst(Alg gate) {
    Exec& e = execs.back();
    for (const Arg& a : e.args)
      if (a.key == DNNL_ARG_DST) {
        dt type = (a.has_md ? a.md : md_of(a.value)).get_data_type();
        if (type != dt::f32 && type != dt::bf16) fail("an activation over a value neither f32 nor bf16");
        e.gate = gate;
        return;
      }
    fail("an activation after a step with no destination");
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

  void reorder(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md) {
    auto [from, to] = simplified(src_md, dst_md);
    if (copy_rows(src, from, dst, to)) return;
    dnnl::reorder::primitive_desc pd(eng, from, eng, to, reorder_attr());
    add(pd, dnnl::reorder(pd), {view(DNNL_ARG_FROM, src, from), view(DNNL_ARG_TO, dst, to)});
  }

  // the reorder as row copies, the runtime's own, where both layouts keep the last axis
  // contiguous and only the rows move (a head split read out of one QKV projection): oneDNN 3.2's
  // jit:uni reorder took 56 µs for one of ViT's [12,197,64] bf16 heads, rows of 128 bytes.
  // False where not (a type changes, the last axis moves, rows under 64 bytes)
  bool copy_rows(int src, const memory::desc& from, int dst, const memory::desc& to) {
    const Dims dims = from.get_dims(), fs = from.get_strides(), ts = to.get_strides();
    const size_t rank = dims.size(), size = memory::data_type_size(from.get_data_type());
    if (!strided(from) || !strided(to) || from.get_data_type() != to.get_data_type() || rank < 2 ||
        fs.back() != 1 || ts.back() != 1 || dims.back() * int64_t(size) < 64 ||
        from.get_submemory_offset() || to.get_submemory_offset())
      return false;
    // each row's offsets (in values) in src and dst, the outer axes counted row-major
    auto rows = std::make_shared<std::vector<std::pair<int64_t, int64_t>>>();
    Dims at(rank - 1, 0);
    do {
      int64_t f = 0, t = 0;
      for (size_t i = 0; i + 1 < rank; ++i) f += at[i] * fs[i], t += at[i] * ts[i];
      rows->emplace_back(f, t);
    } while (next_index(at, dims));
    const size_t bytes = size_t(dims.back()) * size;
    Exec own{dnnl::primitive(), {view(DNNL_ARG_FROM, src, from), view(DNNL_ARG_TO, dst, to)}, {}, node, step};
    own.own = [rows, bytes, size](Exec& e) {
      const char* x = static_cast<const char*>(e.bound[DNNL_ARG_FROM].get_data_handle());
      char* y = static_cast<char*>(e.bound[DNNL_ARG_TO].get_data_handle());
      const int64_t n = int64_t(rows->size());
#pragma omp parallel for schedule(static) if (n * int64_t(bytes) >= 4 * PARALLEL_FROM)
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(y + (*rows)[r].second * size, x + (*rows)[r].first * size, bytes);
    };
    own.kernel = "runtime row copy";
    execs.push_back(std::move(own));
    return true;
  }

  // src ([..., rows, n]) copied dense into a new value of `padded` rows in the type given, the
  // rows past its own zeroed on every call (the arena's bytes are shared)
  int padded_rows(int src, int64_t padded, dt type) {
    const Dims shape = val(src).shape;
    Dims dims = shape;
    const int64_t rows = dims[dims.size() - 2];
    dims[dims.size() - 2] = padded;
    const memory::desc md = plain(dims, type);
    const int t = temp(md);
    reorder(src, md_of(src), t, memory::desc(shape, type, md.get_strides()));
    const int64_t matrices = std::accumulate(dims.begin(), dims.end() - 2, int64_t(1), std::multiplies<>());
    const size_t row = size_t(dims.back()) * memory::data_type_size(type);
    Exec own{dnnl::primitive(), {use(DNNL_ARG_DST, t)}, {}, node, step};
    own.own = [=](Exec& e) {
      char* y = static_cast<char*>(e.bound[DNNL_ARG_DST].get_data_handle());
      for (int64_t i = 0; i < matrices; ++i) std::memset(y + (i * padded + rows) * row, 0, (padded - rows) * row);
    };
    own.kernel = "runtime zero padding";
    execs.push_back(std::move(own));
    return t;
  }

  static dnnl::primitive_attr reorder_attr() {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }

  // the id of a value holding `src` in layout `md`: src itself, or a temporary a reorder fills
  // (once: a later step asking for the same layout reads the same temporary)
  int ensure(int src, const memory::desc& md) {
    if (md_of(src) == md) return src;
    for (int c : val(src).copies)
      if (val(c).md == md) {
        val(c).last = step;
        return c;
      }
    int t = temp(md);
    reorder(src, md_of(src), t, md);
    val(src).copies.push_back(t);
    return t;
  }

  // src as a step that reads its operands' layouts as they are sees it: a view through strides
  // copied dense (row-major) first, the others themselves
  int dense(int src) {
    return val(src).spread ? ensure(src, plain(val(src).shape, md_of(src).get_data_type())) : src;
  }

  // a product's residual (-1: none) row-major in its own type, as the binary post-op reads it
  int plain_residual(int residual) {
    return residual < 0 ? -1 : ensure(residual, plain(val(residual).shape, md_of(residual).get_data_type()));
  }

  // dst as a view of src's values at `bytes` into them, seen through `md`; a view in row-major
  // order is dense, any other is spread
  void view_of(int dst, int src, const memory::desc& md, size_t bytes = 0) {
    Val& d = val(dst);
    d.alias = src;
    d.view_bytes = bytes;
    d.md = md;
    d.has_md = true;
    d.spread = md != plain(d.shape, md.get_data_type());
  }

  // where a primitive that writes layout `md` should write dst; finish() completes it
  // what a convolution or product writes dst in: bf16 only where other steps alone read it
  dt result_type(int dst) {
    const Val& v = val(dst);
    return compute == dt::bf16 && v.kind == Kind::Internal && v.layout == Layout::Any ? dt::bf16
                                                                                    : dt::f32;
  }

  // the dense layout a step that writes dense values (a product, a norm) writes dst in: f32, or
  // bf16 where only products in bf16 read it; row-major, or with the axes in the plan's order
  memory::desc dense_result(int dst) {
    const Val& v = val(dst);
    const dt type = v.bf16_only && compute == dt::bf16 && v.kind == Kind::Internal ? dt::bf16 : dt::f32;
    if (v.order.empty()) return plain(v.shape, type);
    Dims stored(v.order.size());   // stored axis i is the value's axis order[i]
    for (size_t i = 0; i < stored.size(); ++i) stored[i] = v.shape[v.order[i]];
    return plain(stored, type).permute_axes(std::vector<int>(v.order.begin(), v.order.end()));
  }

  int produce(int dst, const memory::desc& md) {
    Val& v = val(dst);
    if (v.has_md) fail("value " + std::to_string(dst) + " is written twice");
    if (v.layout == Layout::Plain && md != dense_result(dst)) {
      v.md = dense_result(dst);
      v.has_md = true;
      return temp(md);
    }
    v.md = md;
    v.has_md = true;
    return dst;
  }

  // where an elementwise step writes dst in src's layout: over src's bytes (the plan decided it
  // is their last reader), or where produce() says
  int write_over(int dst, int src, bool in_place) {
    if (!in_place) return produce(dst, md_of(src));
    Val& d = val(dst);
    d.alias = src;
    d.md = md_of(src);
    d.has_md = true;
    return dst;
  }

  // whether softmax() runs the runtime's own loop (softmax.h): src dense row-major f32 (scores:
  // what the steps before a softmax write), dst f32 or bf16 (an attention's weights), the last axis
  bool own_softmax(const memory::desc& src_md, const memory::desc& dst_md, int axis) const {
    const Dims dims = src_md.get_dims();
    return VECTORISED && axis == int(dims.size()) - 1 && src_md == plain(dims) &&
           (dst_md == plain(dims, dt::bf16) || dst_md == plain(dims));
  }

  // softmax (or log-softmax) of src into dst along axis: the runtime's own loop where it applies
  // (own_softmax), else oneDNN's primitive. Own loop only: `mask` is added to src first, a plain
  // f32 value of src's rank (mask_dims) whose axes are src's or 1, its last `cols`; `cols` > 0:
  // only the first `cols` values of each row count, the rest is padding (0 in dst)
  void softmax(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md, int axis,
               bool log, int mask = -1, const Dims& mask_dims = {}, int64_t cols = 0) {
    const Dims dims = src_md.get_dims();
    if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
      if (own_softmax(src_md, dst_md, axis)) {
        const bool to_bf16 = dst_md.get_data_type() == dt::bf16;
        const int64_t stride = dims.back();
        if (cols <= 0) cols = stride;
        const int64_t rows = std::accumulate(dims.begin(), dims.end() - 1, int64_t(1), std::multiplies<>());
        Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, src), view(DNNL_ARG_DST, dst, dst_md)}, {}, node, step};
        // where each row's mask row starts: the mask's strides, 0 along the axes it broadcasts
        auto mask_rows = std::make_shared<std::vector<int64_t>>();
        if (mask >= 0) {
          if (mask_dims.size() != dims.size() || mask_dims.back() != cols)
            fail("a mask that is not one row per row of the scores");
          own.args.push_back(view(DNNL_ARG_SRC_1, mask, plain(mask_dims)));
          const Dims strides = plain(mask_dims).get_strides();
          Dims at(dims.size() - 1, 0);
          do {
            int64_t o = 0;
            for (size_t i = 0; i < at.size(); ++i) o += mask_dims[i] == 1 ? 0 : at[i] * strides[i];
            mask_rows->push_back(o);
          } while (next_index(at, dims));
        }
        own.own = [=](Exec& e) {
          const float* x = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
          const float* add = mask >= 0 ? static_cast<const float*>(e.bound[DNNL_ARG_SRC_1].get_data_handle()) : nullptr;
          void* y = e.bound[DNNL_ARG_DST].get_data_handle();
          if (to_bf16) softmax_rows(x, static_cast<uint16_t*>(y), rows, cols, stride, log, add, mask_rows->data());
          else softmax_rows(x, static_cast<float*>(y), rows, cols, stride, log, add, mask_rows->data());
        };
        own.kernel = "runtime softmax";
        execs.push_back(std::move(own));
        return;
      }
    }
    if (mask >= 0 || (cols > 0 && cols != dims.back()))
      fail("a masked or padded softmax the runtime's loop does not take");
    dnnl::softmax_forward::primitive_desc pd(
        eng, dnnl::prop_kind::forward_inference,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, src_md, dst_md, axis,
        attr({}));
    add(pd, dnnl::softmax_forward(pd), {view(DNNL_ARG_SRC, src, src_md), view(DNNL_ARG_DST, dst, dst_md)});
  }

  // y = a·b (y in a's layout) by the runtime's own loop (channel_scale.h) where a is dense
  // channels-last and b dense with one value per channel, for every batch or for each; false
  // where not (oneDNN's binary then)
  bool scale_channels(int a, int b, int y) {
    if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
      const memory::desc &md = md_of(a), &b_md = md_of(b);
      const Dims dims = md.get_dims(), scales = b_md.get_dims();
      int64_t outer, pixels, channels;
      if (!channel_minor(md, outer, pixels, channels) || channels != dims[1] ||
          scales.size() != dims.size() || scales[1] != dims[1] || (scales[0] != 1 && scales[0] != dims[0]) ||
          b_md != plain(scales, b_md.get_data_type()))
        return false;
      for (size_t i = 2; i < scales.size(); ++i)
        if (scales[i] != 1) return false;
      const bool x_bf16 = md.get_data_type() == dt::bf16, s_bf16 = b_md.get_data_type() == dt::bf16;
      const bool per_batch = scales[0] != 1;
      Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC_0, a), use(DNNL_ARG_SRC_1, b), use(DNNL_ARG_DST, y)}, {}, node, step};
      own.own = [=](Exec& e) {
        const void* x = e.bound[DNNL_ARG_SRC_0].get_data_handle();
        const void* s = e.bound[DNNL_ARG_SRC_1].get_data_handle();
        void* out = e.bound[DNNL_ARG_DST].get_data_handle();
        auto run = [&](auto* xs) {
          using X = std::remove_const_t<std::remove_pointer_t<decltype(xs)>>;
          if (s_bf16) af::scale_channels(xs, static_cast<const uint16_t*>(s), static_cast<X*>(out), outer, pixels, channels, per_batch);
          else af::scale_channels(xs, static_cast<const float*>(s), static_cast<X*>(out), outer, pixels, channels, per_batch);
        };
        if (x_bf16) run(static_cast<const uint16_t*>(x));
        else run(static_cast<const float*>(x));
      };
      own.kernel = "runtime channel scale";
      execs.push_back(std::move(own));
      return true;
    }
    return false;
  }

  // y = x·W + b for one row x (gemv.h): x dense in the step's compute type, W and b constants;
  // the id written, for finish()
  int gemv(int dst, int x, int w, int bias, const memory::desc& out, int64_t k, int64_t n) {
    const bool bf16 = compute == dt::bf16, to_bf16 = out.get_data_type() == dt::bf16;
    const memory rows = constant_as(w, plain({k, n}, compute));
    auto panels_of = [&](auto zero) {   // W in gemv.h's panels, of W's element type
      using W = decltype(zero);
      memory out(memory::desc({panelled_size<W>(k, n)}, compute, tag::a), eng);
      panelled(static_cast<const W*>(rows.get_data_handle()), k, n, static_cast<W*>(out.get_data_handle()));
      return out;
    };
    const memory weights = bf16 ? panels_of(uint16_t(0)) : panels_of(0.f);
    int y = produce(dst, out);
    Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), owned(DNNL_ARG_WEIGHTS, weights), view(DNNL_ARG_DST, y, out)},
             {}, node, step};
    if (bias >= 0) own.args.push_back(owned(DNNL_ARG_BIAS, constant_as(bias, plain({n}))));
    auto padded = std::make_shared<std::vector<uint32_t>>((k + 1) / 2);
    const bool has_bias = bias >= 0;
    own.own = [=](Exec& e) {
      const void* xs = e.bound[DNNL_ARG_SRC].get_data_handle();
      const void* ws = e.bound[DNNL_ARG_WEIGHTS].get_data_handle();
      const float* b = has_bias ? static_cast<const float*>(e.bound[DNNL_ARG_BIAS].get_data_handle()) : nullptr;
      void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
      auto run = [&](auto* y) {
        if (bf16)
          af::gemv(static_cast<const uint16_t*>(xs), static_cast<const uint16_t*>(ws), b, y, k, n, padded->data());
        else
          af::gemv(static_cast<const float*>(xs), static_cast<const float*>(ws), b, y, k, n);
      };
      if (to_bf16) run(static_cast<uint16_t*>(ys));
      else run(static_cast<float*>(ys));
    };
    own.kernel = "runtime gemv";
    execs.push_back(std::move(own));
    return y;
  }

  // act(conv(x, w) + b) for a 2-D depthwise convolution, x and y channels-last (depthwise.h), in
  // place of oneDNN's primitive pd: where pd is oneDNN 3.2's older jit_dw kernel in a bf16 step
  // (what it has for a bf16 result; for an f32 one, and in fp32, its brdgmm_dw is faster than
  // this loop: `python -m autofusion.benchmarks.conv_floor --program depthwise_cost`), w is a constant
  // [C, 1, k, k] of square taps, k and the stride are ones the loop has, the dilation is 1 and the
  // post-ops are ones it computes. False, adding nothing, where not.
  bool depthwise(int y, int x, int w, int b, const dnnl::convolution_forward::primitive_desc& pd,
                 const Dims& strides, const Dims& dilations, const Dims& pad_begin, int64_t groups,
                 const Acts& acts) {
    if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
      const Dims in = val(x).shape, out = pd.dst_desc().get_dims(), ws = val(w).shape;
      const Acts post = post_ops_of(acts);
      const bool fits =
          compute == dt::bf16 && implemented_by(pd, "jit_dw") &&
          in.size() == 4 && groups == in[1] && groups == out[1] && val(w).kind == Kind::Constant &&
          ws[1] == 1 && ws[2] == ws[3] && strides[0] == strides[1] && depthwise_kernel_exists(ws[2], strides[0]) &&
          dilations[0] == 1 && dilations[1] == 1 &&
          std::all_of(post.begin(), post.end(), depthwise_act) &&
          pd.src_desc() == channels_last(in, pd.src_desc().get_data_type()) &&
          pd.dst_desc() == channels_last(out, pd.dst_desc().get_data_type());
      if (!fits) return false;
      const int64_t k = ws[2], stride = strides[0], c = in[1];
      // the weight as [k, k, C] f32: one vector of taps per channel block
      const memory taps = constant_as(w, memory::desc({c, 1, k, k}, dt::f32, Dims{1, 1, k * c, c}));
      memory bias = b >= 0 ? constant_as(b, plain({c})) : memory(plain({c}), eng);
      if (b < 0) std::fill_n(static_cast<float*>(bias.get_data_handle()), c, 0.f);
      const DepthwiseShape shape{in[0], c, in[2], in[3], out[2], out[3], pad_begin[0], pad_begin[1]};
      const bool x_bf16 = pd.src_desc().get_data_type() == dt::bf16, y_bf16 = pd.dst_desc().get_data_type() == dt::bf16;
      Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), owned(DNNL_ARG_WEIGHTS, taps), owned(DNNL_ARG_BIAS, bias),
                                   use(DNNL_ARG_DST, y)}, {}, node, step};
      own.own = [=](Exec& e) {
        const void* xs = e.bound[DNNL_ARG_SRC].get_data_handle();
        const float* wt = static_cast<const float*>(e.bound[DNNL_ARG_WEIGHTS].get_data_handle());
        const float* bs = static_cast<const float*>(e.bound[DNNL_ARG_BIAS].get_data_handle());
        void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
        auto run = [&](auto* x_typed) {
          if (y_bf16) depthwise_for(k, stride, x_typed, wt, bs, post.data(), int(post.size()), static_cast<uint16_t*>(ys), shape);
          else depthwise_for(k, stride, x_typed, wt, bs, post.data(), int(post.size()), static_cast<float*>(ys), shape);
        };
        if (x_bf16) run(static_cast<const uint16_t*>(xs));
        else run(static_cast<const float*>(xs));
      };
      own.kernel = "runtime depthwise";
      execs.push_back(std::move(own));
      if (Alg gate = gate_after(acts); gate != Alg::None) gate_over_dst(gate);
      return true;
    }
    return false;
  }

  // dst = src's mean over its pixels per batch and channel, summed by the gate of the step that
  // wrote src as it writes (gated_summed_into), where that step has one and src's layout puts
  // channels innermost; false where not (the plan sees neither the layout oneDNN picks nor
  // whether this build vectorises the gate)
  bool sum_in_gate(int dst, int src) {
    int64_t outer, pixels, inner;
    if (!channel_minor(md_of(src), outer, pixels, inner)) return false;
    for (auto it = execs.rbegin(); it != execs.rend(); ++it) {
      const bool writes = std::any_of(it->args.begin(), it->args.end(), [&](const Arg& a) {
        return (a.key == DNNL_ARG_DST || a.key == GATED_INTO) && a.value == src && !a.has_md;
      });
      if (!writes) continue;
      if (it->gate == Alg::None || it->means) return false;
      const int y = produce(dst, dense_result(dst));
      it->args.push_back(use(MEANS_INTO, y));
      it->means = ChannelMeans{outer, pixels, inner, val(src).shape[0], val(src).shape[1]};
      Val& v = val(y);   // written at the gate's step, not this one
      v.first = std::min(v.first, it->step);
      finish(dst, y);
      return true;
    }
    return false;
  }

  void finish(int dst, int written) {
    if (written != dst) reorder(written, md_of(written), dst, md_of(dst));
  }

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
                     const dnnl::convolution_forward::primitive_desc& pd, const Acts& acts) {
    const Dims in = val(src).shape, out = val(dst).shape;
    const int threads = omp_get_max_threads();
    if (gate_after(acts) == Alg::None || out.size() != 4 ||
        pd.dst_desc() != channels_last(out, dt::f32) ||
        int64_t(pd.dst_desc().get_size()) < TILED_GATE_FROM)
      return false;
    // tiles of at most about TILE_BYTES, evenly long (a short last one would be another kernel)
    const int64_t pixels = out[0] * out[2] * out[3], even = (pixels * 4 * out[1] + TILE_BYTES - 1) / TILE_BYTES,
                  tile = std::max<int64_t>(64, (pixels + even - 1) / even), tiles = (pixels + tile - 1) / tile,
                  last = pixels - (tiles - 1) * tile;
    if (tiles < 8 * threads) return false;   // too few to share evenly
    auto tile_pd = [&](int64_t n) {   // [1, C, 1, n]: n pixels of the images, channels-last
      return dnnl::convolution_forward::primitive_desc(
          eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
          channels_last({1, in[1], 1, n}, compute), pd.weights_desc(), bias_md,
          channels_last({1, out[1], 1, n}, dt::f32), {1, 1}, {0, 0}, {0, 0}, attr(post_ops_of(acts)));
    };
    std::optional<dnnl::convolution_forward::primitive_desc> whole_tile, last_tile;
    try {
      whole_tile = tile_pd(tile), last_tile = tile_pd(last);
    } catch (const dnnl::error&) {
      return false;   // the whole convolution's weight layout is not one a tile takes
    }
    for (const auto* t : {&*whole_tile, &*last_tile})
      if (is_reference(*t)) return false;
    struct Tiles {
      dnnl::convolution_forward whole, last;
      std::vector<memory> src_whole, src_last, f32, pads;   // per thread
      std::vector<dnnl::stream> streams;
    };
    auto t = std::make_shared<Tiles>(Tiles{dnnl::convolution_forward(*whole_tile), dnnl::convolution_forward(*last_tile)});
    const memory::desc pad = whole_tile->scratchpad_desc().get_size() >= last_tile->scratchpad_desc().get_size()
                                 ? whole_tile->scratchpad_desc() : last_tile->scratchpad_desc();
    for (int i = 0; i < threads; ++i) {
      t->src_whole.emplace_back(whole_tile->src_desc(), eng, nullptr);
      t->src_last.emplace_back(last_tile->src_desc(), eng, nullptr);
      t->f32.emplace_back(whole_tile->dst_desc(), eng);
      t->pads.emplace_back(pad, eng);
      t->streams.emplace_back(eng);
    }
    const int y = produce(dst, channels_last(out, result_type(dst)));
    Exec e{{}, {use(DNNL_ARG_SRC, ensure(src, channels_last(in, compute))),
                owned(DNNL_ARG_WEIGHTS, constant_as(w, pd.weights_desc())), use(DNNL_ARG_DST, y)}, {}, node, step};
    if (b >= 0) e.args.push_back(owned(DNNL_ARG_BIAS, constant_as(b, pd.bias_desc())));
    const Alg gate = gate_after(acts);
    e.kernel = std::string(whole_tile->impl_info_str()) + " in tiles of " + std::to_string(tile) + " pixels + " +
               gate_name(gate);
    const size_t in_bytes = memory::data_type_size(compute) * in[1], out_values = out[1];
    e.own = [this, t, gate, tile, tiles, last, in_bytes, out_values](Exec& self) {
      auto& bound = self.bound;
      const char* x = static_cast<const char*>(bound[DNNL_ARG_SRC].get_data_handle());
      const memory& y = bound[DNNL_ARG_DST];
      const bool bf16 = y.get_desc().get_data_type() == dt::bf16;
      std::string error;
#pragma omp parallel num_threads(std::min<int>(omp_get_max_threads(), int(t->f32.size())))
      {
        const int k = omp_get_thread_num();
#pragma omp for schedule(static)
        for (int64_t i = 0; i < tiles; ++i) {
          const bool whole = i + 1 < tiles || last == tile;
          memory& in = whole ? t->src_whole[k] : t->src_last[k];
          in.set_data_handle(const_cast<char*>(x) + i * tile * in_bytes);
          std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in}, {DNNL_ARG_WEIGHTS, bound.at(DNNL_ARG_WEIGHTS)},
                                               {DNNL_ARG_DST, t->f32[k]}, {DNNL_ARG_SCRATCHPAD, t->pads[k]}};
          if (auto bias = bound.find(DNNL_ARG_BIAS); bias != bound.end()) args[DNNL_ARG_BIAS] = bias->second;
          try {
            (whole ? t->whole : t->last).execute(t->streams[k], args);
          } catch (const std::exception& err) {   // not out of the parallel region
#pragma omp critical
            error = err.what();
            continue;
          }
          const float* f = static_cast<const float*>(t->f32[k].get_data_handle());
          const int64_t n = (whole ? tile : last) * int64_t(out_values), at = i * tile * int64_t(out_values);
          if (bf16) gate_into(gate, f, static_cast<uint16_t*>(y.get_data_handle()) + at, n);
          else gate_into(gate, f, static_cast<float*>(y.get_data_handle()) + at, n);
        }
      }
      if (!error.empty()) fail(error);   // naming the node, as a primitive's error does
    };
    execs.push_back(std::move(e));
    finish(dst, y);
    return true;
  }

  // a constant copied into memory of layout `md` (weights reordered once, here)
  memory constant_as(int id, const memory::desc& md) {
    Val& c = val(id);
    if (c.kind != Kind::Constant) fail("value " + std::to_string(id) + " must be a constant");
    auto make = [&] {
      memory::desc given = c.owned.get_desc();   // its dims as the step counts them ([C] as [1, C])
      if (given.get_dims() != md.get_dims()) given = given.reshape(md.get_dims());
      memory src(given, eng, c.owned.get_data_handle());
      memory out(md, eng);
      dnnl::reorder(src, out).execute(strm, src, out);
      strm.wait();
      return out;
    };
    return shared ? shared->as(c.slot, md, make) : make();
  }

  void finalize() {
    // every view of a buffer keeps it alive: a root's lifetime spans its aliases'
    for (auto& [id, v] : vals) {
      if (v.alias < 0) continue;
      Val& r = val(root(id));
      r.first = std::min(r.first, v.first);
      r.last = std::max(r.last, v.last);
    }
    // greedy placement, largest first: the lowest offset clear of every placed buffer whose
    // lifetime meets this one's
    std::vector<int> order;
    for (auto& [id, v] : vals)
      if (v.kind == Kind::Internal && v.alias < 0) {
        if (!v.has_md) {
          node = "<finalize>";
          fail("value " + std::to_string(id) + " is declared but never written");
        }
        order.push_back(id);
      }
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      size_t sa = vals[a].md.get_size(), sb = vals[b].md.get_size();
      return sa != sb ? sa > sb : a < b;
    });
    std::vector<int> placed;
    for (int id : order) {
      Val& v = vals[id];
      size_t size = align_up(std::max<size_t>(v.md.get_size(), 1));
      std::vector<std::pair<size_t, size_t>> busy;
      for (int p : placed) {
        const Val& u = vals[p];
        if (u.first <= v.last && v.first <= u.last)
          busy.emplace_back(u.offset, u.offset + align_up(std::max<size_t>(u.md.get_size(), 1)));
      }
      std::sort(busy.begin(), busy.end());
      size_t at = 0;
      for (auto [b, e] : busy) {
        if (at + size <= b) break;
        at = std::max(at, e);
      }
      v.offset = at;
      arena_size = std::max(arena_size, at + size);
      placed.push_back(id);
    }
    arena_storage.reset(new char[arena_size + 64]);
    arena = reinterpret_cast<char*>(align_up(reinterpret_cast<size_t>(arena_storage.get())));
    scratch = memory(memory::desc({int64_t(std::max<size_t>(scratch_size, 1))}, dt::u8, tag::a),
                     eng);
    for (auto& e : execs) {
      for (auto& a : e.args) {
        if (a.value < 0) {
          e.bound[a.key] = a.mem;
          continue;
        }
        int r = a.value;
        size_t at = 0;   // bytes into the root
        for (; vals[r].alias >= 0; r = vals[r].alias) at += vals[r].view_bytes;
        Val& rv = vals[r];
        const memory::desc& md = a.has_md ? a.md : vals[a.value].md;
        char* base = rv.kind == Kind::Internal ? arena + rv.offset
                     : rv.kind == Kind::Constant ? static_cast<char*>(rv.owned.get_data_handle())
                                                 : nullptr;
        memory m(md, eng, base ? base + at : nullptr);
        if (rv.kind == Kind::Input) input_mems[rv.slot].emplace_back(m, at);
        if (rv.kind == Kind::Output) output_mems[rv.slot].emplace_back(m, at);
        e.bound[a.key] = m;
      }
      if (scratch_size) e.bound[DNNL_ARG_SCRATCHPAD] = scratch;
      if (e.fn)
        for (auto& a : e.args)
          (a.key >= DNNL_ARG_MULTIPLE_DST ? e.fn_out : e.fn_in).push_back(e.bound[a.key]);
      if (e.gate != Alg::None) {
        e.gated = e.bound[DNNL_ARG_DST];
        if (auto it = e.bound.find(GATED_INTO); it != e.bound.end()) {
          e.rounded = it->second;
          e.bound.erase(it);   // the runtime's, not the primitive's
        }
        if (auto it = e.bound.find(MEANS_INTO); it != e.bound.end()) {
          e.means->out = it->second;
          e.bound.erase(it);
        }
        const memory::desc md = e.gated.get_desc();
        e.gated_values = int64_t(md.get_size() / memory::data_type_size(md.get_data_type()));
        e.gated_bf16 = md.get_data_type() == dt::bf16;
      }
    }
    // a constant no step reads as it is (a weight now lives reordered) needs its copy no more
    std::unordered_set<int> read;
    for (auto& e : execs)
      for (auto& a : e.args)
        if (a.value >= 0) read.insert(root(a.value));
    for (auto& [id, v] : vals)
      if (v.kind == Kind::Constant && !read.count(id)) v.owned = memory();
  }

  void run(void* const* inputs, void* const* outputs) {
    for (size_t s = 0; s < input_mems.size(); ++s)
      for (auto& [m, at] : input_mems[s]) m.set_data_handle(static_cast<char*>(inputs[s]) + at);
    for (size_t s = 0; s < output_mems.size(); ++s)
      for (auto& [m, at] : output_mems[s]) m.set_data_handle(static_cast<char*>(outputs[s]) + at);
    std::vector<const float*> in;
    std::vector<float*> out;
    for (auto& e : execs) {
      node = e.node;
      if (!profiling) {
        execute(e, in, out);
        continue;
      }
      // oneDNN's CPU stream runs a primitive before execute() returns and its wait() returns at
      // once (cpu_stream.hpp); only a threadpool build runs asynchronously, and there the wait
      // keeps one step's work from counting to the next
      auto start = std::chrono::steady_clock::now();
      execute(e, in, out);
      strm.wait();
      step_ns[e.step] +=
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    }
    strm.wait();
  }

  void execute(Exec& e, std::vector<const float*>& in, std::vector<float*>& out) {
    if (e.gate != Alg::None) {
      if (e.prim) run_primitive(e);
      else if (e.own) e.own(e);
      void* data = e.gated.get_data_handle();   // where dst is an output, the caller's (run())
      if (e.rounded)
        run_gate(e, static_cast<const float*>(data), static_cast<uint16_t*>(e.rounded.get_data_handle()));
      else if (e.gated_bf16)
        run_gate(e, static_cast<const uint16_t*>(data), static_cast<uint16_t*>(data));
      else
        run_gate(e, static_cast<const float*>(data), static_cast<float*>(data));
      return;
    }
    if (e.own) return e.own(e);
    if (e.fn) {
      in.clear();
      out.clear();
      for (auto& m : e.fn_in) in.push_back(static_cast<const float*>(m.get_data_handle()));
      for (auto& m : e.fn_out) out.push_back(static_cast<float*>(m.get_data_handle()));
      e.fn(in.data(), out.data(), e.fn_sizes.data());
      return;
    }
    run_primitive(e);
  }

  template <class In, class Out>
  void run_gate(Exec& e, const In* x, Out* y) {
    if (!e.means) return gate_into(e.gate, x, y, e.gated_values);
    ChannelMeans& m = *e.means;
    const int64_t width = m.outer * m.inner, per_batch = width / m.batches;
    m.sums.resize(width);
    m.partial.resize(size_t(omp_get_max_threads()) * partial_width(width));
    gate_summed_into(e.gate, x, y, m.outer, m.pixels, m.inner, m.sums.data(), m.partial.data());
    // sums[n·⌈C⌉ + c] over the real channels (a blocked layout's padding dropped) into [N, C]
    void* out = m.out.get_data_handle();
    const bool bf16 = m.out.get_desc().get_data_type() == dt::bf16;
    for (int64_t i = 0; i < width; ++i) {
      const int64_t n = i / per_batch, c = i % per_batch;
      if (c >= m.channels) continue;
      const float mean = m.sums[i] / float(m.pixels);
      if (bf16) store1(static_cast<uint16_t*>(out) + n * m.channels + c, mean);
      else store1(static_cast<float*>(out) + n * m.channels + c, mean);
    }
  }

  void run_primitive(Exec& e) {
    try {
      e.prim.execute(strm, e.bound);
    } catch (const dnnl::error& err) {
      fail(err.what());
    }
  }

  void profile(bool on) {
    profiling = on;
    if (on) step_ns.assign(step + 1, 0.0);   // one count per node() call, from zero
  }
};

Partition::Partition(const void* const* constants, Constants* shared) : impl_(new Impl(constants, shared)) {}
Partition::~Partition() = default;

void Partition::input(int id, int slot, const Dims& shape) {
  impl_->declare(id, Kind::Input, slot, shape);
  if (int(impl_->input_mems.size()) <= slot) {
    impl_->input_mems.resize(slot + 1);
    impl_->input_elems.resize(slot + 1);
  }
  impl_->input_elems[slot] = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
}

void Partition::output(int id, int slot, const Dims& shape) {
  impl_->declare(id, Kind::Output, slot, shape).has_md = false;   // written by its producer
  if (int(impl_->output_mems.size()) <= slot) impl_->output_mems.resize(slot + 1);
}

void Partition::constant(int id, int slot, const Dims& shape, const Dims& order) {
  Val& v = impl_->declare(id, Kind::Constant, slot, shape);
  if (!order.empty()) {   // stored with its axes in `order` (a weight given transposed)
    Dims stored(order.size());
    for (size_t i = 0; i < stored.size(); ++i) stored[i] = shape[order[i]];
    v.md = plain(stored).permute_axes(std::vector<int>(order.begin(), order.end()));
  }
  // the caller's array, read in place (no step writes a constant)
  v.owned = memory(v.md, impl_->eng, const_cast<void*>(impl_->constants[slot]));
}

void Partition::value(int id, const Dims& shape, int first, int last, Layout layout, bool bf16_only,
                      const Dims& order) {
  Val v;
  v.bf16_only = bf16_only;
  v.order = order;
  v.shape = shape;
  v.first = first;
  v.last = last;
  v.layout = layout;
  impl_->vals[id] = v;
}

void Partition::node(const char* name, Precision precision) {
  impl_->node = name;
  impl_->step += 1;
  impl_->compute = type_of(precision);
}

void Partition::conv(int dst, int src, int w, int b, int residual, const Dims& strides,
                     const Dims& dilations, const Dims& pad_begin, const Dims& pad_end,
                     int64_t groups, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  Dims wdims = m.val(w).shape;   // ONNX [O, I/g, k...]; oneDNN's grouped form [g, O/g, I/g, k...]
  if (groups > 1) {
    wdims.insert(wdims.begin(), groups);
    wdims[1] /= groups;
  }
  memory::desc bias_md = b >= 0 ? plain(m.val(b).shape) : memory::desc();
  std::vector<memory::desc> adds;
  if (residual >= 0) {
    residual = m.dense(residual);
    adds.push_back(m.md_of(residual));
  }
  // a gate over a bf16 result runs on the f32 one, which is rounded once, after the gate:
  // rounding before it too cost EfficientNet-B4's SiLUs a fifth more error (a residual, which
  // the result's own bytes hold, keeps the bf16 result)
  const bool gate_in_f32 = gate_after(acts) != Alg::None && m.result_type(dst) == dt::bf16 && residual < 0;
  auto writing = [&](const memory::desc& dst_md) {
    return dnnl::convolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        any(m.val(src).shape, m.compute), any(wdims, m.compute), bias_md, dst_md, strides,
        onednn_dilations(dilations), pad_begin, pad_end, m.attr(acts, adds));
  };
  const dt result = gate_in_f32 ? dt::f32 : m.result_type(dst);
  auto pd = writing(any(m.val(dst).shape, result));
  // oneDNN's fast convolutions add a residual only in a layout they write; one in another (a
  // model input, a value a plain-layout step wrote: NCHW) gets the reference kernel, hundreds of
  // times slower (a 1x1 of 160 channels at 7x7: 11 ms against 0.04). Reordered first, into the
  // layout the convolution writes without it.
  if (residual >= 0 && is_reference(pd)) {
    adds.clear();
    const memory::desc bare = writing(any(m.val(dst).shape, result)).dst_desc();
    residual = m.ensure(residual, retyped(bare, m.md_of(residual).get_data_type()));
    adds.push_back(m.md_of(residual));
    pd = writing(any(m.val(dst).shape, result));
  }
  // channels innermost where oneDNN picked a blocked result (a network's first convolution, of
  // three channels): every convolution after it reads channels-last, and a blocked result
  // costs them a reorder each (MobileNetV3-L: 0.08 ms a run, EfficientNet-B4: 0.38)
  if (!strided(pd.dst_desc())) {
    try {
      auto last = writing(channels_last(m.val(dst).shape, result));
      if (!is_reference(last)) pd = last;
    } catch (const dnnl::error&) {
    }
  }
  const bool pointwise = groups == 1 && residual < 0 && m.val(w).kind == Kind::Constant &&
                         std::all_of(wdims.begin() + 2, wdims.end(), [](int64_t k) { return k == 1; }) &&
                         std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; }) &&
                         std::all_of(pad_begin.begin(), pad_begin.end(), [](int64_t p) { return p == 0; }) &&
                         std::all_of(pad_end.begin(), pad_end.end(), [](int64_t p) { return p == 0; });
  if (pointwise && m.gate_in_tiles(dst, src, w, b, bias_md, pd, acts)) return;
  // over the residual (the plan says this step reads it last): a sum post-op, which adds the
  // residual where the result goes instead of reading it from one buffer and writing another.
  // The kernel is as fast either way in cache (--program residual_cost); in a network one buffer
  // fewer passes through it (ResNet-50 bf16: 1.5-3% a run, BENCHMARKS.md 2026-12-04-in-place-residual)
  const bool over_residual = in_place && residual >= 0 && m.md_of(residual) == pd.dst_desc() &&
                             m.root(residual) != m.root(src);
  if (over_residual) {
    pd = dnnl::convolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, pd.src_desc(),
        pd.weights_desc(), bias_md, pd.dst_desc(), strides, onednn_dilations(dilations), pad_begin,
        pad_end, m.attr(acts, {}, true));
  }
  int x = m.ensure(src, pd.src_desc());
  int y = over_residual ? m.write_over(dst, residual, true)
          : gate_in_f32 ? m.temp(pd.dst_desc())
                        : m.produce(dst, pd.dst_desc());
  // a computed weight (a gate folded into it, rules/conv.py) is reordered on every call
  const bool computed = m.val(w).kind != Kind::Constant;
  if (computed && groups > 1) m.fail("a computed weight of a grouped convolution");
  // the runtime's own depthwise loop where it fits (depthwise.h; no residual), else oneDNN's primitive
  if (residual >= 0 || !m.depthwise(y, x, w, b, pd, strides, dilations, pad_begin, groups, acts)) {
    std::vector<Arg> args{Impl::use(DNNL_ARG_SRC, x),
                          computed ? Impl::use(DNNL_ARG_WEIGHTS, m.ensure(w, pd.weights_desc()))
                                   : Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, pd.weights_desc())),
                          Impl::use(DNNL_ARG_DST, y)};
    if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
    if (residual >= 0 && !over_residual)
      args.push_back(Impl::use(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, residual));
    m.add(pd, dnnl::convolution_forward(pd), std::move(args), acts);
  }
  if (gate_in_f32) {   // the gate writes the bf16 result
    const int rounded = m.produce(dst, retyped(pd.dst_desc(), dt::bf16));
    m.execs.back().args.push_back(Impl::use(GATED_INTO, rounded));
    y = rounded;
  }
  m.finish(dst, y);
}

void Partition::pool(int dst, int src, Pool kind, const Dims& kernel, const Dims& strides,
                     const Dims& dilations, const Dims& pad_begin, const Dims& pad_end) {
  Impl& m = *impl_;
  dnnl::algorithm alg = kind == Pool::Max             ? dnnl::algorithm::pooling_max
                        : kind == Pool::AvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                      : dnnl::algorithm::pooling_avg_exclude_padding;
  src = m.dense(src);
  dnnl::pooling_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, alg, m.md_of(src),
      any(m.val(dst).shape, m.md_of(src).get_data_type()), strides, kernel, onednn_dilations(dilations), pad_begin, pad_end, m.attr({}));
  int y = m.produce(dst, pd.dst_desc());
  m.add(pd, dnnl::pooling_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)});
  m.finish(dst, y);
}

void Partition::resample(int dst, int src, bool linear) {
  Impl& m = *impl_;
  src = m.dense(src);
  dnnl::resampling_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference,
      linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest, m.md_of(src),
      any(m.val(dst).shape, m.md_of(src).get_data_type()), m.attr({}));
  int y = m.produce(dst, pd.dst_desc());
  m.add(pd, dnnl::resampling_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)});
  m.finish(dst, y);
}

void Partition::mean_in_gate(int dst, int src) {
  Impl& m = *impl_;
  if (m.sum_in_gate(dst, src)) return;
  const Dims& shape = m.val(src).shape;
  const Dims spatial(shape.begin() + 2, shape.end()), ones(spatial.size(), 1), zeros(spatial.size(), 0);
  pool(dst, src, Pool::AvgExcludePad, spatial, ones, ones, zeros, zeros);
}

void Partition::eltwise(int dst, int src, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  if (acts.empty()) m.fail("an eltwise step needs an activation");
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  int y = m.write_over(dst, src, in_place);
  if (acts.size() == 1 && gate_after(acts) != Alg::None) {
    // the gate alone: over src's bytes, or over a copy of them
    if (in_place)
      m.execs.push_back(Exec{dnnl::primitive(), {Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step});
    else
      m.reorder(src, md, y, md);
    m.gate_over_dst(acts[0].alg);
    m.finish(dst, y);
    return;
  }
  // the first activation is the primitive, the rest its post-ops
  Acts rest(acts.begin() + 1, acts.end());
  dnnl::eltwise_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, eltwise_alg(acts[0].alg), md, md, acts[0].alpha,
      acts[0].beta, m.attr(rest));
  m.add(pd, dnnl::eltwise_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)},
        rest);
  m.finish(dst, y);
}

void Partition::binary(int dst, int a, int b, Bin op, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  a = m.dense(a);
  b = m.dense(b);
  const memory::desc md = m.md_of(a);
  int y = m.write_over(dst, a, in_place);
  if (op == Bin::Mul && acts.empty() && m.scale_channels(a, b, y)) return m.finish(dst, y);
  const memory::desc& given = m.md_of(b);
  if (given.get_data_type() != md.get_data_type() && given.get_dims() != md.get_dims())
    // a broadcast operand of another type (a bf16 gate scaling an f32 weight): converted to
    // a's type, plain, as oneDNN has only its reference kernel for mixed types
    b = m.ensure(b, memory::desc(given.get_dims(), md.get_data_type(), plain(given.get_dims()).get_strides()));
  memory::desc b_md = in_order_of(m.md_of(b), md);
  if (b_md.get_dims() == md.get_dims() && b_md != md) {
    // the same shape in another layout (or type): oneDNN has only its reference kernel for
    // that, many times slower than one reorder of b into a's layout
    b = m.ensure(b, md);
    b_md = md;
  }
  dnnl::binary::primitive_desc pd(m.eng, binary_alg(op), md, b_md, md, m.attr(acts));
  m.add(pd, dnnl::binary(pd), {Impl::use(DNNL_ARG_SRC_0, a), Impl::view(DNNL_ARG_SRC_1, b, b_md),
                               Impl::use(DNNL_ARG_DST, y)}, acts);
  m.finish(dst, y);
}

void Partition::batch_norm(int dst, int src, int scale, int bias, int mean, int var,
                           float epsilon, const Acts& acts) {
  Impl& m = *impl_;
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, md, md, epsilon, flags, m.attr(acts));
  int y = m.produce(dst, md);
  m.add(pd, dnnl::batch_normalization_forward(pd),
        {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_SCALE, scale),
         Impl::use(DNNL_ARG_SHIFT, bias), Impl::use(DNNL_ARG_MEAN, mean),
         Impl::use(DNNL_ARG_VARIANCE, var), Impl::use(DNNL_ARG_DST, y)}, acts);
  m.finish(dst, y);
}

void Partition::linear(int dst, int a, int w, int bias, const Acts& acts, int residual) {
  Impl& m = *impl_;
  const Dims& wshape = m.val(w).shape;   // [K, N]
  const Dims& xshape = m.val(a).shape;
  int64_t k = wshape[0], n = wshape[1];
  int64_t rows = std::accumulate(xshape.begin(), xshape.end() - 1, int64_t(1), std::multiplies<>());
  const memory::desc out = m.dense_result(dst);
  if (VECTORISED && rows == 1 && post_ops_of(acts).empty() && residual < 0 &&
      (m.compute == dt::f32 || BF16_DOT)) {
    int y = m.gemv(dst, m.ensure(a, plain(xshape, m.compute)), w, bias, out, k, n);
    if (Alg gate = gate_after(acts); gate != Alg::None) m.gate_over_dst(gate);
    m.finish(dst, y);
    return;
  }
  memory::desc x_md = plain({rows, k}, m.compute), y_md = plain({rows, n}, out.get_data_type());
  memory::desc b_md = bias >= 0 ? plain({1, n}) : memory::desc();
  const int r = m.plain_residual(residual);
  std::vector<memory::desc> adds;   // the residual, seen as [rows, N] like the result
  if (r >= 0) adds.push_back(plain({rows, n}, m.md_of(r).get_data_type()));
  dnnl::matmul::primitive_desc pd(m.eng, x_md, any({k, n}, m.compute), b_md, y_md, m.attr(acts, adds));
  int x = m.ensure(a, plain(xshape, m.compute));
  int y = m.produce(dst, out);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, x_md),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, pd.weights_desc())),
                        Impl::view(DNNL_ARG_DST, y, y_md)};
  if (bias >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(bias, b_md)));
  if (r >= 0) args.push_back(Impl::view(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, r, adds[0]));
  m.add(pd, dnnl::matmul(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::matmul(int dst, int a, int b, int c, bool trans_a, bool trans_b, float alpha,
                       const Acts& acts, int residual) {
  Impl& m = *impl_;
  auto operand = [&](int id, bool transposed) {
    memory::desc md = plain(m.val(id).shape, m.compute);
    if (!transposed) return md;
    std::vector<int> perm(md.get_ndims());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return md.permute_axes(perm);
  };
  int x = m.ensure(a, plain(m.val(a).shape, m.compute));
  int wv = m.ensure(b, plain(m.val(b).shape, m.compute));
  memory::desc a_md = operand(x, trans_a), b_md = operand(wv, trans_b);
  Acts post;
  if (alpha != 1.f) post.push_back(Act{Alg::Linear, alpha, 0.f});
  std::vector<memory::desc> adds;
  int cv = -1;
  if (c >= 0) {
    cv = m.ensure(c, plain(m.val(c).shape));
    adds.push_back(plain(m.val(c).shape));
  }
  const int r = m.plain_residual(residual);
  if (r >= 0) adds.push_back(m.md_of(r));
  // the scale applies before the bias: act(alpha·ab + c + r) as [linear, add, add, act...] post-ops
  dnnl::primitive_attr at;
  at.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  for (const auto& p : post) po.append_eltwise(eltwise_alg(p.alg), p.alpha, p.beta);
  for (const auto& md : adds) po.append_binary(dnnl::algorithm::binary_add, md);
  for (const auto& act : post_ops_of(acts))
    if (act.alg != Alg::None) po.append_eltwise(eltwise_alg(act.alg), act.alpha, act.beta);
  at.set_post_ops(po);
  memory::desc y_md = m.dense_result(dst);
  dnnl::matmul::primitive_desc pd(m.eng, a_md, b_md, y_md, at);
  int y = m.produce(dst, y_md);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, a_md), Impl::view(DNNL_ARG_WEIGHTS, wv, b_md),
                        Impl::use(DNNL_ARG_DST, y)};
  int index = int(post.size());
  for (int operand : {cv, r})
    if (operand >= 0) args.push_back(Impl::use(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index++) | DNNL_ARG_SRC_1, operand));
  m.add(pd, dnnl::matmul(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::concat(int dst, const std::vector<int>& srcs, int axis) {
  Impl& m = *impl_;
  // one data type for all: bf16 only where every source is bf16
  dt type = dt::bf16;
  for (int s : srcs)
    if (m.md_of(s).get_data_type() != dt::bf16) type = dt::f32;
  std::vector<int> ins;
  std::vector<memory::desc> mds;
  for (int s : srcs) {
    s = m.dense(s);
    ins.push_back(m.ensure(s, retyped(m.md_of(s), type)));
    mds.push_back(m.md_of(ins.back()));
  }
  dnnl::concat::primitive_desc pd(m.eng, any(m.val(dst).shape, type), axis, mds,
                                  Impl::reorder_attr());
  int y = m.produce(dst, pd.dst_desc());
  std::vector<Arg> args{Impl::use(DNNL_ARG_DST, y)};
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Impl::use(DNNL_ARG_MULTIPLE_SRC + int(i), ins[i]));
  m.add(pd, dnnl::concat(pd), std::move(args));
  m.finish(dst, y);
}

void Partition::reduce(int dst, int src, Reduce op) {
  Impl& m = *impl_;
  const Dims& from = m.val(src).shape;
  const Dims& to = m.val(dst).shape;
  // the reduced axes (size 1 in dst, not in src) are one run (the compiler's check): the runtime's
  // own loop over row-major f32 (reduce.h); oneDNN's reduction of any other set is its reference
  // kernel. At sizes reducing nothing (a batch of 1) the loop copies.
  int lo = int(from.size()), hi = lo - 1;
  for (int i = 0; i < int(from.size()); ++i)
    if (to[i] == 1 && from[i] != 1) {
      for (int j = hi + 1; lo < i && j < i; ++j)
        if (from[j] != 1) throw std::runtime_error("reduce: the reduced axes are not one run");
      lo = std::min(lo, i);
      hi = i;
    }
  const int64_t outer = product(from, 0, lo), run = product(from, lo, hi + 1),
                inner = product(from, hi + 1, from.size());
  const int x = m.ensure(src, plain(from));
  const int y = m.produce(dst, plain(to));
  Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, x), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
  own.own = [=](Exec& e) {
    const float* xs = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    float* ys = static_cast<float*>(e.bound[DNNL_ARG_DST].get_data_handle());
    switch (op) {
      case Reduce::Mean: return reduce_run<Fold::Sum>(xs, ys, outer, run, inner, 1.f / float(run));
      case Reduce::Sum: return reduce_run<Fold::Sum>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Max: return reduce_run<Fold::Max>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Min: return reduce_run<Fold::Min>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Prod: return reduce_run<Fold::Prod>(xs, ys, outer, run, inner, 1.f);
    }
  };
  own.kernel = "runtime reduction";
  m.execs.push_back(std::move(own));
  m.finish(dst, y);
}

void Partition::softmax(int dst, int src, int axis, bool log) {
  Impl& m = *impl_;
  const Dims& shape = m.val(src).shape;
  if (axis + 1 < int(shape.size()) && m.md_of(src).get_data_type() == dt::f32) {
    // along an axis that is not the last, oneDNN's softmax is its reference kernel: the
    // runtime's loop over row-major f32 (softmax.h)
    const int64_t outer = product(shape, 0, axis), run = shape[axis], inner = product(shape, axis + 1, shape.size());
    const int x = m.ensure(src, plain(shape));
    const int y = m.produce(dst, plain(shape));
    Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, x), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
    own.own = [=](Exec& e) {
      softmax_columns(static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle()),
                      static_cast<float*>(e.bound[DNNL_ARG_DST].get_data_handle()), outer, run, inner, log);
    };
    own.kernel = "runtime softmax columns";
    m.execs.push_back(std::move(own));
    m.finish(dst, y);
    return;
  }
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  int y = m.produce(dst, md);
  m.softmax(src, md, y, md, axis, log);
  m.finish(dst, y);
}

void Partition::layer_norm(int dst, int src, int scale, int bias, int residual, int axis,
                           float epsilon) {
  Impl& m = *impl_;
  const Dims& shape = m.val(src).shape;
  const int64_t rows = product(shape, 0, axis), cols = product(shape, axis, shape.size());
  int x = m.ensure(src, plain(shape));
  int r = residual >= 0 ? m.ensure(residual, plain(m.val(residual).shape)) : -1;
  const memory::desc out = m.dense_result(dst);
  auto constant = [&](int key, int id) { return Impl::owned(key, m.constant_as(id, plain({cols}))); };
  if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
    if (out == plain(shape, out.get_data_type())) {   // the runtime's own (layernorm.h)
      int y = m.produce(dst, out);
      Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, x), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
      if (r >= 0) own.args.push_back(Impl::use(DNNL_ARG_SRC_1, r));
      if (scale >= 0) own.args.push_back(constant(DNNL_ARG_SCALE, scale));
      if (bias >= 0) own.args.push_back(constant(DNNL_ARG_SHIFT, bias));
      const bool to_bf16 = out.get_data_type() == dt::bf16;
      own.own = [=](Exec& e) {
        auto data = [&](int key) {
          auto it = e.bound.find(key);
          return it == e.bound.end() ? nullptr : static_cast<const float*>(it->second.get_data_handle());
        };
        const float *xs = data(DNNL_ARG_SRC), *rs = data(DNNL_ARG_SRC_1);
        const float *g = data(DNNL_ARG_SCALE), *b = data(DNNL_ARG_SHIFT);
        void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
        if (to_bf16) layer_norm_rows(xs, rs, g, b, static_cast<uint16_t*>(ys), rows, cols, epsilon);
        else layer_norm_rows(xs, rs, g, b, static_cast<float*>(ys), rows, cols, epsilon);
      };
      own.kernel = "runtime layernorm";
      m.execs.push_back(std::move(own));
      m.finish(dst, y);
      return;
    }
  }
  memory::desc md2 = plain({rows, cols});
  if (r >= 0) {   // x + residual first, into a temporary
    int sum = m.temp(plain(shape));
    dnnl::binary::primitive_desc add(m.eng, dnnl::algorithm::binary_add, plain(shape),
                                     m.md_of(r), plain(shape), m.attr({}));
    m.add(add, dnnl::binary(add), {Impl::use(DNNL_ARG_SRC_0, x), Impl::use(DNNL_ARG_SRC_1, r),
                                   Impl::use(DNNL_ARG_DST, sum)});
    x = sum;
  }
  auto flags = dnnl::normalization_flags::none;
  if (scale >= 0) flags = flags | dnnl::normalization_flags::use_scale;
  if (bias >= 0) flags = flags | dnnl::normalization_flags::use_shift;
  const memory::desc out2 = plain({rows, cols}, out.get_data_type());
  dnnl::layer_normalization_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, md2, out2, epsilon, flags, m.attr({}));
  int y = m.produce(dst, out);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, md2), Impl::view(DNNL_ARG_DST, y, out2)};
  if (scale >= 0) args.push_back(constant(DNNL_ARG_SCALE, scale));
  if (bias >= 0) args.push_back(constant(DNNL_ARG_SHIFT, bias));
  m.add(pd, dnnl::layer_normalization_forward(pd), std::move(args));
  m.finish(dst, y);
}

void Partition::transpose(int dst, int src, const std::vector<int>& perm) {
  Impl& m = *impl_;
  // output axis i is input axis perm[i]: oneDNN's permute_axes wants where each input axis goes
  std::vector<int> where(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) where[perm[i]] = int(i);
  int x = strided(m.md_of(src)) ? src : m.ensure(src, plain(m.val(src).shape));
  // x's bytes through permuted strides: a reader that needs them dense copies them (dense()),
  // one that reads strides (a reorder, another view) does not
  const memory::desc seen = m.md_of(x).permute_axes(where);
  if (m.val(dst).kind != Kind::Output) return m.view_of(dst, x, seen);
  int y = m.produce(dst, plain(m.val(dst).shape));
  m.reorder(x, seen, y, plain(m.val(dst).shape));
  m.finish(dst, y);
}

void Partition::slice(int dst, int src, const Dims& offsets, const Dims& sizes) {
  Impl& m = *impl_;
  int x = strided(m.md_of(src)) ? src : m.ensure(src, plain(m.val(src).shape));
  const memory::desc& md = m.md_of(x);
  if (m.val(dst).kind == Kind::Output) {
    int y = m.produce(dst, plain(m.val(dst).shape));
    m.reorder(x, md.submemory_desc(sizes, offsets), y, plain(sizes));
    return m.finish(dst, y);
  }
  // x's bytes from the block's first value on, through x's strides
  const Dims strides = md.get_strides();
  int64_t first = 0;
  for (size_t i = 0; i < offsets.size(); ++i) first += offsets[i] * strides[i];
  Dims seen;
  if (!view_reshaped(sizes, strides, m.val(dst).shape, seen))
    m.fail("a block whose shape is not its output's with unit axes dropped");
  m.view_of(dst, x, memory::desc(m.val(dst).shape, md.get_data_type(), seen),
            size_t(first) * memory::data_type_size(md.get_data_type()));
}

void Partition::reshape(int dst, int src) {
  Impl& m = *impl_;
  const memory::desc& md = m.md_of(src);
  if (!strided(md)) m.fail("a reshape of a blocked layout");
  // src's values in row-major order with dst's shape: a view where src's strides allow it,
  // else a view of a dense copy
  Dims seen;
  if (!view_reshaped(m.val(src).shape, md.get_strides(), m.val(dst).shape, seen)) {
    src = m.ensure(src, plain(m.val(src).shape, md.get_data_type()));
    seen = plain(m.val(dst).shape).get_strides();
  }
  const memory::desc viewed(m.val(dst).shape, m.md_of(src).get_data_type(), seen);
  Val& d = m.val(dst);
  if (d.kind == Kind::Output) {   // the caller's buffer: copy the values
    d.md = plain(d.shape);
    d.has_md = true;
    m.reorder(src, viewed, dst, d.md);
    return;
  }
  m.view_of(dst, src, viewed);
}

// md without the axes `dropped` (each of size 1), and with one axis of size 1 in front, outermost
// by its stride: the same bytes, in the form of a product's batch that oneDNN 3.2's brgemm takes
static memory::desc unit_first(const memory::desc& md, const std::vector<bool>& dropped) {
  Dims dims{1}, strides{0};
  const Dims all = md.get_dims(), steps = md.get_strides();
  for (size_t i = 0; i < all.size(); ++i) {
    strides[0] = std::max(strides[0], all[i] * steps[i]);
    if (i >= dropped.size() || !dropped[i]) {
      dims.push_back(all[i]);
      strides.push_back(steps[i]);
    }
  }
  strides[0] = std::max<int64_t>(strides[0], 1);
  return memory::desc(dims, md.get_data_type(), strides);
}

// a matmul reading its operands through the strides they have (a head split of one projection
// is a strided view: acbd), or nothing where oneDNN has no brgemm kernel for them: its gemm and
// reference kernels cost more than copying the operands dense (GPT-2's q·kᵀ, split from one
// projection of three: 0.51 ms on gemm:jit against 0.40 copied, one thread)
static std::optional<dnnl::matmul::primitive_desc> strided_matmul(
    const dnnl::engine& eng, const memory::desc& a, const memory::desc& b, const memory::desc& c,
    const dnnl::primitive_attr& attr) {
  try {
    dnnl::matmul::primitive_desc pd(eng, a, b, c, attr);
    if (!implemented_by(pd, "brg")) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

void Partition::attention(int dst, int q, int k, int v, int mask, float scale) {
  Impl& m = *impl_;
  const Dims& qs = m.val(q).shape;
  const Dims& ks = m.val(k).shape;
  const Dims& vs = m.val(v).shape;
  Dims scores = qs;
  scores.back() = ks[ks.size() - 2];
  // q·kᵀ and p·v in the compute type, accumulating in f32; the scores and the softmax in f32: the
  // exponential amplifies an error in a score (scores rounded to bf16 set BERT's worst output
  // error above OpenVINO's; q and k rounded, with f32 scores, do not)
  const dt c = m.compute;
  std::vector<int> perm(ks.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  // the mask seen with the scores' rank (its leading unit axes added), as a binary operand
  Dims mask_dims;
  int mv = -1;
  if (mask >= 0) {
    const Dims& ms = m.val(mask).shape;
    mask_dims.assign(scores.size() - ms.size(), 1);
    mask_dims.insert(mask_dims.end(), ms.begin(), ms.end());
    mv = m.ensure(mask, plain(ms));
  }
  auto scaled = [&](bool masked) {   // the scores' post-ops: ·scale, + mask
    dnnl::primitive_attr at;
    at.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    po.append_eltwise(dnnl::algorithm::eltwise_linear, scale, 0.f);
    if (masked) po.append_binary(dnnl::algorithm::binary_add, plain(mask_dims));
    at.set_post_ops(po);
    return at;
  };
  auto typed = [&](int id, dt type) { return m.md_of(id).get_data_type() == type; };
  auto strided = [&](bool masked) {
    return typed(q, c) && typed(k, c)
               ? strided_matmul(m.eng, m.md_of(q), m.md_of(k).permute_axes(perm), plain(scores), scaled(masked))
               : std::nullopt;
  };
  // the mask added by the softmax's own loop where it runs (cheaper than q·kᵀ's post-op,
  // softmax.h, and it leaves the product free to pad the keys), else by the product where oneDNN
  // adds it fast, else by a binary step:
  // oneDNN's fast products add a mask only where it spans every batch axis of more than one
  // ([1,3,49,49] over Swin-T's 64 windows does not; nor does a causal [S,S] at batch 2), and the
  // reference kernel took 180 ms of Swin-T's 230 a run
  const int last = int(scores.size()) - 1;
  const bool own_softmax = m.own_softmax(plain(scores), plain(scores, c), last);
  const bool mask_in_softmax = mv >= 0 && mask_dims.back() == scores.back() && own_softmax;
  const bool mask_in_product = mv >= 0 && !mask_in_softmax;
  bool mask_apart = false;
  auto found = strided(mask_in_product);
  if (!found && mask_in_product && (found = strided(false))) mask_apart = true;
  // Where q and k are copied (not read through their strides) and the products run on AMX, the
  // keys are stored padded to a multiple of 32 when the softmax is the runtime's (it leaves the
  // padding out and writes it 0 in p): oneDNN 3.2's AMX products run a tail of keys slowly, as
  // q·kᵀ's N and p·v's K (two threads, q·kᵀ + p·v: ViT's [12,197,64] 146 µs against 98 for 224
  // keys; [8,1024,64] over 77 keys 261 against 144 for 96). Its AVX-512 fp32 kernels take tails
  // in their stride: there padding costs 7% (ViT) to 2.4x (7 keys). autofusion/benchmarks/native/attention_cost.cpp
  const int64_t keys = scores.back();
  auto copied_pd = [&](Dims stored, bool masked) {   // q and k dense (copy_rows), k read transposed
    Dims kvs = ks;
    kvs[kvs.size() - 2] = stored.back();
    return dnnl::matmul::primitive_desc(m.eng, plain(qs, c), plain(kvs, c).permute_axes(perm), plain(stored), scaled(masked));
  };
  const bool padded = !found && !mask_in_product && keys % 32 && own_softmax &&
                      implemented_by(copied_pd(scores, false), "brg:avx512_core_amx");
  Dims stored = scores;
  stored.back() = padded ? (keys + 31) / 32 * 32 : keys;
  auto copied = [&](bool masked) {
    q = m.ensure(q, plain(qs, c));
    k = padded ? m.padded_rows(k, stored.back(), c) : m.ensure(k, plain(ks, c));
    return copied_pd(stored, masked);
  };
  dnnl::matmul::primitive_desc qk = found ? *found : copied(mask_in_product);
  if (!found && mask_in_product && is_reference(qk)) {
    qk = copied(false);
    mask_apart = true;
  }
  int s = m.temp(plain(stored));
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, q, qk.src_desc()),
                        Impl::view(DNNL_ARG_WEIGHTS, k, qk.weights_desc()),
                        Impl::use(DNNL_ARG_DST, s)};
  if (mask_in_product && !mask_apart)
    args.push_back(Impl::view(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, mv, plain(mask_dims)));
  m.add(qk, dnnl::matmul(qk), std::move(args));
  if (mask_apart) {
    dnnl::binary::primitive_desc add(m.eng, dnnl::algorithm::binary_add, plain(scores), plain(mask_dims),
                                     plain(scores), m.attr({}));
    m.add(add, dnnl::binary(add), {Impl::use(DNNL_ARG_SRC_0, s), Impl::view(DNNL_ARG_SRC_1, mv, plain(mask_dims)),
                                   Impl::use(DNNL_ARG_DST, s)});
  }
  int p = m.temp(plain(stored, c));
  m.softmax(s, plain(stored), p, plain(stored, c), last, false, mask_in_softmax ? mv : -1, mask_dims, keys);
  const memory::desc out = m.dense_result(dst);
  // dst's axes stored in the plan's order ([H,S,D] as [S,H,D]: the heads merged back as they are
  // written): oneDNN 3.2 picks brgemm for that only with the batch's unit axes outermost, gemm:jit
  // else. So the three operands are seen without the batch axes of size 1 in all of them and
  // with one in front (GPT-2's [1,H,S,D] stored as [1,S,H,D] is so already; ViT's, as [S,1,H,D],
  // took 3.3 ms a run on gemm:jit)
  const bool reordered = out != plain(m.val(dst).shape, out.get_data_type());
  std::vector<bool> units;   // the batch axes of size 1 in p, v and dst (of one rank)
  if (vs.size() == scores.size())
    for (size_t i = 0; i + 2 < vs.size(); ++i) units.push_back(scores[i] == 1 && vs[i] == 1);
  auto seen = [&](const memory::desc& md) { return reordered ? unit_first(md, units) : md; };
  auto pv = typed(v, c) && !padded
                ? strided_matmul(m.eng, seen(plain(scores, c)), seen(m.md_of(v)), seen(out), m.attr({}))
                : std::nullopt;
  if (!pv) {
    Dims vps = vs;
    vps[vps.size() - 2] = stored.back();
    v = padded ? m.padded_rows(v, stored.back(), c) : m.ensure(v, plain(vs, c));
    pv = dnnl::matmul::primitive_desc(m.eng, seen(plain(stored, c)), seen(plain(vps, c)), seen(out), m.attr({}));
  }
  int y = m.produce(dst, out);
  m.add(*pv, dnnl::matmul(*pv), {Impl::view(DNNL_ARG_SRC, p, pv->src_desc()),
                                 Impl::view(DNNL_ARG_WEIGHTS, v, pv->weights_desc()),
                                 Impl::view(DNNL_ARG_DST, y, pv->dst_desc())});
  m.finish(dst, y);
}

void Partition::kernel(KernelFn fn, const std::vector<int>& dsts, const std::vector<int>& srcs,
                       const Dims& sizes) {
  Impl& m = *impl_;
  Exec e{dnnl::primitive(), {}, {}, m.node, m.step, fn, {}, {}, sizes};
  e.kernel = "generated";
  // each operand dense, row-major or in the axis order the plan gave it (the kernel's strides)
  for (size_t i = 0; i < srcs.size(); ++i)
    e.args.push_back(Impl::use(DNNL_ARG_MULTIPLE_SRC + int(i), m.ensure(srcs[i], m.dense_result(srcs[i]))));
  std::vector<int> written;
  for (size_t j = 0; j < dsts.size(); ++j) {
    written.push_back(m.produce(dsts[j], m.dense_result(dsts[j])));
    e.args.push_back(Impl::use(DNNL_ARG_MULTIPLE_DST + int(j), written.back()));
  }
  m.execs.push_back(std::move(e));
  for (size_t j = 0; j < dsts.size(); ++j) m.finish(dsts[j], written[j]);
}

void Partition::finalize() { impl_->finalize(); }
void Partition::run(void* const* inputs, void* const* outputs) { impl_->run(inputs, outputs); }
bool Partition::inputs_finite(void* const* inputs) const {
  for (size_t s = 0; s < impl_->input_elems.size(); ++s)
    if (!all_finite(static_cast<const float*>(inputs[s]), impl_->input_elems[s])) return false;
  return true;
}
size_t Partition::arena_bytes() const { return impl_->arena_size; }
void Partition::profile(bool on) { impl_->profile(on); }
const std::vector<double>& Partition::step_ns() const { return impl_->step_ns; }

std::string Partition::step_kernels() const {
  std::vector<std::string> steps(impl_->step + 1);
  for (const Exec& e : impl_->execs) {
    std::string what = e.kernel;
    if (e.gate != Alg::None)
      what += std::string(what.empty() ? "" : " + ") + gate_name(e.gate);
    if (e.means) what += " + channel means";
    std::string& s = steps[e.step];
    s += (s.empty() ? "" : " + ") + what;
  }
  std::string out;
  for (const std::string& s : steps) out += s + "\n";
  return out;
}

std::string Partition::current_node() const { return impl_->node; }

void set_error(const std::string& what) { last_error = what; }

extern "C" Constants* af_constants() { return new Constants; }
extern "C" void af_constants_free(Constants* c) { delete c; }

extern "C" {

// check_finite: return 2, running nothing, where an input holds NaN or an infinity (the caller
// then runs the model on PyTorch's kernels: model.py); hold_cpu >= 0: the calling thread runs on
// that CPU alone during the call (CallerHeld). Both here, not in Python, for a model whose whole
// program is this one call: after its kernels ran, Python's own code is out of cache and the
// same work from Python cost ~70 µs a call (MobileNetV3-L).
int af_run(Partition* p, void* const* inputs, void* const* outputs, int check_finite, int hold_cpu) {
  CallerHeld held(hold_cpu);
  if (check_finite && !p->inputs_finite(inputs)) return 2;
  try {
    p->run(inputs, outputs);
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 1;
  }
}

void af_free(Partition* p) { delete p; }
const char* af_error() { return last_error.c_str(); }
size_t af_arena_bytes(Partition* p) { return p->arena_bytes(); }
void af_profile(Partition* p, int on) { p->profile(on != 0); }

int af_step_kernels(Partition* p, char* out, int n) {
  const std::string text = p->step_kernels();
  if (n > 0) std::snprintf(out, size_t(n), "%s", text.c_str());
  return int(text.size()) + 1;
}

int af_step_times(Partition* p, double* out, int n) {
  const std::vector<double>& ns = p->step_ns();
  std::copy_n(ns.begin(), std::min<size_t>(n, ns.size()), out);
  return int(ns.size());
}

// Pins thread k >= 1 of an OpenMP team of n to CPU cpus[k] (the caller's thread, 0, stays free).
// The pool keeps its threads for later teams, so this holds for every parallel region of n
// threads after it (affinity.py says why). Returns how many threads it pinned.
int af_pin_workers(const int* cpus, int n) {
  int pinned = 0;
#pragma omp parallel num_threads(n) reduction(+ : pinned)
  if (const int k = omp_get_thread_num(); k > 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[k], &set);
    pinned += pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
  }
  return pinned;
}

int af_all_finite(const float* p, int64_t n) { return all_finite(p, n); }
}

}  // namespace af
