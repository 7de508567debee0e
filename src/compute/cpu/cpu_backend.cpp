// CPU implementation of the backend ops: scalar C++ over the thread pool. Quantized dot
// products come from ds4_quant (AVX2 where the CPU has it). Backend memory is host memory.
#include "compute/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compute/numerics.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace ds4::compute {

namespace cpu {

void decode_row(const Matrix& m, int64_t r, float* out) {
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

void* CpuBackend::alloc(size_t bytes) {
  // Large blocks come from fresh anonymous pages (glibc mmaps them), so a state sized for a long
  // context costs memory only as positions are written. Blocks released by earlier ops are
  // reused when the size matches: a forward pass asks for the same scratch sizes layer after
  // layer and token after token, and a fresh mapping costs a page fault per 4 KiB on first use.
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  {
    std::lock_guard lk(alloc_mu_);
    auto it = free_blocks_.find(n);
    if (it != free_blocks_.end()) {
      void* p = it->second;
      free_blocks_.erase(it);
      free_bytes_ -= n;
      live_[p] = n;
      return p;
    }
  }
  void* p = std::aligned_alloc(256, n);
  if (!p) fail("cpu backend: out of memory allocating {} bytes", bytes);
  std::lock_guard lk(alloc_mu_);
  live_[p] = n;
  return p;
}
void CpuBackend::release(void* p) {
  if (!p) return;
  std::lock_guard lk(alloc_mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {  // not ours: nothing sensible to do but free it
    std::free(p);
    return;
  }
  const size_t n = it->second;
  live_.erase(it);
  // Keep scratch-sized blocks up to a budget; a long-context state is returned to the system.
  if (n <= kMaxCachedBlock && free_bytes_ + n <= kMaxCachedBytes) {
    free_blocks_.emplace(n, p);
    free_bytes_ += n;
  } else {
    std::free(p);
  }
}
CpuBackend::~CpuBackend() {
  for (auto& [n, p] : free_blocks_) std::free(p);
}
void CpuBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

void CpuBackend::matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride,
                        int64_t y_stride) {
  if (rows <= 0 || w.n_out <= 0) return;
  if (w.n_in % traits(w.type).block_elems != 0)
    fail("matmul: {} row of {} elements is not a whole number of blocks", traits(w.type).name, w.n_in);
  const int64_t xs = x_stride ? x_stride : w.n_in, ys = y_stride ? y_stride : w.n_out;
  // Activations go to the format the weight's dot product expects (Q8_0 / Q8_K for quantized
  // weights, as ggml and ds4 do; f32 rows are used as they are).
  const GgmlType at = quant::vec_dot_type(w.type);
  if (opt_.float_activations && at != GgmlType::F32) return matmul_float_acts(w, x, rows, y, xs, ys);
  const uint8_t* acts = reinterpret_cast<const uint8_t*>(x);
  size_t abytes = static_cast<size_t>(xs) * sizeof(float);
  if (at != GgmlType::F32) {
    abytes = row_bytes(traits(at), static_cast<uint64_t>(w.n_in));
    act_buf_.resize(abytes * static_cast<size_t>(rows));
    uint8_t* q = act_buf_.data();
    parallel(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) quant::quantize_activation_row(at, x + r * xs, q + r * abytes, w.n_in);
    });
    acts = q;
  }
  // Batches (prefill, an expert's tokens; Q8_0 even one token) take the blocked rows x tokens
  // kernel where the CPU has one: each 16-row panel of weights is decoded once and serves every
  // token. Its results equal the per-row kernel's bit for bit, so prefill, chunked prefill and
  // decode agree whichever path each takes.
  if (rows >= quant::gemm_min_tokens(w.type)) {
    if (quant::GemmKernel gemm = quant::gemm_kernel(w.type)) {
      constexpr int64_t kPanel = 16;
      const int64_t n_panels = (w.n_out + kPanel - 1) / kPanel;
      parallel(n_panels, 2, [&](int64_t p0, int64_t p1) {
        const int64_t o0 = p0 * kPanel, o1 = std::min(w.n_out, p1 * kPanel);
        gemm(w.row(o0), w.row_stride, o1 - o0, acts, abytes, rows, y + o0, ys, w.n_in);
      });
      return;
    }
  }
  // Tiles of kTile weight rows stay in cache while every activation row passes over them, so
  // each weight byte is read from memory once per call. Every (row, token) dot is computed the
  // same way whatever the batch, which keeps prefill and decode identical.
  const quant::DotKernel dot = quant::dot_kernel(w.type);  // checked once, not per row
  constexpr int64_t kTile = 16;
  const int64_t n_tiles = (w.n_out + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, w.n_in * rows * kTile));
  parallel(n_tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = t * kTile, o1 = std::min(w.n_out, o0 + kTile);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* a = acts + static_cast<size_t>(r) * abytes;
        float* yr = y + r * ys;
        for (int64_t o = o0; o < o1; ++o) yr[o] = dot(w.row(o), a, w.n_in);
      }
    }
  });
}

