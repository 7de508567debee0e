// The qwen35moe forward pass over a batch, layer-major: projections batched, everything that
// touches state (convolution history, delta-rule state, KV cache) token by token inside the
// backend ops. Layer: x += mixer(rms(x)); x += moe(rms(x)); mixer = Gated DeltaNet or gated
// full attention by layer.
#include "model/qwen35moe/forward.h"

#include <cmath>

#include "core/error.h"
#include "model/common/streamed_experts.h"
#include "stream/provider.h"

namespace ds4::model::qwen35moe {

FBuf Forward::project(const compute::Matrix& w, const FBuf& x) {
  FBuf y = buf(n_ * w.n_out);
  be_.matmul(w, x.data(), n_, y.data());
  return y;
}

FBuf Forward::deltanet(int64_t il, const FBuf& xn) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t nv = hp_.ssm_n_v, dv = hp_.ssm_dv, cch = hp_.conv_channels();
  FBuf qkv = project(L.wqkv, xn);
  FBuf z = project(L.wgate, xn);
  FBuf b = project(L.w_beta, xn);
  FBuf a = project(L.w_alpha, xn);
  FBuf conv = buf(n_ * cch);
  be_.conv1d_silu(qkv.data(), n_, cch, hp_.conv_kernel, L.conv, S.conv.data(), conv.data());
  FBuf g = buf(n_ * nv), beta = buf(n_ * nv);
  be_.gdn_gates(a.data(), b.data(), L.dt_bias, L.ssm_a, n_, nv, g.data(), beta.data());
  FBuf o = buf(n_ * nv * dv);
  // l2 eps 1e-6: transformers' l2norm (rsqrt(sum x^2 + 1e-6)).
  be_.gated_delta_rule(conv.data(), g.data(), beta.data(), n_, hp_.ssm_n_k, nv, hp_.ssm_dk, dv, 1e-6f, S.ssm.data(),
                       o.data());
  // Gated RMSNorm per value head: rms(o) * w * silu(z).
  be_.rms_norm(o.data(), L.ssm_norm, dv, n_ * nv, hp_.rms_eps, o.data());
  FBuf h = buf(n_ * nv * dv);
  be_.swiglu(z.data(), o.data(), n_, nv * dv, 0.0f, nullptr, h.data());
  return project(L.ssm_out, h);
}

FBuf Forward::attention(int64_t il, const FBuf& xn) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t nh = hp_.n_head, nkv = hp_.n_head_kv, hd = hp_.head_dim;
  FBuf qg = project(L.wq, xn);  // n_ x nh x [query | gate]
  FBuf q = buf(n_ * nh * hd), gate = buf(n_ * nh * hd);
  be_.copy_rows(q.data(), hd, qg.data(), 2 * hd, n_ * nh, hd);
  be_.copy_rows(gate.data(), hd, qg.data() + hd, 2 * hd, n_ * nh, hd);
  be_.rms_norm(q.data(), L.q_norm, hd, n_ * nh, hp_.rms_eps, q.data());
  // K and V go straight into the cache rows of positions p0 .. p0+n-1.
  float* kc = S.k.data() + p0_ * nkv * hd;
  float* vc = S.v.data() + p0_ * nkv * hd;
  be_.matmul(L.wk, xn.data(), n_, kc);
  be_.matmul(L.wv, xn.data(), n_, vc);
  be_.rms_norm(kc, L.k_norm, hd, n_ * nkv, hp_.rms_eps, kc);
  be_.rope_neox(q.data(), n_, nh, hd, m_.freqs_, p0_);
  be_.rope_neox(kc, n_, nkv, hd, m_.freqs_, p0_);
  FBuf o = buf(n_ * nh * hd);
  be_.attention_causal(q.data(), n_, nh, nkv, hd, S.k.data(), S.v.data(), p0_,
                       1.0f / std::sqrt(static_cast<float>(hd)), o.data());
  be_.mul_sigmoid(o.data(), gate.data(), n_ * nh * hd);
  return project(L.wo, o);
}

