// Steps built for any size: what a partition's first calls at new sizes run, so that setting it
// up for them generates no code. oneDNN's convolutions and its brgemm products are code made for
// one shape (a new width of a text line: ~0.5 ms of JIT per convolution, ~7 ms for a small
// recognizer); its gemm product takes its rows at run time, so one primitive serves every size
// and, made once, comes from oneDNN's primitive cache after. A convolution becomes products over
// the image's patches laid out as rows (im2col.h), tile by tile of a fixed number of rows, by one
// brgemm product made for a tile. library.py decides when a build is made for any size and when
// for its own sizes.
#include "partition.h"

#include "im2col.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace af {

namespace {

memory::desc row_major_tag(const Dims& dims) {
  static const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  if (dims.empty() || dims.size() > 6) throw std::runtime_error("a product of more than 6 dims");
  return memory::desc(dims, dt::f32, tags[dims.size() - 1]);
}

// md's axes in the order its strides hold them, every dim taken at run time, as the format tag
// oneDNN names that order by (it takes a tag's order, not strides, for a run-time shape, and
// permutes no run-time dims); a zero desc where it names none
memory::desc in_order_at_run_time(const memory::desc& md) {
  static const std::unordered_map<std::string, tag> tags{
      {"a", tag::a},       {"ab", tag::ab},     {"ba", tag::ba},     {"abc", tag::abc},   {"acb", tag::acb},
      {"bac", tag::bac},   {"bca", tag::bca},   {"cba", tag::cba},   {"abcd", tag::abcd}, {"abdc", tag::abdc},
      {"acbd", tag::acbd}, {"acdb", tag::acdb}, {"adbc", tag::adbc}, {"bacd", tag::bacd}, {"bcda", tag::bcda},
      {"cdba", tag::cdba}, {"dcab", tag::dcab}, {"abcde", tag::abcde}, {"abced", tag::abced}};
  const Dims strides = md.get_strides();
  std::vector<int> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] > strides[b]; });
  std::string name;
  for (int a : order) name += char('a' + a);
  const auto found = tags.find(name);
  if (found == tags.end()) return {};
  return memory::desc(Dims(order.size(), DNNL_RUNTIME_DIM_VAL), md.get_data_type(), found->second);
}

// md with every dim but its last one taken at run time; a zero desc where md is not dense
// row-major f32 (run-time dims are those of a plain layout)
memory::desc rows_at_run_time(const memory::desc& md) {
  if (md.get_data_type() != dt::f32 || md != plain(md.get_dims(), dt::f32)) return {};
  Dims dims = md.get_dims();
  for (size_t i = 0; i + 1 < dims.size(); ++i) dims[i] = DNNL_RUNTIME_DIM_VAL;
  return row_major_tag(dims);
}

}  // namespace

// the product act(x·w + b [+ y, with sum]) of f32 x [rows, k] and w [k, n] into y [rows, n], its
// rows taken at run time; none where oneDNN has no such product for these (the step then makes
// one for its sizes)
std::optional<dnnl::matmul::primitive_desc> Partition::Impl::product_for_any_rows(
    const memory::desc& x_md, const memory::desc& w_md, bool bias, const memory::desc& y_md, const Acts& acts,
    bool sum) {
  const memory::desc xr = rows_at_run_time(x_md), yr = rows_at_run_time(y_md);
  if (xr.is_zero() || yr.is_zero()) return std::nullopt;
  try {
    dnnl::matmul::primitive_desc pd(eng, xr, w_md, bias ? plain({1, y_md.get_dims().back()}) : memory::desc(), yr,
                                    attr(acts, {}, sum));
    if (!is_reference(pd)) return pd;
  } catch (const dnnl::error&) {
  }
  return std::nullopt;
}

// the product x·w -> y of f32 operands seen through any strides (of an order a format tag names),
// every dim taken at run time; none where oneDNN has none (a binary post-op: it adds none to a
// run-time shape). Its arguments are bound through x, w and y.
std::optional<dnnl::matmul::primitive_desc> Partition::Impl::matmul_for_any_size(
    const memory::desc& x, const memory::desc& w, const memory::desc& y, const dnnl::primitive_attr& attr) {
  if (!any_size || x.get_data_type() != dt::f32 || w.get_data_type() != dt::f32 || y.get_data_type() != dt::f32 ||
      !strided(x) || !strided(w) || !strided(y))
    return std::nullopt;
  const memory::desc xt = in_order_at_run_time(x), wt = in_order_at_run_time(w), yt = in_order_at_run_time(y);
  if (xt.is_zero() || wt.is_zero() || yt.is_zero()) return std::nullopt;
  try {
    dnnl::matmul::primitive_desc pd(eng, xt, wt, yt, attr);
    if (!is_reference(pd)) return pd;
  } catch (const dnnl::error&) {
  }
  return std::nullopt;
}

