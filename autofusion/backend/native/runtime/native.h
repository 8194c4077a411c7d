// The native runtime's interface: what a partition's program calls.
//
// A Partition is one native partition of a compiled model, set up for one set of sizes: its
// values (partition inputs and outputs bound to the caller's buffers on every run, constants
// copied in once, intermediates in one arena), and its steps, one per graph node, each one or
// more oneDNN primitives created once. The partition's program (backend/native/program.py, read
// by program.cpp) declares the values with the plan's layouts and lifetimes, then calls one
// method per node in execution order; finalize() places the intermediates in the arena.
//
// This header includes no oneDNN header: partition.h, the runtime's inside, holds oneDNN's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eltwise.h"
#include "kernel.h"

namespace af {

using Dims = std::vector<int64_t>;

// Plain: dense row-major (what the caller's tensors and reshapes need). Any: what oneDNN picks
// for the producing primitive (a blocked layout along a chain of convolutions).
#define AF_LAYOUTS(X) X(Plain) X(Any)
#define AF_ENUMERATOR(name) name,
enum class Layout { AF_LAYOUTS(AF_ENUMERATOR) };

// What a step's convolutions and matrix products compute in. BF16: bf16 operands (weights
// converted once at load) with fp32 accumulation; a result only other steps read, in a layout
// oneDNN picks, stays bf16 in memory; plain values (partition outputs, what reshapes and
// generated kernels read) are fp32. Memory-bound steps work in the data type of their input.
#define AF_PRECISIONS(X) X(F32) X(BF16)
enum class Precision { AF_PRECISIONS(AF_ENUMERATOR) };

// One elementwise function: oneDNN's eltwise algorithm with its two parameters, used both as a
// post-op and as a primitive of its own. The list is ir/activations.py's ELTWISE (eltwise.h is
// generated from it); a program names them as they are spelled there (program.cpp reads the
// names through the list).
#define AF_ALG_ENUMERATOR(name, onednn, gate) name,
enum class Alg { AF_ALGS(AF_ALG_ENUMERATOR) };
struct Act {
  Alg alg = Alg::None;
  float alpha = 0.f, beta = 0.f;
};
using Acts = std::vector<Act>;

// What a value holds: f32 unless its declaration is followed by typed() (the integers of a
// quantized model, which int8 steps read and write)
#define AF_TYPES(X) X(F32) X(U8) X(S8)
enum class Type { AF_TYPES(AF_ENUMERATOR) };

#define AF_BINS(X) X(Add) X(Sub) X(Mul) X(Div) X(Max) X(Min)
enum class Bin { AF_BINS(AF_ENUMERATOR) };

#define AF_POOLS(X) X(Max) X(AvgIncludePad) X(AvgExcludePad)
enum class Pool { AF_POOLS(AF_ENUMERATOR) };

// Pad's modes that copy the input into the border (constant fills it: pad())
#define AF_PAD_MODES(X) X(Reflect) X(Edge) X(Wrap)
enum class PadMode { AF_PAD_MODES(AF_ENUMERATOR) };

#define AF_REDUCES(X) X(Mean) X(Sum) X(Max) X(Min) X(Prod)
enum class Reduce { AF_REDUCES(AF_ENUMERATOR) };

// what a partition's builds share (partition.h): its constants laid out as its steps want them;
// and what the builds that run in one execution context share: their arena
struct Shared;
struct Arena;
class Streams;

class Partition {
 public:
  // constants: by slot, read in place while the partition lives; shared: their laid-out forms;
  // context: the arena it runs in (null: its own); any_size: a step that has a kind of primitive
  // taking its sizes at run time uses it (made once for every size: a new size's set-up costs
  // no code generated for it), the others are made for these sizes (library.py says when)
  Partition(const void* const* constants, Shared* shared, Arena* context, bool any_size = false);
  ~Partition();
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;

