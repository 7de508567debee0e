// MoE sublayer of DeepSeek V4 (spec §6.8): sqrt(softplus) router, hash-routed early layers,
// selection-only bias, clamped SwiGLU with the routing weight applied before the down
// projection, and the shared expert. Routing and the routed experts are backend ops
// (moe_route, moe_experts), so a device backend never brings expert ids back to the host.
#include "model/deepseek4/forward.h"

namespace ds4::model::deepseek4 {

void Forward::ffn_layer(int64_t il, const FBuf& X, FBuf& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, K = hp_.n_expert_used;
  const float limit = hp_.swiglu_limit[static_cast<size_t>(il)];

  HcMix mix = hc_pre(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, X);
  FBuf f = buf(n_ * d);
  be_.rms_norm(mix.x_in.data(), L.ffn_norm, d, n_, hp_.rms_eps, f.data());

  FBuf logits = project(L.router, f, n_);
  compute::Buffer<int32_t> experts(be_, static_cast<size_t>(n_ * K));
  FBuf weights = buf(n_ * K);
  compute::RouteParams rp{hp_.n_expert, K, L.router_bias, L.tid2eid, hp_.expert_weights_norm,
                          hp_.expert_weights_scale};
  be_.moe_route(logits.data(), tokens_dev_.data(), n_, rp, experts.data(), weights.data());

  FBuf y = buf(n_ * d);
  be_.moe_experts(L.gate_exps, L.up_exps, L.down_exps, f.data(), experts.data(), weights.data(), n_, K, limit,
                  y.data());

  if (L.has_shared) {
    const int64_t sff = L.gate_sh.n_out;
    FBuf gs = project(L.gate_sh, f, n_), us = project(L.up_sh, f, n_), hs = buf(n_ * sff);
    be_.swiglu(gs.data(), us.data(), n_, sff, limit, nullptr, hs.data());
    FBuf ys = project(L.down_sh, hs, n_);
    be_.add(y.data(), ys.data(), n_ * d);
  }
  hc_post(mix, y, X, Xout);
}

}  // namespace ds4::model::deepseek4