// the reorder from -> to of 4-byte values, both strided (no blocks), as the runtime's own
// gather: oneDNN's reorder is code made for one shape (~0.05-0.1 ms of JIT at each new size)
bool Partition::Impl::gather_for_any_size(int src, const memory::desc& from, int dst, const memory::desc& to) {
  if (!any_size || from.get_data_type() != to.get_data_type() || memory::data_type_size(from.get_data_type()) != 4 ||
      !strided(from) || !strided(to) || from.get_submemory_offset() || to.get_submemory_offset())
    return false;
  // a the axis src holds innermost, b the one dst does: rows along a where they are one axis;
  // else tiles of 16 x 16 over a and b, each read and written within a few cache lines (one
  // value at a time along either axis wrote or read a line per value: 0.5 ms for a [16, 4, 2100]
  // transposed); each row's or tile's start found from its index over the other axes
  const Dims dims = from.get_dims(), fs = from.get_strides(), ts = to.get_strides();
  const int a = int(std::min_element(fs.begin(), fs.end()) - fs.begin()),
            b = int(std::min_element(ts.begin(), ts.end()) - ts.begin());
  Dims outer, outer_fs, outer_ts;
  for (int x = 0; x < int(dims.size()); ++x)
    if (x != a && x != b) outer.push_back(dims[x]), outer_fs.push_back(fs[x]), outer_ts.push_back(ts[x]);
  constexpr int64_t B = 16;
  const bool rows = a == b;
  const int64_t na = dims[a], nb = rows ? 1 : dims[b], fa = fs[a], ta = ts[a], fb = fs[b], tb = ts[b],
                blocks = rows ? 1 : (na + B - 1) / B, tasks = product(outer, 0, outer.size()) * blocks;
  Exec own{dnnl::primitive(), {view(DNNL_ARG_FROM, src, from), view(DNNL_ARG_TO, dst, to)}, {}, node, step};
  own.own = [=](Exec& e) {
    const uint32_t* x = static_cast<const uint32_t*>(e.bound[DNNL_ARG_FROM].get_data_handle());
    uint32_t* y = static_cast<uint32_t*>(e.bound[DNNL_ARG_TO].get_data_handle());
#pragma omp parallel for schedule(static) if (na * nb * tasks / blocks >= PARALLEL_FROM)
    for (int64_t task = 0; task < tasks; ++task) {
      int64_t rest = task / blocks, f = 0, t = 0;
      for (size_t d = outer.size(); d-- > 0;) {
        const int64_t c = rest % outer[d];
        rest /= outer[d];
        f += c * outer_fs[d];
        t += c * outer_ts[d];
      }
      if (rows) {
        if (fa == 1 && ta == 1) std::memcpy(y + t, x + f, size_t(na) * 4);
        else
          for (int64_t i = 0; i < na; ++i) y[t + i * ta] = x[f + i * fa];
        continue;
      }
      const int64_t i0 = task % blocks * B, i1 = std::min(i0 + B, na);
      for (int64_t j0 = 0; j0 < nb; j0 += B)
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < std::min(j0 + B, nb); ++j) y[t + i * ta + j * tb] = x[f + i * fa + j * fb];
    }
  };
  own.kernel = "runtime gather";
  execs.push_back(std::move(own));
  return true;
}

