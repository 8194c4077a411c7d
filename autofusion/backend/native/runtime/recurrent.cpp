// ONNX's LSTM and GRU as oneDNN's recurrent primitives: one primitive over the op's directions,
// or, for a bidirectional one, one primitive per direction, both running at once.
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
  if (dirs != 2 || !directions_at_once(cell, out, h, c, x, w, r, b, h0, c0)) {
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

// A bidirectional recurrent op as two one-direction primitives run at once, each on a thread of
// its own (oneDNN run inside a parallel region runs on the calling thread), each writing its half
// of out [T, N, 2H] and its direction's [N, H] of h (and c) [2, N, H]. One primitive over both
// directions shares each time step between the threads and meets them at a barrier per step;
// the directions are independent. On two threads side by side was never slower (LSTMs measured
// here: [80, 1, 384] -> 2 x 96 267 µs against 444; [50, 1, 512] -> 2 x 512 2.95 ms against
// 3.46; [50, 16, 256] -> 2 x 256 4.0 against 4.3; [50, 8, 512] even); on more threads it leaves
// all but two idle, so there only where a time step is a small product (batch·G·H·H multiply-adds
// up to SMALL_TIME_STEP: not measured on more than two cores). False, adding nothing, where it
// does not apply.
bool Partition::Impl::directions_at_once(Cell cell, int out, int h, int c, int x, int w, int r, int b, int h0,
                                         int c0) {
  const Dims& xs = val(x).shape;   // [T, N, I]
  const Dims& bs = val(b).shape;   // [1, 2, G (4 for an lbr GRU), H]
  const int64_t steps = xs[0], batch = xs[1], input = xs[2], hidden = val(w).shape[4], g = gates(cell);
  const int threads = omp_get_max_threads();
  if (compute != dt::f32 || threads < 2 || (threads > 2 && batch * g * hidden * hidden > SMALL_TIME_STEP))
    return false;
  const memory::desc state = plain({1, 1, batch, hidden});
  // one direction's half of out: its rows 2H apart
  const memory::desc half({steps, batch, hidden}, dt::f32, Dims{batch * 2 * hidden, 2 * hidden, 1});
  std::vector<dnnl::rnn_primitive_desc_base> pds;
  try {
    for (auto direction : {dnnl::rnn_direction::unidirectional_left2right, dnnl::rnn_direction::unidirectional_right2left}) {
      pds.push_back(recurrent_pd(cell, eng, direction, plain(xs), h0 >= 0 ? state : memory::desc(),
                                 c0 >= 0 ? state : memory::desc(), any({1, 1, input, g, hidden}),
                                 any({1, 1, hidden, g, hidden}), plain({1, 1, bs[2], hidden}), half, state, attr({})));
      if (is_reference(pds.back())) return false;
    }
  } catch (const dnnl::error&) {
    return false;
  }
  struct Directions {
    dnnl::engine eng;
    std::vector<dnnl::primitive> primitives;
    std::vector<memory> weights, recurrent, bias;   // per direction, laid out as its primitive takes them
    std::vector<dnnl::stream> streams;
    memory::desc state, half, scratchpad;
  };
  auto d = std::make_shared<Directions>(Directions{eng, {}, {}, {}, {}, {}, state, half, {}});
  size_t pad = 0;
  for (int k = 0; k < 2; ++k) {
    const auto& pd = pds[k];
    d->primitives.emplace_back(pd);
    d->weights.push_back(constant_part_as(w, k, 2, pd.weights_layer_desc()));
    d->recurrent.push_back(constant_part_as(r, k, 2, pd.weights_iter_desc()));
    d->bias.push_back(constant_part_as(b, k, 2, pd.bias_desc()));
    d->streams.emplace_back(eng);
    pad = std::max(pad, align_up(pd.scratchpad_desc().get_size()));
  }
  d->scratchpad = memory::desc({int64_t(std::max<size_t>(pad, 1))}, dt::u8, tag::a);
  const Dims three{2, batch, hidden};
  std::vector<Arg> args{use(DNNL_ARG_SRC_LAYER, ensure(x, plain(xs))), use(DNNL_ARG_DST_LAYER, out),
                        use(DNNL_ARG_DST_ITER, h),
                        use(DNNL_ARG_WORKSPACE, temp(plain({2, int64_t(std::max<size_t>(pad, 4)) / 4})))};
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
#pragma omp parallel num_threads(2)
    for (int k = omp_get_thread_num(); k < 2; k += omp_get_num_threads()) {
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC_LAYER, self.bound.at(DNNL_ARG_SRC_LAYER)},
          {DNNL_ARG_WEIGHTS_LAYER, d->weights[k]},
          {DNNL_ARG_WEIGHTS_ITER, d->recurrent[k]},
          {DNNL_ARG_BIAS, d->bias[k]},
          {DNNL_ARG_DST_LAYER, memory(d->half, d->eng, at(DNNL_ARG_DST_LAYER, k * hidden))},
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
  e.kernel = "two directions at once: " + kernel_of(pds[0]);
  execs.push_back(std::move(e));
  decide("its two directions at once, one thread each: a time step is a small product");
  return true;
}

}  // namespace af
