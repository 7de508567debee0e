#include "model/deepseek4/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace ds4::model::deepseek4 {

namespace {

// One row of a matrix as f32 (embedding lookup, ape rows).
void decode_row(const compute::Matrix& m, int64_t r, float* out) {
  const uint8_t* src = m.row(r);
  switch (m.type) {
    case GgmlType::F32: std::memcpy(out, src, static_cast<size_t>(m.n_in) * sizeof(float)); break;
    case GgmlType::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < m.n_in; ++i) out[i] = fp16_to_fp32(h[i]);
      break;
    }
    case GgmlType::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < m.n_in; ++i) out[i] = bf16_to_fp32(h[i]);
      break;
    }
    default: quant::dequantize_row(m.type, src, out, m.n_in);
  }
}

}  // namespace

void row_as_f32(const compute::Matrix& m, int64_t r, float* out) { decode_row(m, r, out); }

void Forward::embed(std::vector<float>& X) {
  const int64_t d = hp_.n_embd, hc = hp_.n_hc;
  X.resize(static_cast<size_t>(n_ * hc * d));
  for (int64_t t = 0; t < n_; ++t) {
    float* x0 = X.data() + t * hc * d;
    decode_row(w_.token_embd, tokens_[t], x0);
    for (int64_t s = 1; s < hc; ++s) std::memcpy(x0 + s * d, x0, static_cast<size_t>(d) * sizeof(float));
  }
}

HcMix Forward::hc_pre(const compute::Matrix& fn, const float* base, const float* scale, const std::vector<float>& X) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  std::vector<float> mix(static_cast<size_t>(n_ * fn.n_out));
  be_.matmul(fn, X.data(), n_, mix.data());
  HcMix out;
  out.x_in.resize(static_cast<size_t>(n_ * d));
  out.post.resize(static_cast<size_t>(n_ * hc));
  out.comb.resize(static_cast<size_t>(n_ * hc * hc));
  be_.hc_pre(X.data(), mix.data(), n_, hc_params(scale, base), out.x_in.data(), out.post.data(), out.comb.data());
  return out;
}

compute::HcParams Forward::hc_params(const float* scale, const float* base) const {
  return {hp_.n_hc, hp_.n_embd, scale, base, hp_.sinkhorn_iters, hp_.hc_eps, hp_.rms_eps};
}

void Forward::hc_post(const HcMix& mix, const std::vector<float>& y, const std::vector<float>& X,
                      std::vector<float>& Xout) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  Xout.resize(X.size());
  for (int64_t t = 0; t < n_; ++t)
    be_.hc_post(y.data() + t * d, X.data() + t * hc * d, mix.post.data() + t * hc, mix.comb.data() + t * hc * hc, hc, d,
                Xout.data() + t * hc * d);
}

void Forward::head(const std::vector<float>& X, int64_t first_row, float* logits) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  const int64_t rows = n_ - first_row;
  const float* Xr = X.data() + first_row * hc * d;
  std::vector<float> mix(static_cast<size_t>(rows * hc));
  be_.matmul(w_.output_hc_fn, Xr, rows, mix.data());
  std::vector<float> h(static_cast<size_t>(rows * d));
  be_.hc_pre(Xr, mix.data(), rows, hc_params(w_.output_hc_scale, w_.output_hc_base), h.data(), nullptr, nullptr);
  be_.rms_norm(h.data(), w_.output_norm, d, rows, hp_.rms_eps, h.data());
  be_.matmul(w_.output, h.data(), rows, logits);
}

void Forward::run(float* logits_all, bool need_last_logits) {
  std::vector<float> X, Xn;
  embed(X);
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    attention_layer(il, X, Xn);
    X.swap(Xn);
    ffn_layer(il, X, Xn);
    X.swap(Xn);
  }
  const int64_t V = hp_.n_vocab;
  if (logits_all) {
    head(X, 0, logits_all);
    st_.logits.assign(logits_all + (n_ - 1) * V, logits_all + n_ * V);
  } else if (need_last_logits) {
    st_.logits.resize(static_cast<size_t>(V));
    head(X, n_ - 1, st_.logits.data());
  }
  st_.n_pos += n_;
  st_.tokens.insert(st_.tokens.end(), tokens_.begin(), tokens_.end());
}

}  // namespace ds4::model::deepseek4