void CpuBackend::matmul_float_acts(const Matrix& w, const float* x, int64_t rows, float* y, int64_t xs,
                                   int64_t ys) {
  parallel(w.n_out, 1, [&](int64_t o0, int64_t o1) {
    std::vector<float> wr(static_cast<size_t>(w.n_in));
    for (int64_t o = o0; o < o1; ++o) {
      quant::dequantize_row(w.type, w.row(o), wr.data(), w.n_in);
      for (int64_t r = 0; r < rows; ++r)
        y[r * ys + o] = quant::vec_dot(GgmlType::F32, wr.data(), x + r * xs, w.n_in);
    }
  });
}

void CpuBackend::rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) {
  parallel_rows(rows, 2 * n, [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
  }
  });
}

const float* CpuBackend::rope_table(std::span<const double> freqs, int64_t pos0, int64_t n_pos) {
  std::span<RopeTable> slots = n_pos > 1 ? std::span<RopeTable>(rope_batch_) : std::span<RopeTable>(rope_single_);
  RopeTable* victim = &slots[0];
  for (RopeTable& t : slots) {
    if (t.n_pos > 0 && t.pos0 <= pos0 && pos0 + n_pos <= t.pos0 + t.n_pos && t.freqs.size() == freqs.size() &&
        std::equal(freqs.begin(), freqs.end(), t.freqs.begin())) {
      t.used = ++rope_clock_;
      return t.cs.data() + (pos0 - t.pos0) * 2 * static_cast<int64_t>(freqs.size());
    }
    if (t.used < victim->used) victim = &t;
  }
  RopeTable& t = *victim;
  const int64_t nf = static_cast<int64_t>(freqs.size());
  t.freqs.assign(freqs.begin(), freqs.end());
  t.pos0 = pos0;
  t.n_pos = n_pos;
  t.used = ++rope_clock_;
  t.cs.resize(static_cast<size_t>(n_pos * 2 * nf));
  // sin/cos in double cost about 50 element operations each.
  parallel_rows(n_pos, nf * 100, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* cs = t.cs.data() + p * 2 * nf;
      // Angles directly as pos * f_k in double (trap 19: no iterative products).
      for (int64_t k = 0; k < nf; ++k) {
        const double th = static_cast<double>(pos0 + p) * freqs[static_cast<size_t>(k)];
        cs[2 * k] = static_cast<float>(std::cos(th));
        cs[2 * k + 1] = static_cast<float>(std::sin(th));
      }
    }
  });
  return t.cs.data();
}

void CpuBackend::rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                           int64_t pos0, int64_t pos_step, bool inverse) {
  if (rows <= 0) return;
  const int64_t nf = static_cast<int64_t>(freqs.size());
  const int64_t n_rot = nf * 2;
  const int64_t first = head_dim - n_rot;
  // cos and sin of pos * f_k (rounded to float) for every position of the call, computed once
  // per batch and frequency set and shared by every call over those positions (the queries,
  // keys and the inverse rotation of each layer). -float(sin) is float(-sin): the inverse
  // rotation negates the table's value.
  std::vector<float> own;
  const float* tab;
  int64_t tab_step;  // table rows per call row
  if (pos_step == 0 || pos_step == 1) {
    tab = rope_table(freqs, pos0, pos_step == 0 ? 1 : rows);
    tab_step = pos_step;
  } else {
    own.resize(static_cast<size_t>(rows * 2 * nf));
    for (int64_t r = 0; r < rows; ++r) {
      const float* t = rope_table(freqs, pos0 + r * pos_step, 1);
      std::copy(t, t + 2 * nf, own.begin() + r * 2 * nf);
    }
    tab = own.data();
    tab_step = 1;
  }
  parallel_rows(rows, n_heads * n_rot * 2, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cs = tab + r * tab_step * 2 * nf;
      for (int64_t h = 0; h < n_heads; ++h) {
        float* t = x + (r * n_heads + h) * head_dim + first;
        for (int64_t k = 0; k < nf; ++k) {
          const float c = cs[2 * k], s = inverse ? -cs[2 * k + 1] : cs[2 * k + 1];
          const float x0 = t[2 * k], x1 = t[2 * k + 1];
          t[2 * k] = x0 * c - x1 * s;
          t[2 * k + 1] = x0 * s + x1 * c;
        }
      }
    }
  });
}

