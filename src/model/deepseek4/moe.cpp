// MoE sublayer of DeepSeek V4 (spec §6.8): sqrt(softplus) router, hash-routed early layers,
// selection-only bias, clamped SwiGLU with the routing weight applied before the down
// projection, and the shared expert. Routing and the routed experts are backend ops
// (moe_route, moe_experts), so a device backend never brings expert ids back to the host.
#include <cstring>
#include <utility>

#include "model/deepseek4/forward.h"
#include "stream/provider.h"

namespace ds4::model::deepseek4 {

namespace {

compute::ExpertSet one_expert(const stream::WeightView& v) {
  compute::ExpertSet s;
  s.first = {v.type, v.data, v.n_in, v.n_out, v.row_stride};
  s.n_expert = 1;
  s.expert_stride = v.row_stride * static_cast<size_t>(v.n_out);
  return s;
}

// Routed experts from the streaming provider (src/stream): the same moe_experts op, run per
// expert as each arrives (cached ones first) on the tokens routed to it, then each token's
// outputs summed in slot order as moe_experts does, so the result is bit-identical.
void streamed_experts(compute::Backend& be, stream::ExpertProvider& xp, int64_t il, int64_t d, int64_t K, int64_t n,
                      float limit, const compute::Buffer<float>& f, const compute::Buffer<int32_t>& experts,
                      const compute::Buffer<float>& weights, const std::vector<int32_t>& guess,
                      compute::Buffer<float>& y) {
  const std::vector<int32_t> ids = experts.to_host();
  const std::vector<float> w = weights.to_host(), x = f.to_host();
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(xp.layout().n_expert));
  for (int64_t s = 0; s < n * K; ++s) by_expert[static_cast<size_t>(ids[static_cast<size_t>(s)])].push_back(s);
  std::vector<float> slot_out(static_cast<size_t>(n * K * d), 0.0f), xg, wg, yh;
  stream::ExpertLease lease = xp.acquire(il, ids, K);
  if (!guess.empty()) xp.hint(il + 1, guess);  // after acquire: this layer's experts are pinned
  while (const auto* e = lease.next()) {
    const auto& slots = by_expert[static_cast<size_t>(e->id)];
    const int64_t m = static_cast<int64_t>(slots.size());
    xg.resize(static_cast<size_t>(m * d));
    wg.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(xg.data() + i * d, x.data() + (slots[i] / K) * d, static_cast<size_t>(d) * sizeof(float));
      wg[static_cast<size_t>(i)] = w[static_cast<size_t>(slots[i])];
    }
    compute::Buffer<float> xb(be, xg.size()), wb(be, wg.size()), yb(be, xg.size());
    compute::Buffer<int32_t> zero(be, static_cast<size_t>(m));
    xb.from_host(xg);
    wb.from_host(wg);
    zero.from_host(std::vector<int32_t>(static_cast<size_t>(m), 0));
    be.moe_experts(one_expert(e->gate), one_expert(e->up), one_expert(e->down), xb.data(), zero.data(), wb.data(), m,
                   1, limit, yb.data());
    yh = yb.to_host();
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(slot_out.data() + slots[i] * d, yh.data() + i * d, static_cast<size_t>(d) * sizeof(float));
  }
  std::vector<float> yv(static_cast<size_t>(n * d), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const float* s = slot_out.data() + (t * K + k) * d;
      for (int64_t i = 0; i < d; ++i) yv[static_cast<size_t>(t * d + i)] += s[i];
    }
  y.from_host(yv);
}

}  // namespace

void Forward::ffn_layer(int64_t il, const FBuf& X, FBuf& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, K = hp_.n_expert_used;
  const float limit = hp_.swiglu_limit[static_cast<size_t>(il)];

  HcMix mix = hc_pre(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, X, L.ffn_norm);
  const FBuf& f = mix.x_in;  // normalized by ffn_norm

  // The shared expert first, right after the norm that produced f: it does not depend on the
  // routing, and a backend that keeps the norm's quantized copy of f for the next products
  // (CUDA's DS4_CUDA_FUSE_QUANT) can use it before the routing ops intervene. Added to the
  // routed experts' sum at the end, as before.
  FBuf ys;
  if (L.has_shared) {
    const int64_t sff = L.gate_sh.n_out;
    FBuf gs = buf(n_ * sff), us = buf(n_ * sff), hs = buf(n_ * sff);
    const compute::Matrix* sw[] = {&L.gate_sh, &L.up_sh};
    float* sy[] = {gs.data(), us.data()};
    be_.matmul_many(sw, f.data(), n_, sy);
    be_.swiglu(gs.data(), us.data(), n_, sff, limit, nullptr, hs.data());
    ys = project(L.down_sh, hs, n_);
  }

  FBuf logits = project(L.router, f, n_);
  compute::Buffer<int32_t> experts(be_, static_cast<size_t>(n_ * K));
  FBuf weights = buf(n_ * K);
  compute::RouteParams rp{hp_.experts_in(il), K, L.router_bias, L.tid2eid, hp_.expert_weights_norm,
                          hp_.expert_weights_scale};
  be_.moe_route(logits.data(), tok_dev_, n_, rp, experts.data(), weights.data());

  FBuf y = buf(n_ * d);
  if (stream::ExpertProvider* xp = m_.options().experts) {
    if (il == 0) xp->begin_tokens(tokens_);
    std::vector<int32_t> guess;  // router lookahead: layer il+1's router on this layer's input
    if (n_ == 1 && il + 1 < hp_.n_layer && !hp_.is_hash_layer(il + 1) && xp->wants_lookahead()) {
      const LayerWeights& N = w_.layers[static_cast<size_t>(il + 1)];
      FBuf nl = project(N.router, f, 1), gw = buf(K);
      compute::Buffer<int32_t> g(be_, static_cast<size_t>(K));
      compute::RouteParams np{hp_.experts_in(il + 1), K, N.router_bias, N.tid2eid, hp_.expert_weights_norm,
                              hp_.expert_weights_scale};
      be_.moe_route(nl.data(), tok_dev_, 1, np, g.data(), gw.data());
      guess = g.to_host();
    }
    streamed_experts(be_, *xp, il, d, K, n_, limit, f, experts, weights, guess, y);
  } else {
    be_.moe_experts(L.gate_exps, L.up_exps, L.down_exps, f.data(), experts.data(), weights.data(), n_, K, limit,
                    y.data());
  }

  if (L.has_shared) be_.add(y.data(), ys.data(), n_ * d);
  hc_post(std::move(mix), std::move(y), X, Xout);
}

}  // namespace ds4::model::deepseek4
