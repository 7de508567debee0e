// MoE sublayer of DeepSeek V4 (spec §6.8): sqrt(softplus) router, hash-routed early layers,
// selection-only bias, clamped SwiGLU with the routing weight applied before the down
// projection, and the shared expert. Routing and the routed experts are backend ops
// (moe_route, moe_experts), so a device backend never brings expert ids back to the host
// (except when the experts stream: model/common/streamed_experts.h).

#include "model/common/streamed_experts.h"
#include "model/deepseek4/forward.h"
#include "stream/provider.h"
#include "stream/synthetic_routing.h"

namespace ds4::model::deepseek4 {

void Forward::ffn_layer(int64_t il, const FBuf& X, FBuf& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, K = hp_.n_expert_used;
  const float limit = hp_.swiglu_limit[static_cast<size_t>(il)];

  HcMix mix = hc_pre(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, X, L.ffn_norm);
  const FBuf& f = mix.x_in;  // normalized by ffn_norm

  // The shared expert first, right after the norm that produced f: it does not depend on the
  // routing, and a backend that keeps the norm's quantized copy of f for the next products
  // (CUDA's DS4_CUDA_FUSE_QUANT) can use it before the routing ops intervene. It is a branch
  // (backend.h): a device backend runs it beside the router and the routed experts, and joins
  // it before the sum. Its buffers live until then (ys to the end; gs/us/hs are only its own).
  FBuf ys;
  if (L.has_shared) {
    const int64_t sff = L.gate_sh.n_out;
    be_.branch_begin();
    FBuf gs = buf(n_ * sff), us = buf(n_ * sff), hs = buf(n_ * sff);
    const compute::Matrix* sw[] = {&L.gate_sh, &L.up_sh};
    float* sy[] = {gs.data(), us.data()};
    be_.matmul_many(sw, f.data(), n_, sy);
    be_.swiglu(gs.data(), us.data(), n_, sff, limit, nullptr, hs.data());
    ys = project(L.down_sh, hs, n_);
    be_.branch_end();
  }

  FBuf logits = buf(n_ * L.router.n_out);
  compute::Buffer<int32_t> experts(be_, static_cast<size_t>(n_ * K));
  FBuf weights = buf(n_ * K);
  compute::RouteParams rp{hp_.experts_in(il), K, L.router_bias, L.tid2eid, hp_.expert_weights_norm,
                          hp_.expert_weights_scale};
  if (bench_dev_ && !L.tid2eid) rp.forced = bench_dev_ + il * n_ * K;
  be_.moe_router(L.router, f.data(), n_, tok_dev_, rp, logits.data(), experts.data(), weights.data());

  FBuf y = buf(n_ * d);
  if (stream::ExpertProvider* xp = m_.options().experts) {
    if (il == 0) xp->begin_tokens(tokens_);
    std::vector<int32_t> guess;  // router lookahead: layer il+1's router on this layer's input
    const bool lookahead = n_ == 1 && il + 1 < hp_.n_layer && !hp_.is_hash_layer(il + 1) && xp->wants_lookahead();
    if (lookahead && m_.options().bench_routing) {
      // The next layer's real router would guess the real top k, which benchmark routing
      // replaced: guess from the same source instead (right with the source's guess_recall).
      guess = m_.options().bench_routing->guess(p0_, il + 1, K);
    } else if (lookahead) {
      const LayerWeights& N = w_.layers[static_cast<size_t>(il + 1)];
      FBuf nl = project(N.router, f, 1), gw = buf(K);
      compute::Buffer<int32_t> g(be_, static_cast<size_t>(K));
      compute::RouteParams np{hp_.experts_in(il + 1), K, N.router_bias, N.tid2eid, hp_.expert_weights_norm,
                              hp_.expert_weights_scale};
      be_.moe_route(nl.data(), tok_dev_, 1, np, g.data(), gw.data());
      guess = g.to_host();
    }
    streamed_moe_experts(be_, *xp, il, d, K, n_, limit, f, experts, weights, guess, y,
                         m_.options().expert_host_backend);
  } else {
    be_.moe_experts(L.gate_exps, L.up_exps, L.down_exps, f.data(), experts.data(), weights.data(), n_, K, limit,
                    y.data());
  }

  be_.join();
  if (L.has_shared)
    be_.hc_post_add(y.data(), ys.data(), X.data(), mix.post.data(), mix.comb.data(), n_, hp_.n_hc, d, Xout.data());
  else
    hc_post(mix, y, X, Xout);
}

}  // namespace ds4::model::deepseek4
