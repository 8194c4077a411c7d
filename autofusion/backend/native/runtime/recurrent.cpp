// ONNX's LSTM and GRU as oneDNN's recurrent primitives: one primitive over the op's directions,
// or one primitive per direction, each on a thread of its own (a bidirectional op's two at once;
// a one-direction GRU of tiny time steps on one thread).
#include "partition.h"

#include <omp.h>

namespace af {

namespace {

const char* const RNN_GEMM = "gemm rnn";   // oneDNN's recurrent primitive without brgemm

int gates(Cell cell) { return cell == Cell::Lstm ? 4 : 3; }

// the primitive of a cell; src_iter_c (an LSTM's cell state) ignored by a GRU, an LSTM's result cell
// state laid out as dst_iter
dnnl::rnn_primitive_desc_base recurrent_pd(Cell cell, const dnnl::engine& eng, dnnl::rnn_direction direction,
                                           const memory::desc& src_layer, const memory::desc& src_iter,
                                           const memory::desc& src_iter_c, const memory::desc& weights_layer,
                                           const memory::desc& weights_iter, const memory::desc& bias,
                                           const memory::desc& dst_layer, const memory::desc& dst_iter,
                                           const dnnl::primitive_attr& attr) {
  const auto inference = dnnl::prop_kind::forward_inference;
  switch (cell) {
    case Cell::Lstm:
      return dnnl::lstm_forward::primitive_desc(eng, inference, direction, src_layer, src_iter, src_iter_c,
                                                weights_layer, weights_iter, bias, dst_layer, dst_iter, dst_iter,
                                                attr);
    case Cell::Gru:
      return dnnl::gru_forward::primitive_desc(eng, inference, direction, src_layer, src_iter, weights_layer,
                                               weights_iter, bias, dst_layer, dst_iter, attr);
    case Cell::LbrGru:
      return dnnl::lbr_gru_forward::primitive_desc(eng, inference, direction, src_layer, src_iter, weights_layer,
                                                   weights_iter, bias, dst_layer, dst_iter, attr);
  }
  throw std::runtime_error("no such recurrent cell");
}

// what runs pd, as the plan says it: oneDNN's name, but for its recurrent primitive over gemm
// calls, which it names "ref" (is_reference)
std::string kernel_of(const dnnl::primitive_desc_base& pd) {
  const std::string name = pd.impl_info_str();
  return name == "ref" ? RNN_GEMM : name;
}

}  // namespace

void Partition::lstm(int y, int y_h, int y_c, int x, int w, int r, int b, int h0, int c0, int reverse) {
  impl_->recurrent(Cell::Lstm, y, y_h, y_c, x, w, r, b, h0, c0, reverse);
}

void Partition::gru(int y, int y_h, int x, int w, int r, int b, int h0, int reverse, bool linear_before_reset) {
  impl_->recurrent(linear_before_reset ? Cell::LbrGru : Cell::Gru, y, y_h, -1, x, w, r, b, h0, -1, reverse);
}

void Partition::Impl::recurrent(Cell cell, int y, int y_h, int y_c, int x, int w, int r, int b, int h0, int c0,
                                int reverse) {
  const Dims& xs = val(x).shape;   // [T, N, I]
  const Dims& ws = val(w).shape;   // [1, D, I, G, H]
  const int64_t steps = xs[0], batch = xs[1], dirs = ws[1], hidden = ws[4];
  const Dims three{dirs, batch, hidden};   // the states [D, N, H], oneDNN's [1, D, N, H]: the same bytes
  const memory::desc layer = plain({steps, batch, dirs * hidden});
  const int out = temp(layer);   // [T, N, D·H]: ONNX's Y [T, D, N, H] is a view of it
  const int h = produce(y_h, plain(three)), c = cell == Cell::Lstm ? produce(y_c, plain(three)) : -1;
  if (!one_thread_each(cell, dirs, reverse, out, h, c, x, w, r, b, h0, c0)) {
    const auto direction = dirs == 2 ? dnnl::rnn_direction::bidirectional_concat
                           : reverse ? dnnl::rnn_direction::unidirectional_right2left
                                     : dnnl::rnn_direction::unidirectional_left2right;
    const memory::desc state = plain({1, dirs, batch, hidden});
    const auto pd = recurrent_pd(cell, eng, direction, plain(xs), h0 >= 0 ? state : memory::desc(),
                                 c0 >= 0 ? state : memory::desc(), any(ws), any(val(r).shape),
                                 plain(val(b).shape), layer, state, attr({}));
    std::vector<Arg> args{use(DNNL_ARG_SRC_LAYER, ensure(x, plain(xs))),
                          owned(DNNL_ARG_WEIGHTS_LAYER, constant_as(w, pd.weights_layer_desc())),
                          owned(DNNL_ARG_WEIGHTS_ITER, constant_as(r, pd.weights_iter_desc())),
                          owned(DNNL_ARG_BIAS, constant_as(b, pd.bias_desc())), use(DNNL_ARG_DST_LAYER, out),
                          view(DNNL_ARG_DST_ITER, h, state)};
    if (h0 >= 0) args.push_back(view(DNNL_ARG_SRC_ITER, ensure(h0, plain(three)), state));
    if (c0 >= 0) args.push_back(view(DNNL_ARG_SRC_ITER_C, ensure(c0, plain(three)), state));
    if (c >= 0) args.push_back(view(DNNL_ARG_DST_ITER_C, c, state));
    add(pd, dnnl::primitive(pd), std::move(args));
    execs.back().kernel = kernel_of(pd);
  }
  finish(y_h, h);
  if (c >= 0) finish(y_c, c);
  const memory::desc seen(Dims{steps, dirs, batch, hidden}, dt::f32, Dims{batch * dirs * hidden, hidden, dirs * hidden, 1});
  if (val(y).kind != Kind::Output) return view_of(y, out, seen);
  const int written = produce(y, plain(val(y).shape));
  reorder(out, seen, written, plain(val(y).shape));
  finish(y, written);
}

// A recurrent op as one-direction primitives each run on a thread of its own (oneDNN run inside a
// parallel region runs on the calling thread), each writing its share of out [T, N, D·H] and its
// direction's [N, H] of h (and c) [D, N, H]:
// - a bidirectional op's two directions side by side. One primitive over both directions shares
//   each time step between the threads and meets them at a barrier per step; the directions are
//   independent. On two threads side by side was never slower (LSTMs measured here: [80, 1, 384]
//   -> 2 x 96 267 µs against 444; [50, 1, 512] -> 2 x 512 2.95 ms against 3.46; [50, 16, 256] ->
//   2 x 256 4.0 against 4.3; [50, 8, 512] even); on more threads it leaves all but two idle, so
//   there only where a time step is a small product (batch·G·H·H multiply-adds up to
//   SMALL_TIME_STEP: not measured on more than two cores);
// - a one-direction op over gemm (RNN_GEMM: a GRU) whose time step is tiny (up to TINY_TIME_STEP)
//   on one thread: sharing its steps cost more than it gave (GRU [80, 1, 192] -> 96 149 µs on one
//   thread against 206; [100, 1, 128] -> 128 220 against 259; but [50, 1, 512] -> 512 2.18 ms
//   against 1.43). oneDNN's brgemm LSTM gained from two threads at every size measured.
// False, adding nothing, where neither applies.
bool Partition::Impl::one_thread_each(Cell cell, int64_t dirs, bool reverse, int out, int h, int c, int x, int w,
                                      int r, int b, int h0, int c0) {
  const Dims& xs = val(x).shape;   // [T, N, I]
  const Dims& bs = val(b).shape;   // [1, D, G (4 for an lbr GRU), H]
  const int64_t steps = xs[0], batch = xs[1], input = xs[2], hidden = val(w).shape[4], g = gates(cell),
                step_size = batch * g * hidden * hidden;
  const int threads = omp_get_max_threads();
  if (compute != dt::f32 || threads < 2 || (dirs == 2 && threads > 2 && step_size > SMALL_TIME_STEP) ||
      (dirs == 1 && step_size > TINY_TIME_STEP))
    return false;
  const memory::desc state = plain({1, 1, batch, hidden});
  // one direction's share of out: its rows D·H apart
  const memory::desc share({steps, batch, hidden}, dt::f32, Dims{batch * dirs * hidden, dirs * hidden, 1});
  std::vector<dnnl::rnn_primitive_desc_base> pds;
  try {
    for (int k = 0; k < dirs; ++k) {
      const bool backward = dirs == 2 ? k == 1 : reverse;
      pds.push_back(recurrent_pd(cell, eng,
                                 backward ? dnnl::rnn_direction::unidirectional_right2left
                                          : dnnl::rnn_direction::unidirectional_left2right,
                                 plain(xs), h0 >= 0 ? state : memory::desc(), c0 >= 0 ? state : memory::desc(),
                                 any({1, 1, input, g, hidden}), any({1, 1, hidden, g, hidden}),
                                 plain({1, 1, bs[2], hidden}), share, state, attr({})));
    }
  } catch (const dnnl::error&) {
    return false;
  }
  if (dirs == 1 && kernel_of(pds[0]) != RNN_GEMM) return false;
  struct Directions {
    dnnl::engine eng;
    std::vector<dnnl::primitive> primitives;
    std::vector<memory> weights, recurrent, bias;   // per direction, laid out as its primitive takes them
    std::vector<dnnl::stream> streams;
    memory::desc state, share, scratchpad;
  };
  auto d = std::make_shared<Directions>(Directions{eng, {}, {}, {}, {}, {}, state, share, {}});
  size_t pad = 0;
  for (int k = 0; k < dirs; ++k) {
    const auto& pd = pds[k];
    d->primitives.emplace_back(pd);
    d->weights.push_back(constant_part_as(w, k, int(dirs), pd.weights_layer_desc()));
    d->recurrent.push_back(constant_part_as(r, k, int(dirs), pd.weights_iter_desc()));
    d->bias.push_back(constant_part_as(b, k, int(dirs), pd.bias_desc()));
    d->streams.emplace_back(eng);
    pad = std::max(pad, align_up(pd.scratchpad_desc().get_size()));
  }
  d->scratchpad = memory::desc({int64_t(std::max<size_t>(pad, 1))}, dt::u8, tag::a);
  const Dims three{dirs, batch, hidden};
  std::vector<Arg> args{use(DNNL_ARG_SRC_LAYER, ensure(x, plain(xs))), use(DNNL_ARG_DST_LAYER, out),
                        use(DNNL_ARG_DST_ITER, h),
                        use(DNNL_ARG_WORKSPACE, temp(plain({dirs, int64_t(std::max<size_t>(pad, 4)) / 4})))};
  if (c >= 0) args.push_back(use(DNNL_ARG_DST_ITER_C, c));
  if (h0 >= 0) args.push_back(use(DNNL_ARG_SRC_ITER, ensure(h0, plain(three))));
  if (c0 >= 0) args.push_back(use(DNNL_ARG_SRC_ITER_C, ensure(c0, plain(three))));
  Exec e{dnnl::primitive(), std::move(args), {}, node, step};
  const int64_t state_values = batch * hidden;
  e.own = [d, hidden, state_values, pad](Exec& self) {
    auto at = [&](int key, int64_t floats) {   // a bound buffer, `floats` into it
      return static_cast<float*>(self.bound.at(key).get_data_handle()) + floats;
    };
    std::string error;
    const int n = int(d->primitives.size());
#pragma omp parallel num_threads(2)   // two even for one primitive: oneDNN runs it on one thread only then
    for (int k = omp_get_thread_num(); k < n; k += omp_get_num_threads()) {
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC_LAYER, self.bound.at(DNNL_ARG_SRC_LAYER)},
          {DNNL_ARG_WEIGHTS_LAYER, d->weights[k]},
          {DNNL_ARG_WEIGHTS_ITER, d->recurrent[k]},
          {DNNL_ARG_BIAS, d->bias[k]},
          {DNNL_ARG_DST_LAYER, memory(d->share, d->eng, at(DNNL_ARG_DST_LAYER, k * hidden))},
          {DNNL_ARG_SCRATCHPAD, memory(d->scratchpad, d->eng, at(DNNL_ARG_WORKSPACE, k * int64_t(pad) / 4))}};
      for (int key : {DNNL_ARG_DST_ITER, DNNL_ARG_DST_ITER_C, DNNL_ARG_SRC_ITER, DNNL_ARG_SRC_ITER_C})
        if (self.bound.count(key)) args[key] = memory(d->state, d->eng, at(key, k * state_values));
      try {
        d->primitives[k].execute(d->streams[k], args);   // inside a parallel region: on this thread
      } catch (const std::exception& err) {                // not out of the parallel region
#pragma omp critical
        error = err.what();
      }
    }
    if (!error.empty()) throw std::runtime_error(error);
  };
  e.kernel = (dirs == 2 ? "two directions at once: " : "on one thread: ") + kernel_of(pds[0]);
  execs.push_back(std::move(e));
  decide(dirs == 2 ? "its two directions at once, one thread each: a time step is a small product"
                   : "on one thread: a time step is too small a product to share");
  return true;
}

}  // namespace af