  // ---- values (id: an index the program picks; step: the node that makes or uses it)
  void input(int id, int slot, const Dims& shape);
  void output(int id, int slot, const Dims& shape);
  // order: its axes in memory, outermost first, where the caller holds it permuted (empty:
  // row-major)
  void constant(int id, int slot, const Dims& shape, const Dims& order = {});
  // bf16_only: only products in bf16 read it (as operands): a step writing it dense writes bf16;
  // order: its axes in memory, outermost first, where a step writing it dense can store them so
  // (empty: row-major)
  void value(int id, const Dims& shape, int first, int last, Layout layout, bool bf16_only = false,
             const Dims& order = {});

  // the value declared as `id` holds `type`
  void typed(int id, Type type);

  // ---- steps: node() starts the next one (its name goes into every error it raises)
  void node(const char* name, Precision precision = Precision::F32);
  // act(conv(src, w) + b + residual); dilations as ONNX counts them (1 = dense); w a constant
  // (reordered once) or, ungrouped, a computed value (reordered on each call); in_place: the
  // result may be written over the residual's bytes (this step reads them last)
  void conv(int dst, int src, int w, int b, int residual, const Dims& strides,
            const Dims& dilations, const Dims& pad_begin, const Dims& pad_end, int64_t groups,
            const Acts& acts, bool in_place = false);
  // act(conv_transpose(src, w) + b): ONNX's ConvTranspose, w a constant as ONNX holds it
  // ([C_in, C_out/groups, k...]); pad_end less ONNX's output_padding (the extra output at the end)
  void deconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
              const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts);
  // src with `begin`/`end` values of `value` added before/after each axis (a negative count
  // crops): ONNX's Pad in constant mode; dst dense
  void pad(int dst, int src, const Dims& begin, const Dims& end, float value);
  // dst: src with `begin`/`end` more values before/after it per axis (a negative count crops it
  // first), the border read from what is left as the mode says (numpy's reflect, edge, wrap)
  void pad_from_input(int dst, int src, const Dims& begin, const Dims& end, PadMode mode);
  // ONNX's LSTM (layout 0, default activations) as oneDNN's: x [T, N, I]; w [1, D, I, 4, H] and
  // r [1, D, H, 4, H] (ldigo, gates in oneDNN's order i, f, c, o), b [1, D, 4, H] (ONNX's two
  // biases summed), constants; h0, c0 [D, N, H] or -1 (zeros); y [T, D, N, H], y_h and y_c
  // [D, N, H]; directions 1 (forward; `reverse` 1: backward) or 2 (both, concatenated)
  void lstm(int y, int y_h, int y_c, int x, int w, int r, int b, int h0, int c0, int reverse);
  // ONNX's GRU (layout 0, default activations) as oneDNN's, like lstm: w [1, D, I, 3, H] and r
  // [1, D, H, 3, H] (gates z, r, h: ONNX's order is oneDNN's), b [1, D, 3, H] (the two biases
  // summed) or, with linear_before_reset, [1, D, 4, H] (z and r summed, then Wbh, Rbh: oneDNN's
  // lbr_gru); h0 [D, N, H] or -1; y [T, D, N, H], y_h [D, N, H]
  void gru(int y, int y_h, int x, int w, int r, int b, int h0, int reverse, bool linear_before_reset);
  void pool(int dst, int src, Pool kind, const Dims& kernel, const Dims& strides,
            const Dims& dilations, const Dims& pad_begin, const Dims& pad_end);
  // src's spatial axes scaled to dst's (oneDNN's resampling, the factors dst's sizes over src's):
  // nearest, the source pixel round((o + 0.5) / f - 0.5); linear, between the two nearest
  // (o + 0.5) / f - 0.5, clamped at the edges
  void resample(int dst, int src, bool linear);
  // the mean of src over its spatial axes (a global average pool), summed by the gate of the step
  // that wrote src (gated.h) as it writes, where that step has one and src's layout puts channels
  // innermost (nhwc, nChw16c); else oneDNN's pooling
  void mean_in_gate(int dst, int src);
  void eltwise(int dst, int src, const Acts& acts, bool in_place);
  void binary(int dst, int a, int b, Bin op, const Acts& acts, bool in_place);
  void batch_norm(int dst, int src, int scale, int bias, int mean, int var, float epsilon,
                  const Acts& acts);
  // act(a·w + bias + residual) over a's last axis: w a constant [K, N], bias a constant [N] or
  // -1, residual of dst's shape or -1; one row with no post-op but a gate and no residual runs on
  // the runtime's own product (gemv.h)
  void linear(int dst, int a, int w, int bias, const Acts& acts, int residual = -1);
  // act(alpha·(a·b) + c + residual) with numpy broadcasting for c; a, b, c plain and of one rank,
  // residual of dst's shape or -1
  void matmul(int dst, int a, int b, int c, bool trans_a, bool trans_b, float alpha,
              const Acts& acts, int residual = -1);
  void concat(int dst, const std::vector<int>& srcs, int axis);
  void softmax(int dst, int src, int axis, bool log);
  // src reduced over the axes where dst's size is 1: one run of them the runtime's own loop
  // (reduce.h), row-major; others oneDNN's reduction
  void reduce(int dst, int src, Reduce op);
  // layer norm over the axes from `axis` on of (src + residual); scale/bias constants or -1; the
  // runtime's own row loop where dst is dense (layernorm.h), else oneDNN's
  void layer_norm(int dst, int src, int scale, int bias, int residual, int axis, float epsilon);
  void transpose(int dst, int src, const std::vector<int>& perm);
  // the block of src at `offsets` of extent `sizes` (src's rank; dst may drop unit axes)
  void slice(int dst, int src, const Dims& offsets, const Dims& sizes);
  // dst is src with another shape (the same plain bytes): a view, or a copy where dst is output
  void reshape(int dst, int src);
  // softmax(q·kᵀ·scale + mask)·v, mask -1 when there is none; q·kᵀ and the softmax in fp32, p·v
  // in the step's precision
  void attention(int dst, int q, int k, int v, int mask, float scale);
  // fn over dense copies of srcs (a reorder where a src is blocked), writing dense dsts; `sizes`
  // are the kernel's run-time sizes (its `d`)
  void kernel(KernelFn fn, const std::vector<int>& dsts, const std::vector<int>& srcs,
              const Dims& sizes = {});