// softmax(q·kᵀ·scale + mask)·v with both products taken at run time, q, k and v read through
// their strides, the mask added by the softmax's own loop (attention.cpp is the step for one
// size: it picks brgemm kernels, pads keys for AMX, adds a mask the loop cannot in a product).
// False, adding nothing, where a piece has no such form.
bool Partition::Impl::attention_for_any_size(int dst, int q, int k, int v, int mask, float scale) {
  if (!any_size || compute != dt::f32) return false;
  const Dims& qs = val(q).shape;
  const Dims& ks = val(k).shape;
  Dims scores = qs;
  scores.back() = ks[ks.size() - 2];
  const int last = int(scores.size()) - 1;
  Dims mask_dims;
  if (mask >= 0) {
    const Dims& ms = val(mask).shape;
    mask_dims.assign(scores.size() - ms.size(), 1);
    mask_dims.insert(mask_dims.end(), ms.begin(), ms.end());
    if (mask_dims.back() != scores.back() || !own_softmax(plain(scores), plain(scores), last)) return false;
  }
  std::vector<int> perm(ks.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  dnnl::primitive_attr scaled;
  scaled.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  po.append_eltwise(dnnl::algorithm::eltwise_linear, scale, 0.f);
  scaled.set_post_ops(po);
  const memory::desc q_md = md_of(q), k_md = md_of(k).permute_axes(perm), v_md = md_of(v), out = dense_result(dst);
  const auto qk = matmul_for_any_size(q_md, k_md, plain(scores), scaled);
  const auto pv = qk ? matmul_for_any_size(plain(scores), v_md, out, attr({})) : std::nullopt;
  if (!pv) return false;
  const int mv = mask >= 0 ? ensure(mask, plain(val(mask).shape)) : -1;
  const int s = temp(plain(scores));
  add(*qk, dnnl::matmul(*qk), {view(DNNL_ARG_SRC, q, q_md), view(DNNL_ARG_WEIGHTS, k, k_md), use(DNNL_ARG_DST, s)});
  const int p = temp(plain(scores));
  softmax(s, plain(scores), p, plain(scores), last, false, mv, mask_dims, scores.back());
  const int y = produce(dst, out);
  add(*pv, dnnl::matmul(*pv), {use(DNNL_ARG_SRC, p), view(DNNL_ARG_WEIGHTS, v, v_md), view(DNNL_ARG_DST, y, out)});
  decide("q·kᵀ and p·v taken at run time, q, k and v read through their strides: a first call at these sizes");
  finish(dst, y);
  return true;
}

// act(conv(src, w) + b), 2-D, ungrouped and undilated, w a constant, f32, as products of w seen
// as [kh·kw·c, o]: a 1x1 convolution of stride 1 without padding is the product of the image's
// pixels (its rows taken at run time); any other, of its patches' rows (im2col.h, channels-last)
// in tiles of a fixed number of rows, each tile's patches in its thread's L2, by a product made
// for one tile: code made once for every size, the weight laid out once for it (a product of
// every row at once wrote and read all patches through memory, and oneDNN's run-time-rows
// product repacks the weight on every call: each twice a convolution's time). False, adding
// nothing, where the step does not qualify.
bool Partition::Impl::conv_for_any_size(int dst, int src, int w, int b, const Dims& strides,
                                        const Dims& pad_begin, const Dims& pad_end, const Acts& acts) {
  const Dims& in = val(src).shape;
  const Dims& out = val(dst).shape;
  const Dims& ws = val(w).shape;   // [o, c, kh, kw]
  if (!any_size || compute != dt::f32 || result_type(dst) != dt::f32 || in.size() != 4 ||
      val(w).kind != Kind::Constant)
    return false;
  const bool pixels = ws[2] == 1 && ws[3] == 1 && strides[0] == 1 && strides[1] == 1 && pad_begin[0] == 0 &&
                      pad_begin[1] == 0 && pad_end[0] == 0 && pad_end[1] == 0;
  const Patches p{in[0], in[1], in[2], in[3], out[2], out[3], ws[2], ws[3], strides[0], strides[1],
                  pad_begin[0], pad_begin[1]};
  const int64_t rows = p.batch * p.out_h * p.out_w, k = p.kh * p.kw * p.channels, o = out[1];
  const int64_t tile = std::clamp<int64_t>(PATCH_TILE_BYTES / (k * 4), 16, 512);
  std::optional<dnnl::matmul::primitive_desc> pd;
  if (pixels) {
    pd = product_for_any_rows(plain({rows, k}), plain({k, o}), b >= 0, plain({rows, o}), acts);
  } else {
    try {
      pd.emplace(eng, plain({tile, k}), any({k, o}), b >= 0 ? plain({1, o}) : memory::desc(), plain({tile, o}),
                 attr(acts));
      if (is_reference(*pd)) pd.reset();
    } catch (const dnnl::error&) {
    }
  }
  if (!pd) return false;
  // the weight's bytes as ONNX holds them, seen as [kh, kw, c, o], laid out plain ([k, o]), and
  // from there as the product takes them
  const memory::desc held({p.kh, p.kw, p.channels, o}, dt::f32, Dims{p.kw, 1, p.kh * p.kw, k});
  const memory laid = constant_as(w, held, plain({p.kh, p.kw, p.channels, o}));
  auto weight_as = [&] { return reordered(memory(plain({k, o}), eng, laid.get_data_handle()), pd->weights_desc()); };
  const memory weight = pd->weights_desc() == plain({k, o}) ? memory(plain({k, o}), eng, laid.get_data_handle())
                        : shared                            ? shared->as(val(w).slot, pd->weights_desc(), weight_as)
                                                            : weight_as();
  const int x = ensure(src, channels_last(in, dt::f32));
  const int y = produce(dst, channels_last(out, dt::f32));
  std::vector<Arg> args{use(DNNL_ARG_SRC, x), owned(DNNL_ARG_WEIGHTS, weight), use(DNNL_ARG_DST, y)};
  if (b >= 0) args.push_back(owned(DNNL_ARG_BIAS, constant_as(b, plain({1, o}))));
  if (pixels) {   // the image's pixels are the rows
    args[0] = view(DNNL_ARG_SRC, x, plain({rows, k}));
    args[2] = view(DNNL_ARG_DST, y, plain({rows, o}));
    add(*pd, dnnl::matmul(*pd), std::move(args), acts);
    decide("a product over the pixels, its rows taken at run time: a first call at these sizes");
    finish(dst, y);
    return true;
  }
  // per thread, a tile of patches, a tile of results (the last tile's, of fewer rows, copied out)
  // and the product's scratchpad, 64-byte aligned
  const int threads = omp_get_max_threads();
  const int64_t tiles = (rows + tile - 1) / tile, last = rows - (tiles - 1) * tile,
                pad = int64_t(align_up(pd->scratchpad_desc().get_size())) / 4,
                per_thread = int64_t(align_up(size_t(tile * (k + o)) * 4)) / 4 + pad;
  args.push_back(use(DNNL_ARG_WORKSPACE, temp(plain({threads, per_thread}))));
  struct Tiles {
    dnnl::engine eng;
    dnnl::matmul product;
    memory::desc patches, results, scratchpad;
    std::vector<dnnl::stream> streams;   // per thread
  };
  auto t = std::make_shared<Tiles>(
      Tiles{eng, dnnl::matmul(*pd), plain({tile, k}), plain({tile, o}), pd->scratchpad_desc(), {}});
  for (int i = 0; i < threads; ++i) t->streams.emplace_back(eng);
  Exec e{dnnl::primitive(), std::move(args), {}, node, step};
  e.own = [t, p, tile, tiles, last, k, o, per_thread, pad](Exec& self) {
    const float* image = static_cast<const float*>(self.bound[DNNL_ARG_SRC].get_data_handle());
    float* buffer = static_cast<float*>(self.bound[DNNL_ARG_WORKSPACE].get_data_handle());
    float* result = static_cast<float*>(self.bound[DNNL_ARG_DST].get_data_handle());
    const auto bias = self.bound.find(DNNL_ARG_BIAS);
    std::string error;
#pragma omp parallel num_threads(std::min<int>(omp_get_max_threads(), int(t->streams.size())))
    {
      const int id = omp_get_thread_num();
      float* patches = buffer + int64_t(id) * per_thread;
      float* results = patches + tile * k;
      // this thread's arguments, made once a call; each tile moves the result's to its rows
      std::unordered_map<int, memory> at{{DNNL_ARG_SRC, memory(t->patches, t->eng, patches)},
                                         {DNNL_ARG_WEIGHTS, self.bound.at(DNNL_ARG_WEIGHTS)},
                                         {DNNL_ARG_DST, memory(t->results, t->eng, results)},
                                         {DNNL_ARG_SCRATCHPAD, memory(t->scratchpad, t->eng, patches + per_thread - pad)}};
      if (bias != self.bound.end()) at[DNNL_ARG_BIAS] = bias->second;
      memory& written = at.at(DNNL_ARG_DST);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < tiles; ++i) {
        const bool whole = i + 1 < tiles || last == tile;
        im2col(image, patches, p, i * tile, whole ? tile : last);
        float* to = result + i * tile * o;
        written.set_data_handle(whole ? to : results);
        try {
          t->product.execute(t->streams[id], at);   // inside a parallel region: on this thread
        } catch (const std::exception& err) {      // not out of the parallel region
#pragma omp critical
          error = err.what();
          continue;
        }
        if (!whole) std::memcpy(to, results, size_t(last * o) * sizeof(float));
      }
    }
    if (!error.empty()) throw std::runtime_error(error);
  };
  e.kernel = std::string("runtime im2col + ") + pd->impl_info_str() + " in tiles of " + std::to_string(tile) + " pixels";
  execs.push_back(std::move(e));
  if (Alg gate = gate_after(acts); gate != Alg::None) gate_over_dst(gate);
  decide("im2col and a product in tiles of " + std::to_string(tile) +
         " pixels, made once for every size: a first call at these sizes");
  finish(dst, y);
  return true;
}

}  // namespace af
