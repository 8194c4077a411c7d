// Steps built for any size: what a partition's first calls at new sizes run, so that setting it
// up for them generates no code. oneDNN's convolutions and its brgemm products are code made for
// one shape (a new width of a text line: ~0.5 ms of JIT per convolution, ~7 ms for a small
// recognizer); its gemm product takes its rows at run time, so one primitive serves every size
// and, made once, comes from oneDNN's primitive cache after. A convolution becomes that product
// over the image's patches laid out as rows (im2col.h). library.py decides when a build is made
// for any size and when for its own sizes.
#include "partition.h"

#include "im2col.h"

#include <algorithm>
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

}  // namespace

// md with every dim but its last one taken at run time; a zero desc where md is not dense
// row-major f32 (run-time dims are those of a plain layout)
memory::desc rows_at_run_time(const memory::desc& md) {
  if (md.get_data_type() != dt::f32 || md != plain(md.get_dims(), dt::f32)) return {};
  Dims dims = md.get_dims();
  for (size_t i = 0; i + 1 < dims.size(); ++i) dims[i] = DNNL_RUNTIME_DIM_VAL;
  return row_major_tag(dims);
}

// the product act(x·w + b) of f32 x [rows, k] and w [k, n] into y [rows, n], its rows taken at run
// time; none where oneDNN has no such product for these (the step then makes one for its sizes)
// (sum: y's own values added first, as a sum post-op)
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

// the product `made` (made for these sizes, f32, its operands through any strides) as one whose
// every dim and stride is taken at run time; none where oneDNN has none (a binary post-op: it
// adds none to a run-time shape). Its arguments are bound as `made` sees them.
std::optional<dnnl::matmul::primitive_desc> Partition::Impl::matmul_for_any_size(
    const dnnl::matmul::primitive_desc& made, const dnnl::primitive_attr& attr) {
  const memory::desc x = made.src_desc(), w = made.weights_desc(), y = made.dst_desc();
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
  // rows along one axis: the one dst or src holds innermost, the longer (NCHW -> NHWC of 3
  // channels: rows of a width, not of 3 values); each row's start found from its index
  const Dims dims = from.get_dims(), fs = from.get_strides(), ts = to.get_strides();
  const int to_inner = int(std::min_element(ts.begin(), ts.end()) - ts.begin()),
            from_inner = int(std::min_element(fs.begin(), fs.end()) - fs.begin()),
            inner = dims[from_inner] > dims[to_inner] ? from_inner : to_inner;
  Dims outer, outer_fs, outer_ts;
  for (size_t a = 0; a < dims.size(); ++a)
    if (int(a) != inner) outer.push_back(dims[a]), outer_fs.push_back(fs[a]), outer_ts.push_back(ts[a]);
  const int64_t len = dims[inner], f_step = fs[inner], t_step = ts[inner], rows = product(outer, 0, outer.size());
  Exec own{dnnl::primitive(), {view(DNNL_ARG_FROM, src, from), view(DNNL_ARG_TO, dst, to)}, {}, node, step};
  own.own = [outer, outer_fs, outer_ts, rows, len, f_step, t_step](Exec& e) {
    const uint32_t* x = static_cast<const uint32_t*>(e.bound[DNNL_ARG_FROM].get_data_handle());
    uint32_t* y = static_cast<uint32_t*>(e.bound[DNNL_ARG_TO].get_data_handle());
#pragma omp parallel for schedule(static) if (rows * len >= PARALLEL_FROM)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rest = r, f = 0, t = 0;
      for (size_t a = outer.size(); a-- > 0;) {
        const int64_t c = rest % outer[a];
        rest /= outer[a];
        f += c * outer_fs[a];
        t += c * outer_ts[a];
      }
      const uint32_t* in = x + f;
      uint32_t* out = y + t;
      if (f_step == 1 && t_step == 1) std::memcpy(out, in, size_t(len) * 4);
      else
        for (int64_t i = 0; i < len; ++i) out[i * t_step] = in[i * f_step];
    }
  };
  own.kernel = "runtime gather";
  execs.push_back(std::move(own));
  return true;
}

// act(conv(src, w) + b), 2-D, ungrouped and undilated, w a constant, f32: the product of the
// patches' rows (im2col, channels-last) and w seen as [kh·kw·c, o]; a 1x1 convolution of stride 1
// without padding is the product of the pixels themselves. False, adding nothing, where the
// step does not qualify.
bool Partition::Impl::conv_for_any_size(int dst, int src, int w, int b, const Dims& strides,
                                        const Dims& pad_begin, const Dims& pad_end, const Acts& acts) {
  const Dims& in = val(src).shape;
  const Dims& out = val(dst).shape;
  const Dims& ws = val(w).shape;   // [o, c, kh, kw]
  if (!any_size || compute != dt::f32 || result_type(dst) != dt::f32 || in.size() != 4 ||
      val(w).kind != Kind::Constant)
    return false;
  const Patches p{in[0], in[1], in[2], in[3], out[2], out[3], ws[2], ws[3], strides[0], strides[1],
                  pad_begin[0], pad_begin[1]};
  const int64_t rows = p.batch * p.out_h * p.out_w, k = p.kh * p.kw * p.channels, o = out[1];
  const auto pd = product_for_any_rows(plain({rows, k}), plain({k, o}), b >= 0, plain({rows, o}), acts);
  if (!pd) return false;
  // the weight's bytes as ONNX holds them, seen as [kh, kw, c, o], laid out plain: [k, o]
  const memory::desc held({p.kh, p.kw, p.channels, o}, dt::f32,
                          Dims{p.kw, 1, p.kh * p.kw, p.channels * p.kh * p.kw});
  const memory laid = constant_as(w, held, plain({p.kh, p.kw, p.channels, o}));
  const memory weight(plain({k, o}), eng, laid.get_data_handle());
  const bool pixels = p.kh == 1 && p.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
                      p.pad_w == 0 && pad_end[0] == 0 && pad_end[1] == 0;
  const int x = ensure(src, channels_last(in, dt::f32));
  const int y = produce(dst, channels_last(out, dt::f32));
  int rows_of = x;
  if (!pixels) {
    rows_of = temp(plain({rows, k}));
    Exec e{dnnl::primitive(), {use(DNNL_ARG_SRC, x), use(DNNL_ARG_DST, rows_of)}, {}, node, step};
    e.own = [p](Exec& self) {
      im2col(static_cast<const float*>(self.bound[DNNL_ARG_SRC].get_data_handle()),
             static_cast<float*>(self.bound[DNNL_ARG_DST].get_data_handle()), p);
    };
    e.kernel = "runtime im2col";
    execs.push_back(std::move(e));
  }
  std::vector<Arg> args{view(DNNL_ARG_SRC, rows_of, plain({rows, k})), owned(DNNL_ARG_WEIGHTS, weight),
                        view(DNNL_ARG_DST, y, plain({rows, o}))};
  if (b >= 0) args.push_back(owned(DNNL_ARG_BIAS, constant_as(b, plain({1, o}))));
  add(*pd, dnnl::matmul(*pd), std::move(args), acts);
  decide(pixels ? "a product over the pixels, its rows taken at run time: a first call at these sizes"
                : "im2col and a product, its rows taken at run time: a first call at these sizes");
  finish(dst, y);
  return true;
}

}  // namespace af
