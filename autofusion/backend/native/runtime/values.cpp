// Values, views and layouts: what a step reads and writes, where, and in which layout.
#include "partition.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

namespace af {

// the product of dims [from, to) of a shape
int64_t product(const Dims& shape, size_t from, size_t to) {
  return std::accumulate(shape.begin() + from, shape.begin() + to, int64_t(1), std::multiplies<>());
}

memory::desc plain(const Dims& shape, dt type) {   // dense row-major
  Dims strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return memory::desc(shape, type, strides);
}

memory::desc any(const Dims& shape, dt type) { return memory::desc(shape, type, tag::any); }

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

// oneDNN's reference implementation: what it picks where no fast kernel takes the problem. Its
// recurrent primitives without brgemm are named "ref" too, but run their products as gemm calls
// and their gates in JIT code (RNN_GEMM): not one.
bool is_reference(const dnnl::primitive_desc_base& pd) {
  return pd.get_kind() != dnnl::primitive::kind::rnn && implemented_by(pd, "ref");
}

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

// oneDNN counts dilation from 0 (dense), ONNX from 1
Dims onednn_dilations(const Dims& d) {
  Dims out(d);
  for (auto& x : out) x -= 1;
  return out;
}

// a convolution's weight dims as oneDNN takes them: ONNX's [O, I/g, k...], grouped [g, O/g, I/g, k...]
Dims grouped_weight(const Dims& onnx, int64_t groups) {
  Dims dims = onnx;
  if (groups > 1) {
    dims.insert(dims.begin(), groups);
    dims[1] /= groups;
  }
  return dims;
}

// ONNX holds the weight [C_in, C_out/g, k...]; oneDNN reads [C_out, C_in, k...], grouped
// [g, C_out/g, C_in/g, k...]: the same bytes seen with the two channel axes swapped
DeconvWeight deconv_weight(const Dims& onnx, int64_t groups) {
  const Dims held = plain(onnx).get_strides();
  const int64_t in_per_group = onnx[0] / groups;
  Dims dims{onnx[1], in_per_group}, seen{held[1], held[0]};
  if (groups > 1) {
    dims.insert(dims.begin(), groups);
    seen.insert(seen.begin(), in_per_group * held[0]);
  }
  for (size_t k = 2; k < onnx.size(); ++k) {
    dims.push_back(onnx[k]);
    seen.push_back(held[k]);
  }
  return {dims, memory::desc(dims, dt::f32, seen)};
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


// a value bound by slot (input, output, constant): dense, its layout fixed
Val& Partition::Impl::declare(int id, Kind kind, int slot, const Dims& shape) {
  Val v;
  v.kind = kind;
  v.slot = slot;
  v.shape = shape;
  v.layout = Layout::Plain;
  v.md = plain(shape);
  v.has_md = true;
  return vals[id] = v;
}

int Partition::Impl::temp(const memory::desc& md) {
  int id = next_temp++;
  Val v;
  v.md = md;
  v.has_md = true;
  v.first = v.last = step;
  v.shape = md.get_dims();
  vals[id] = v;
  return id;
}

void Partition::Impl::reorder(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md) {
  auto [from, to] = simplified(src_md, dst_md);
  if (copy_rows(src, from, dst, to) || gather_for_any_size(src, from, dst, to)) return;
  dnnl::reorder::primitive_desc pd(eng, from, eng, to, reorder_attr());
  add(pd, dnnl::reorder(pd), {view(DNNL_ARG_FROM, src, from), view(DNNL_ARG_TO, dst, to)});
}

// the reorder as row copies, the runtime's own, where both layouts keep the last axis
// contiguous and only the rows move (a head split read out of one QKV projection): oneDNN 3.2's
// jit:uni reorder took 56 µs for one of ViT's [12,197,64] bf16 heads, rows of 128 bytes.
// False where not (a type changes, the last axis moves, rows under 64 bytes)
bool Partition::Impl::copy_rows(int src, const memory::desc& from, int dst, const memory::desc& to) {
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
int Partition::Impl::padded_rows(int src, int64_t padded, dt type) {
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

dnnl::primitive_attr Partition::Impl::reorder_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// the id of a value holding `src` in layout `md`: src itself, or a temporary a reorder fills
// (once: a later step asking for the same layout reads the same temporary)
int Partition::Impl::ensure(int src, const memory::desc& md) {
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
int Partition::Impl::dense(int src) {
  return val(src).spread ? ensure(src, plain(val(src).shape, md_of(src).get_data_type())) : src;
}

// a product's residual (-1: none) row-major in its own type, as the binary post-op reads it
int Partition::Impl::plain_residual(int residual) {
  return residual < 0 ? -1 : ensure(residual, plain(val(residual).shape, md_of(residual).get_data_type()));
}

// dst as a view of src's values at `bytes` into them, seen through `md`; a view in row-major
// order is dense, any other is spread
void Partition::Impl::view_of(int dst, int src, const memory::desc& md, size_t bytes) {
  Val& d = val(dst);
  d.alias = src;
  d.view_bytes = bytes;
  d.md = md;
  d.has_md = true;
  d.spread = md != plain(d.shape, md.get_data_type());
}

// where a primitive that writes layout `md` should write dst; finish() completes it
// what a convolution or product writes dst in: bf16 only where other steps alone read it
dt Partition::Impl::result_type(int dst) {
  const Val& v = val(dst);
  if (v.type != dt::f32) return v.type;
  return compute == dt::bf16 && v.kind == Kind::Internal && v.layout == Layout::Any ? dt::bf16
                                                                                  : dt::f32;
}

// the dense layout a step that writes dense values (a product, a norm) writes dst in: f32, or
// bf16 where only products in bf16 read it; row-major, or with the axes in the plan's order
memory::desc Partition::Impl::dense_result(int dst) {
  const Val& v = val(dst);
  const dt type = v.type != dt::f32 ? v.type
                  : v.bf16_only && compute == dt::bf16 && v.kind == Kind::Internal ? dt::bf16 : dt::f32;
  if (v.order.empty()) return plain(v.shape, type);
  Dims stored(v.order.size());   // stored axis i is the value's axis order[i]
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = v.shape[v.order[i]];
  return plain(stored, type).permute_axes(std::vector<int>(v.order.begin(), v.order.end()));
}

int Partition::Impl::produce(int dst, const memory::desc& md) {
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
int Partition::Impl::write_over(int dst, int src, bool in_place) {
  if (!in_place) return produce(dst, md_of(src));
  Val& d = val(dst);
  d.alias = src;
  d.md = md_of(src);
  d.has_md = true;
  return dst;
}

// a constant's bytes, seen through `seen_as` (its axes in another order: a deconvolution's weight),
// copied into memory of layout `md`, once
memory Partition::Impl::constant_as(int id, const memory::desc& seen_as, const memory::desc& md) {
  if (seen_as.get_size() != val(id).owned.get_desc().get_size())
    fail("a constant seen through a layout of another size");
  return constant_laid_out(id, -1, seen_as, md);
}

// the `part`th of a constant's `parts` equal blocks of values (a bidirectional LSTM's weights, by
// direction) copied into memory of layout md, which has the block's dims, once
memory Partition::Impl::constant_part_as(int id, int part, int parts, const memory::desc& md) {
  const memory::desc block = plain(md.get_dims());
  if (block.get_size() * parts != val(id).owned.get_desc().get_size()) fail("a constant's part of another size");
  return constant_laid_out(id, part, block, md);
}

// the bytes of a constant's part (-1: all of it), seen through `seen_as`, copied into memory of
// layout md; made once for every build where the builds share their constants
memory Partition::Impl::constant_laid_out(int id, int part, const memory::desc& seen_as, const memory::desc& md) {
  Val& c = val(id);
  if (c.kind != Kind::Constant) fail("value " + std::to_string(id) + " must be a constant");
  auto make = [&] {
    char* bytes = static_cast<char*>(c.owned.get_data_handle()) + std::max(part, 0) * seen_as.get_size();
    return reordered(memory(seen_as, eng, bytes), md);
  };
  return shared ? shared->as(c.slot, md, make, part) : make();
}

// from's values in new memory of layout md, now (a constant laid out while a step is built)
memory Partition::Impl::reordered(memory from, const memory::desc& md) {
  memory out(md, eng);
  dnnl::reorder(from, out).execute(strm, from, out);
  strm.wait();
  return out;
}

// a constant copied into memory of layout `md` (weights reordered once, here)
memory Partition::Impl::constant_as(int id, const memory::desc& md) {
  Val& c = val(id);
  if (c.kind != Kind::Constant) fail("value " + std::to_string(id) + " must be a constant");
  memory::desc given = c.owned.get_desc();   // its dims as the step counts them ([C] as [1, C])
  return constant_as(id, given.get_dims() == md.get_dims() ? given : given.reshape(md.get_dims()), md);
}

Partition::Partition(const void* const* constants, Shared* shared, Arena* context, bool any_size)
    : impl_(new Impl(constants, shared, context, any_size)) {}
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

}  // namespace af
