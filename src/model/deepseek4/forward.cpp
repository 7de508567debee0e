#include "model/deepseek4/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ds4::model::deepseek4 {

FBuf Forward::project(const compute::Matrix& w, const FBuf& x, int64_t rows) {
  FBuf y = buf(rows * w.n_out);
  be_.matmul(w, x.data(), rows, y.data());
  return y;
}

HcMix Forward::hc_pre(const compute::Matrix& fn, const float* base, const float* scale, const FBuf& X) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  FBuf mix = project(fn, X, n_);
  HcMix out{buf(n_ * d), buf(n_ * hc), buf(n_ * hc * hc)};
  be_.hc_pre(X.data(), mix.data(), n_, hc_params(scale, base), out.x_in.data(), out.post.data(), out.comb.data());
  return out;
}

compute::HcParams Forward::hc_params(const float* scale, const float* base) const {
  return {hp_.n_hc, hp_.n_embd, scale, base, hp_.sinkhorn_iters, hp_.hc_eps, hp_.rms_eps};
}

void Forward::hc_post(const HcMix& mix, const FBuf& y, const FBuf& X, FBuf& Xout) {
  be_.hc_post(y.data(), X.data(), mix.post.data(), mix.comb.data(), n_, hp_.n_hc, hp_.n_embd, Xout.data());
}

void Forward::head(const FBuf& X, int64_t first_row, float* logits) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  const int64_t rows = n_ - first_row;
  const float* Xr = X.data() + first_row * hc * d;
  FBuf mix = buf(rows * hc);
  be_.matmul(w_.output_hc_fn, Xr, rows, mix.data());
  FBuf h = buf(rows * d);
  be_.hc_pre(Xr, mix.data(), rows, hc_params(w_.output_hc_scale, w_.output_hc_base), h.data(), nullptr, nullptr);
  be_.rms_norm(h.data(), w_.output_norm, d, rows, hp_.rms_eps, h.data());
  FBuf out = project(w_.output, h, rows);
  be_.download(logits, out.data(), static_cast<size_t>(rows * hp_.n_vocab) * sizeof(float));
}

void Forward::run(float* logits_all, bool need_last_logits) {
  if (p0_ + n_ > st_.n_ctx)
    fail("deepseek4: {} tokens at position {} do not fit the state's {} positions", n_, p0_, st_.n_ctx);
  tokens_dev_ = compute::Buffer<int32_t>(be_, static_cast<size_t>(n_));
  tokens_dev_.from_host(tokens_);
  FBuf X = buf(n_ * hp_.n_hc * hp_.n_embd), Xn = buf(n_ * hp_.n_hc * hp_.n_embd);
  be_.embed(w_.token_embd, tokens_dev_.data(), n_, hp_.n_hc, X.data());
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    attention_layer(il, X, Xn);
    std::swap(X, Xn);
    if (hook_) hook_->after_sublayer(be_, il, Sublayer::Attention, X.data(), n_, p0_);
    ffn_layer(il, X, Xn);
    std::swap(X, Xn);
    if (hook_) hook_->after_sublayer(be_, il, Sublayer::Ffn, X.data(), n_, p0_);
  }
  const int64_t V = hp_.n_vocab;
  if (logits_all) {
    head(X, 0, logits_all);
    st_.logits.assign(logits_all + (n_ - 1) * V, logits_all + n_ * V);
  } else if (need_last_logits) {
    st_.logits.resize(static_cast<size_t>(V));
    head(X, n_ - 1, st_.logits.data());
  } else {
    be_.synchronize();  // a failed op surfaces here, before the state claims the tokens
  }
  st_.n_pos += n_;
  st_.tokens.insert(st_.tokens.end(), tokens_.begin(), tokens_.end());
}

}  // namespace ds4::model::deepseek4