void CpuBackend::act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) {
  parallel_rows(rows, n_round * 16, [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float* xr = x + r * row_len;
    // The quant layer's fast paths give the reference's floats; the reference does what they leave.
    if (kind == ActRound::Fp8) {
      const int64_t done = quant::fp8_e4m3_round_trip_prefix(xr, n_round);
      if (done < n_round) fp8_e4m3_round_trip(xr + done, n_round - done);
    } else {
      if (!quant::hadamard_transform_fast(xr, n_round)) hadamard_transform(xr, n_round);
      const int64_t done = quant::fp4_e2m1_round_trip_prefix(xr, n_round);
      if (done < n_round) fp4_e2m1_round_trip(xr + done, n_round - done);
    }
  }
  });
}

void CpuBackend::swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
                        float* h) {
  parallel_rows(rows, n * 20, [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float weight = weights ? weights[r] : 1.0f;
    const float* gr = g + r * n;
    const float* ur = u + r * n;
    float* hr = h + r * n;
    for (int64_t i = 0; i < n; ++i) {
      float gv = gr[i], uv = ur[i];
      if (limit > 0) {
        gv = std::min(gv, limit);
        uv = std::clamp(uv, -limit, limit);
      }
      float silu = gv / (1.0f + exp_f(-gv));
      hr[i] = silu * uv * weight;
    }
  }
  });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) {
  const int64_t d = table.n_in;
  for (int64_t t = 0; t < rows; ++t) {
    if (tokens[t] < 0 || tokens[t] >= table.n_out)
      fail("embed: token {} at row {} is outside the table's {} rows", tokens[t], t, table.n_out);
    float* x0 = X + t * copies * d;
    decode_row(table, tokens[t], x0);
    for (int s = 1; s < copies; ++s) std::memcpy(x0 + s * d, x0, static_cast<size_t>(d) * sizeof(float));
  }
}

void CpuBackend::hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
                        float* comb) {
  const int hc = p.n_hc;
  const int64_t width = hc * p.n;
  const bool head = post == nullptr;
  const int64_t n_mix = head ? hc : (2 + hc) * hc;
  const int64_t work = 2 * width + 20 * n_mix + (head ? 0 : 4 * p.sinkhorn_iters * hc * hc) + hc * p.n;
  parallel_rows(rows, work, [&](int64_t r0, int64_t r1) {
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t r = r0; r < r1; ++r) {
    const float* Xr = X + r * width;
    float* m = mix + r * n_mix;
    // The RMS over all streams scales the mixes only; the streams are summed un-normalized.
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(Xr[i]) * Xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(width) + p.rms_eps));
    for (int64_t k = 0; k < n_mix; ++k) m[k] *= inv;
    if (head) {
      for (int i = 0; i < hc; ++i) pre[i] = 1.0f / (1.0f + exp_f(-(m[i] * p.scale[0] + p.base[i]))) + p.hc_eps;
    } else {
      hc_split_mix(m, p.scale, p.base, hc, p.sinkhorn_iters, p.hc_eps, pre.data(), post + r * hc, comb + r * hc * hc);
    }
    // xo[i] = sum over streams s in order of pre[s] * X[s][i], from 0 (element by element, no
    // FMA: the floats of the plain loop, vectorized across i).
    float* xo = x_in + r * p.n;
    std::fill(xo, xo + p.n, 0.0f);
    for (int s = 0; s < hc; ++s) quant::axpy_f32(pre[s], Xr + s * p.n, xo, p.n);
  }
  });
}

void CpuBackend::hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows,
                         int n_hc, int64_t n, float* Xout) {
  parallel_rows(rows, n_hc * n * (n_hc + 1), [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* yr = y + r * n;
    const float* Xr = X + r * n_hc * n;
    const float* pr = post + r * n_hc;
    const float* cr = comb + r * n_hc * n_hc;
    float* Or = Xout + r * n_hc * n;
    for (int j = 0; j < n_hc; ++j) {
      // o[d] = post[j] * y[d], then + comb[i][j] * X[i][d] for i in order (as the plain loop).
      float* o = Or + j * n;
      for (int64_t d = 0; d < n; ++d) o[d] = pr[j] * yr[d];
      for (int i = 0; i < n_hc; ++i) quant::axpy_f32(cr[i * n_hc + j], Xr + i * n, o, n);
    }
  }
  });
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool, CpuOptions opt) {
  return std::make_unique<cpu::CpuBackend>(pool, opt);
}

}  // namespace ds4::compute
