#include "model/deepseek4/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "stream/synthetic_routing.h"

namespace ds4::model::deepseek4 {

FBuf Forward::project(const compute::Matrix& w, const FBuf& x, int64_t rows) {
  FBuf y = buf(rows * w.n_out);
  be_.matmul(w, x.data(), rows, y.data());
  return y;
}

HcMix Forward::hc_pre(const compute::Matrix& fn, const float* base, const float* scale, const FBuf& X,
                      const float* norm) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  FBuf mix = buf(n_ * fn.n_out);
  HcMix out{buf(n_ * d), buf(n_ * hc), buf(n_ * hc * hc)};
  be_.hc_pre_norm(fn, X.data(), mix.data(), n_, hc_params(scale, base), true, norm, hp_.rms_eps, out.x_in.data(),
                  out.post.data(), out.comb.data());
  return out;
}

compute::HcParams Forward::hc_params(const float* scale, const float* base) const {
  return {hp_.n_hc, hp_.n_embd, scale, base, hp_.sinkhorn_iters, hp_.hc_eps, hp_.rms_eps};
}

void Forward::hc_post(const HcMix& mix, const FBuf& y, const FBuf& X, FBuf& Xout) {
  be_.hc_post(y.data(), X.data(), mix.post.data(), mix.comb.data(), n_, hp_.n_hc, hp_.n_embd, Xout.data());
}

FBuf Forward::head_logits(const FBuf& X, int64_t first_row) {
  const int64_t d = hp_.n_embd;
  const int hc = hp_.n_hc;
  const int64_t rows = n_ - first_row;
  const float* Xr = X.data() + first_row * hc * d;
  FBuf mix = buf(rows * hc);
  FBuf h = buf(rows * d);
  be_.hc_pre_norm(w_.output_hc_fn, Xr, mix.data(), rows, hc_params(w_.output_hc_scale, w_.output_hc_base), true,
                  w_.output_norm, hp_.rms_eps, h.data(), nullptr, nullptr);
  return project(w_.output, h, rows);
}

FBuf Forward::layers() {
  FBuf X = buf(n_ * hp_.n_hc * hp_.n_embd), Xn = buf(n_ * hp_.n_hc * hp_.n_embd);
  be_.embed(w_.token_embd, tok_dev_, n_, hp_.n_hc, X.data());
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    attention_layer(il, X, Xn);
    std::swap(X, Xn);
    if (hook_) hook_->after_sublayer(be_, il, Sublayer::Attention, X.data(), n_, p0_);
    ffn_layer(il, X, Xn);
    std::swap(X, Xn);
    if (hook_) hook_->after_sublayer(be_, il, Sublayer::Ffn, X.data(), n_, p0_);
  }
  return X;
}

compute::StepKey Forward::step_key() const {
  // What changes one token's op sequence besides the state: which layers' compressors emit a
  // row at this position, and which consult the indexer (attention.cpp: once a query sees more
  // compressed rows than top-k).
  uint64_t v = 1469598103934665603ull;  // FNV-1a over the per-layer flags
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
    const int64_t R = hp_.ratio(il);
    const bool emits = L.has_compressor && (p0_ + 1) % R == 0;
    const bool idx = L.has_indexer && (p0_ + 1) / R > hp_.indexer_top_k;
    v = (v ^ ((emits ? 1u : 0u) | (idx ? 2u : 0u))) * 1099511628211ull;
  }
  return {st_.serial, v};
}

void Forward::note_replayed_step() {
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
    LayerState& S = st_.layers[static_cast<size_t>(il)];
    if (L.has_compressor) claim_row(S.attn, p0_);
    if (L.has_indexer) claim_row(S.index, p0_);
  }
}

std::vector<int32_t> Forward::bench_ids() const {
  const stream::ZipfRouter* r = m_.options().bench_routing;
  if (!r) return {};
  const int64_t K = hp_.n_expert_used;
  std::vector<int32_t> ids(static_cast<size_t>(hp_.n_layer * n_ * K), 0);
  for (int64_t il = hp_.n_hash_layers; il < hp_.n_layer; ++il)
    for (int64_t t = 0; t < n_; ++t) r->route(p0_ + t, il, ids.data() + (il * n_ + t) * K);
  return ids;
}

bool Forward::run_step_graph() {
  // One token whose logits are wanted, with nothing host-side inside the step (a steering hook
  // or streamed experts run host code per layer).
  if (n_ != 1 || hook_ || m_.options().experts) return false;
  const compute::StepKey key = step_key();
  bool record = false;
  // Benchmark routing's ids are per-step inputs, written with the position before each replay.
  const std::vector<int32_t> extra = bench_ids();
  const float* logits = be_.step_replay(key, p0_, tokens_[0], extra, &record);
  if (logits) {
    note_replayed_step();
  } else if (record) {
    tok_dev_ = be_.step_record_begin(key, p0_, tokens_[0], extra);
    bench_dev_ = extra.empty() ? nullptr : tok_dev_ + 1;
    try {
      FBuf X = layers();
      FBuf out = head_logits(X, 0);
      logits = be_.step_record_end(out.data());
    } catch (...) {
      be_.step_record_abort();
      throw;
    }
  } else {
    return false;
  }
  st_.logits.resize(static_cast<size_t>(hp_.n_vocab));
  be_.download(st_.logits.data(), logits, static_cast<size_t>(hp_.n_vocab) * sizeof(float));
  return true;
}

void Forward::run(float* logits_all, bool need_last_logits) {
  if (p0_ + n_ > st_.n_ctx)
    fail("deepseek4: {} tokens at position {} do not fit the state's {} positions", n_, p0_, st_.n_ctx);
  if (!(need_last_logits && !logits_all && run_step_graph())) {
    tokens_dev_ = compute::Buffer<int32_t>(be_, static_cast<size_t>(n_));
    tokens_dev_.from_host(tokens_);
    tok_dev_ = tokens_dev_.data();
    if (m_.options().bench_routing) {
      const std::vector<int32_t> ids = bench_ids();
      bench_buf_ = compute::Buffer<int32_t>(be_, ids.size());
      bench_buf_.from_host(ids);
      bench_dev_ = bench_buf_.data();
    }
    FBuf X = layers();
    const int64_t V = hp_.n_vocab;
    if (logits_all) {
      FBuf out = head_logits(X, 0);
      be_.download(logits_all, out.data(), static_cast<size_t>(n_ * V) * sizeof(float));
      st_.logits.assign(logits_all + (n_ - 1) * V, logits_all + n_ * V);
    } else if (need_last_logits) {
      st_.logits.resize(static_cast<size_t>(V));
      FBuf out = head_logits(X, n_ - 1);
      be_.download(st_.logits.data(), out.data(), static_cast<size_t>(V) * sizeof(float));
    } else {
      be_.synchronize();  // a failed op surfaces here, before the state claims the tokens
    }
  }
  st_.n_pos += n_;
  st_.tokens.insert(st_.tokens.end(), tokens_.begin(), tokens_.end());
}

}  // namespace ds4::model::deepseek4