FBuf Forward::moe(int64_t il, const FBuf& xn) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t k = hp_.n_expert_used;
  FBuf logits = project(L.router, xn);
  compute::Buffer<int32_t> experts(be_, static_cast<size_t>(n_ * k));
  FBuf weights = buf(n_ * k);
  be_.moe_route_softmax(logits.data(), n_, hp_.n_expert, k, true, experts.data(), weights.data());
  if (hp_.expert_weights_scale != 1.0f) {
    std::vector<float> wh = weights.to_host();
    for (float& v : wh) v *= hp_.expert_weights_scale;
    weights.from_host(wh);
  }
  FBuf y = buf(n_ * hp_.n_embd);
  if (stream::ExpertProvider* xp = m_.opt_.experts) {
    if (il == 0) xp->begin_tokens(tokens_);
    std::vector<int32_t> guess;  // router lookahead: layer il+1's router on this layer's input
    if (n_ == 1 && il + 1 < hp_.n_layer && xp->wants_lookahead()) {
      FBuf nl = project(w_.layers[static_cast<size_t>(il + 1)].router, xn), gw = buf(k);
      compute::Buffer<int32_t> g(be_, static_cast<size_t>(k));
      be_.moe_route_softmax(nl.data(), 1, hp_.n_expert, k, true, g.data(), gw.data());
      guess = g.to_host();
    }
    streamed_moe_experts(be_, *xp, il, hp_.n_embd, k, n_, 0.0f, xn, experts, weights, guess, y);
  } else {
    be_.moe_experts(L.gate_exps, L.up_exps, L.down_exps, xn.data(), experts.data(), weights.data(), n_, k, 0.0f,
                    y.data());
  }
  if (hp_.shared_ff > 0) {
    FBuf sg = project(L.shexp_gate, xn);  // n_ x 1
    be_.sigmoid(sg.data(), n_);
    FBuf g = project(L.gate_sh, xn), u = project(L.up_sh, xn);
    FBuf h = buf(n_ * hp_.shared_ff);
    be_.swiglu(g.data(), u.data(), n_, hp_.shared_ff, 0.0f, sg.data(), h.data());
    FBuf s = project(L.down_sh, h);
    be_.add(y.data(), s.data(), n_ * hp_.n_embd);
  }
  return y;
}

void Forward::run(float* logits_all, bool need_last_logits) {
  const int64_t d = hp_.n_embd, V = hp_.n_vocab;
  compute::Buffer<int32_t> tok(be_, static_cast<size_t>(n_));
  tok.from_host(tokens_);
  FBuf X = buf(n_ * d), xn = buf(n_ * d);
  be_.embed(w_.token_embd, tok.data(), n_, 1, X.data());
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
    be_.rms_norm(X.data(), L.attn_norm, d, n_, hp_.rms_eps, xn.data());
    FBuf mix = hp_.is_recurrent(il) ? deltanet(il, xn) : attention(il, xn);
    be_.add(X.data(), mix.data(), n_ * d);
    be_.rms_norm(X.data(), L.post_norm, d, n_, hp_.rms_eps, xn.data());
    FBuf f = moe(il, xn);
    be_.add(X.data(), f.data(), n_ * d);
  }
  const int64_t first = logits_all ? 0 : n_ - 1;
  if (logits_all || need_last_logits) {
    const int64_t rows = n_ - first;
    FBuf h = buf(rows * d);
    be_.rms_norm(X.data() + first * d, w_.output_norm, d, rows, hp_.rms_eps, h.data());
    FBuf out = buf(rows * V);
    be_.matmul(w_.output, h.data(), rows, out.data());
    if (logits_all) {
      be_.download(logits_all, out.data(), static_cast<size_t>(rows * V) * sizeof(float));
      st_.logits.assign(logits_all + (n_ - 1) * V, logits_all + n_ * V);
    } else {
      st_.logits.resize(static_cast<size_t>(V));
      be_.download(st_.logits.data(), out.data() + (rows - 1) * V, static_cast<size_t>(V) * sizeof(float));
    }
  } else {
    be_.synchronize();
  }
  st_.n_pos += n_;
  st_.tokens.insert(st_.tokens.end(), tokens_.begin(), tokens_.end());
}

}  // namespace ds4::model::qwen35moe
