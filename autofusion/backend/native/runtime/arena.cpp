// The arena and the run: finalize() places the intermediates and binds every argument; run()
// binds the caller's buffers and executes the steps in order.
#include "partition.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace af {

// x·0 is 0 for a finite x and NaN for NaN and ±inf: one vectorised pass, no branch; a large
// array split over the OpenMP team (the scan reads memory a model's run left cold)
bool all_finite(const float* p, int64_t n) {
  float zero = 0.f;
#pragma omp parallel for simd reduction(+ : zero) schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) zero += p[i] * 0.f;
  return zero == 0.f;
}

void Partition::Impl::finalize() {
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
  if (context) {   // the context's one arena, grown to this build's size where it is smaller
    arena = context->grown_to(arena_size);
    arena_moves = context->moves;
  } else {
    arena_storage.reset(new char[arena_size + 64]);
    arena = reinterpret_cast<char*>(align_up(reinterpret_cast<size_t>(arena_storage.get())));
  }
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
      if (rv.kind == Kind::Internal) in_arena.emplace_back(m, rv.offset + at);
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

void Partition::Impl::run(void* const* inputs, void* const* outputs) {
  if (context && arena_moves != context->moves) {   // a larger build moved the context's arena
    arena = context->at;
    arena_moves = context->moves;
    for (auto& [m, at] : in_arena) m.set_data_handle(arena + at);
  }
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

void Partition::Impl::execute(Exec& e, std::vector<const float*>& in, std::vector<float*>& out) {
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
void Partition::Impl::run_gate(Exec& e, const In* x, Out* y) {
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

void Partition::Impl::run_primitive(Exec& e) {
  try {
    e.prim.execute(strm, e.bound);
  } catch (const dnnl::error& err) {
    fail(err.what());
  }
}

void Partition::Impl::profile(bool on) {
  profiling = on;
  if (on) step_ns.assign(step + 1, 0.0);   // one count per node() call, from zero
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
  std::string out;   // a line a step: what runs it, then its choices, tab-separated
  for (size_t i = 0; i < steps.size(); ++i) {
    out += steps[i];
    if (i < impl_->choices.size())
      for (const std::string& c : impl_->choices[i]) out += "\t" + c;
    out += "\n";
  }
  return out;
}

std::string Partition::current_node() const { return impl_->node; }

}  // namespace af