  // ONNX's QuantizeLinear per tensor: saturate(round_half_even(src / scale) + zero_point), f32
  // into dst's type (u8, s8), in src's layout
  void quantize(int dst, int src, float scale, int zero_point);
  // ONNX's DequantizeLinear per tensor: (src − zero_point)·scale, u8 or s8 into f32
  void dequantize(int dst, int src, float scale, int zero_point);
  // quantize(clamp(dequantize(a) op dequantize(b), low, high)), op Add or Mul: integers (u8, s8)
  // of one shape, in a's layout, each side dequantized by its own scale and zero point
  void qbinary(int dst, int a, int b, Bin op, float a_scale, int a_zero_point, float b_scale, int b_zero_point,
               float y_scale, int y_zero_point, float low, float high);
  // table[src − first]: a function of 8-bit integers (u8, s8) as its 256 results, `table` a
  // constant of them (first: 0 for u8, −128 for s8)
  void lookup(int dst, int src, int table);
  // quantize(act(conv(dequantize(src), w·w_scales) + b)) over s32 sums: w a constant of integers
  // (held as f32: exact), w_scales a constant of 1 or O values, b an f32 constant or -1
  void qconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
             const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts, int w_scales,
             float src_scale, int src_zero_point, float dst_scale, int dst_zero_point);
  // qconv's transposed convolution: w as ONNX holds it, [C_in, C_out/groups, k...]
  void qdeconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
               const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts, int w_scales,
               float src_scale, int src_zero_point, float dst_scale, int dst_zero_point);
  // quantize(act(dequantize(a)·(w·w_scales) + b)) over a's last axis: w a constant [K, N] (trans_b:
  // [N, K]) of integers, w_scales 1 or N values, b an f32 constant [N] or -1
  void qmatmul(int dst, int a, int w, int b, bool trans_b, const Acts& acts, int w_scales, float a_scale,
               int a_zero_point, float dst_scale, int dst_zero_point);
  // float(Σ (q − zp)·w)·(scale·w_scales) with (q, scale, zp) = DynamicQuantizeLinear(a) on each
  // call, q written to `quantized` (u8, a's shape): w a constant [K, N] of int8, w_scales 1 or N
  void dynamic_qmatmul(int dst, int a, int quantized, int w, int w_scales);

  void finalize();
  void run(void* const* inputs, void* const* outputs);
  // whether no input (float32, by slot) holds NaN or an infinity
  bool inputs_finite(void* const* inputs) const;
  size_t arena_bytes() const;
  std::string current_node() const;
  // profiling: on, every run adds each step's time (ns, its primitives and reorders) to its
  // count, zeroed when profiling is turned on; off, run() costs one branch per primitive more
  void profile(bool on);
  const std::vector<double>& step_ns() const;
  // per step, a line naming what runs it: oneDNN's implementations (a reorder's marked) or the
  // runtime's own loops (gemv, softmax, a gate, generated kernels), joined by " + "
  std::string step_kernels() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// what af_error() says next (the runtime's files set it where a call fails)
