// The attention step: softmax(q·kᵀ·scale + mask)·v.
#include "partition.h"

#include <numeric>

namespace af {

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
  if (m.attention_for_any_size(dst, q, k, v, mask, scale)) return;
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
  m.decide(found ? "q and k read through their strides (oneDNN's brgemm takes them)"
                 : "q and k copied dense: oneDNN has no brgemm kernel for them as they lie");
  if (padded)
    m.decide("keys padded " + std::to_string(keys) + " -> " + std::to_string(stored.back()) +
             ": oneDNN's AMX products run a tail of keys slowly");
  if (mv >= 0)
    m.decide(mask_in_softmax ? "mask added by the softmax's loop"
             : mask_apart    ? "mask added by a step of its own: no fast product adds it"
                             : "mask added by q·kᵀ (a post-op)");
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
  if (reordered) m.decide("p·v writes the heads merged back (the plan's axis order)");
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


}  // namespace af