void set_error(const std::string& what);

extern "C" {
// the partition a program builds (program.cpp): its words and strings (program.py says how they
// encode the calls), its constants by slot, the generated kernels its calls name by index,
// whether its steps take primitives made for any size where they have one (Partition); null
// where it fails (af_error says why)
Partition* af_build(const int64_t* words, int64_t n_words, const char* const* strings,
                    const void* const* constants, Shared* shared, Arena* context,
                    const KernelFn* kernels, int any_size);
// what one partition's builds share (laid-out constants); freed after its last build is
Shared* af_shared();
void af_shared_free(Shared* s);
// one execution context's arena: the builds given it run one at a time (library.py); freed after
// its last build is
Arena* af_arena();
void af_arena_free(Arena* a);
// 0 done, 1 failed (af_error says why), 2 an input held NaN or ±inf where check_finite asked,
// nothing run; hold_cpu >= 0: the calling thread runs on that CPU alone during the call
int af_run(Partition* p, void* const* inputs, void* const* outputs, int check_finite, int hold_cpu);
// a model's streams (runner.cpp): n threads with teams of `threads`, pinned to cpus (n·threads
// of them) or not (null); af_run carried out on the first free one, callers in turn
Streams* af_streams(int n, int threads, const int* cpus);
void af_streams_free(Streams* s);
int af_run_on(Streams* s, int threads, Partition* p, void* const* inputs, void* const* outputs,
              int check_finite);
// af_build on the first free stream, for teams of `threads` (its OpenMP work on the stream's pool)
Partition* af_build_on(Streams* s, int threads, const int64_t* words, int64_t n_words, const char* const* strings,
                       const void* const* constants, Shared* shared, Arena* context, const KernelFn* kernels,
                       int any_size);
void af_free(Partition* p);
const char* af_error();
size_t af_arena_bytes(Partition* p);
void af_profile(Partition* p, int on);
// copies up to n step counts (ns since profiling was turned on) to out; returns the step count
int af_step_times(Partition* p, double* out, int n);
// writes up to n bytes of step_kernels() (NUL-terminated) to out; returns the bytes it needs
int af_step_kernels(Partition* p, char* out, int n);
// 1 where none of the n floats is NaN or ±inf (the check for plans that clamp NaN, model.py)
int af_all_finite(const float* p, int64_t n);
// pins thread k >= 1 of the calling thread's OpenMP team of n to cpus[k]; how many it pinned
int af_pin_workers(const int* cpus, int n);
}

}  // namespace af
