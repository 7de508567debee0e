// GPU check for src/compute/cuda/gemv.h: matmul for every weight type x rows {1, 2, 7, 16, 100}
// x shapes (the Flash ones included), strided x/y, offset and padded weight rows, float_acts;
// moe_experts against a CPU MoE built from the quant codecs; then a timing table (GB/s of weight
// bytes, rows = 1) next to a device-to-device cudaMemcpy measured in the same run.
//
// Usage: cuda_gemv_check [--types all|old|new|flash-moe]. "flash-moe": only the Flash MoE layer's
// checks and timing (to A/B the MoE kernels' switches). "old": the first seven formats (F32, F16, BF16,
// Q8_0, Q2_K, Q4_K, IQ2_XXS: random quants with finite random scales); "new": the further formats
// of gemv_formats_ext.cuh (Q4_0, Q5_0, Q5_1 (Q8_1 activations), IQ4_NL, MXFP4, Q3_K, Q5_K, Q6_K, IQ4_XS, IQ1_S, IQ1_M,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), whose weights are blocks made by the CPU's own quantizers from
// random rows (tests/cuda/quant_pool.h); default all.
//
// Reference: the CPU codecs on the same inputs: quant::quantize_activation_row + quant::vec_dot
// (what compute/cpu's matmul does per row), or dequantize_row + the f32 vec_dot (float_acts).
// Pass rule without float_acts: every output equal to the CPU's bit for bit (the kernels add
// the CPU's block terms in the CPU's order, gemv_exact.cuh; float weights follow the AVX2
// kernel's FMA chains, so only where the CPU has AVX2). The bounds below are checked too; with
// float_acts (decoded weights, another order) they are the pass rule.
// Tolerances (|gpu - cpu| per output):
//  * integer-dot paths (every quantized type against Q8_0/Q8_K activations): 1e-5 * S,
//    S = sum over the row of |terms|: |w_i a_i| with w, a the decoded weight and activation
//    (for Q2_K/Q4_K/Q5_K |d*sc*q*a| + |dmin*m*a|, the two products each block subtracts, Q5_1
//    |d*q*a| + |m*a|; for
//    IQ1_S/IQ1_M, whose weight d*(g+delta) is summed as d*g and d*delta apart, 9/7 * |w_i a_i|,
//    which bounds |d*g*a| + |d*delta*a| for g in {-1,0,1}, |delta| = 1/8). Both sides
//    compute the same per-block floats; only the order of adding them differs, which moves the
//    result by at most (blocks added in sequence on both sides) * 2^-24 * S << 1e-5 * S.
//  * float paths (F32/F16/BF16 weights, float_acts): (n/8 + 16 + e + 5) * 2^-24 * S with
//    S = sum |w_i x_i|: the CPU's documented bound (quant.h) plus the GPU's (e products summed
//    in sequence by one lane, then a 5-level shuffle tree).
//  * moe_experts: the down projection's bound as above, plus, for quantized activations, three
//    Q8_K steps of the hidden row times the largest |down weight| of the output row per slot:
//    gate/up differ from the CPU in float order (and expf by an ulp or two), so h can differ in
//    its last bits and an h value next to a rounding boundary of its Q8_K block may quantize one
//    step apart. Outputs that need that allowance are counted in the line.
// Exit 0 = all pass, 1 = a failure, 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "check_timing.h"
#include "compute/cuda/gemv.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "compute/numerics.h"
#include "quant/quant.h"
#include "quant_pool.h"

using namespace ds4;

namespace {

using cuda_check::ck;
using cuda_check::median;

// ---- utilities -----------------------------------------------------------------------------

struct Rng {  // xorshift64*: fast enough for gigabytes of random weight bytes
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  const int nt = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<int64_t> next{0};
  std::vector<std::thread> th;
  for (int i = 0; i < nt; ++i)
    th.emplace_back([&] {
      for (int64_t j; (j = next.fetch_add(1)) < n;) fn(j);
    });
  for (auto& t : th) t.join();
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }
// Formats whose blocks add a min (x = d*sc*q - dmin*m; Q5_1: d*q + m): the bound counts both
// products.
bool is_kquant(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q5_1;
}
bool is_iq1(GgmlType t) { return t == GgmlType::IQ1_S || t == GgmlType::IQ1_M; }
std::string tname(GgmlType t) { return std::string(traits(t).name); }

// The further formats (gemv_formats_ext.cuh): weights from the CPU quantizers.
const std::vector<GgmlType> kNewTypes = {GgmlType::Q4_0,  GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::IQ4_NL, GgmlType::MXFP4,
                                         GgmlType::Q3_K,  GgmlType::Q5_K,   GgmlType::Q6_K,   GgmlType::IQ4_XS,
                                         GgmlType::IQ1_S, GgmlType::IQ1_M,  GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                         GgmlType::IQ3_XXS, GgmlType::IQ3_S};
bool is_new_type(GgmlType t) { return std::find(kNewTypes.begin(), kNewTypes.end(), t) != kNewTypes.end(); }

// One pool of quantizer-made blocks per new type, built on first use (seeded from the run's
// seed). Not thread-safe: called from the main thread only.
uint64_t g_pool_seed = 0;
const cudatest::BlockPool& pool_for(GgmlType t) {
  static std::vector<std::unique_ptr<cudatest::BlockPool>> pools;
  for (auto& p : pools)
    if (p->type == t) return *p;
  pools.push_back(std::make_unique<cudatest::BlockPool>(
      cudatest::make_block_pool(t, g_pool_seed ^ (static_cast<uint64_t>(t) * 0x9E3779B1ull))));
  return *pools.back();
}

// Random, valid weight bytes: quants random, block scales finite f16 (spec §4 layouts).
void fill_weights(GgmlType t, uint8_t* dst, int64_t n_rows, size_t row_stride, int64_t n_in, Rng& rng) {
  const auto& tr = traits(t);
  const size_t rb = row_bytes(tr, static_cast<uint64_t>(n_in));
  const uint64_t base = rng.next();  // fresh bytes for every call
  const cudatest::BlockPool* pool = is_new_type(t) ? &pool_for(t) : nullptr;
  parallel_for((n_rows + 255) / 256, [&](int64_t chunk) {
    Rng r(base ^ (static_cast<uint64_t>(chunk) * 0x51ED27ull + 7));
    for (int64_t o = chunk * 256; o < std::min(n_rows, chunk * 256 + 256); ++o) {
      uint8_t* row = dst + static_cast<size_t>(o) * row_stride;
      if (t == GgmlType::F32) {
        for (int64_t i = 0; i < n_in; ++i) {
          float v = r.normal() * 0.05f;
          std::memcpy(row + 4 * i, &v, 4);
        }
      } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
        for (int64_t i = 0; i < n_in; ++i) {
          const float v = r.normal() * 0.05f;
          const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
          std::memcpy(row + 2 * i, &h, 2);
        }
      } else if (pool) {
        cudatest::PoolRng pr(r.next());
        cudatest::fill_row_from_pool(*pool, row, n_in / tr.block_elems, pr);
      } else {
        for (size_t i = 0; i < rb; i += 8) {
          const uint64_t v = r.next();
          std::memcpy(row + i, &v, std::min<size_t>(8, rb - i));
        }
        const int64_t nb = n_in / tr.block_elems;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t* blk = row + b * tr.block_bytes;
          auto put = [&](size_t off, float scale) {
            const uint16_t h = fp32_to_fp16(r.normal() * scale);
            std::memcpy(blk + off, &h, 2);
          };
          if (t == GgmlType::Q8_0) put(0, 0.002f);
          if (t == GgmlType::IQ2_XXS) put(0, 0.02f);
          if (t == GgmlType::Q4_K) put(0, 0.01f), put(2, 0.01f);
          if (t == GgmlType::Q2_K) put(80, 0.02f), put(82, 0.02f);
        }
      }
      // Row padding (row_stride > row bytes) gets bytes the kernels must not use.
      for (size_t i = rb; i < row_stride; ++i) row[i] = 0xff;
    }
  });
}

// Activations: normal values with per-32 scale variation (so block scales differ), never 0.
void fill_acts(float* x, int64_t rows, int64_t n, int64_t stride, Rng& rng) {
  for (int64_t r = 0; r < rows; ++r) {
    float scale = 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      if (i % 32 == 0) scale = std::exp(rng.normal());
      float v = rng.normal() * scale;
      if (v == 0.0f) v = 1e-3f;
      x[r * stride + i] = v;
    }
    for (int64_t i = n; i < stride; ++i) x[r * stride + i] = NAN;  // never read
  }
}

// Decoded weight row w and, for K-quants, the part without the min (dmin zeroed): |w0| + |w0-w|
// are the magnitudes of the two products of each weight.
void decode_row(GgmlType t, const uint8_t* row, int64_t n, float* w, float* w0) {
  quant::dequantize_row(t, row, w, n);
  if (!is_kquant(t)) return;
  const auto& tr = traits(t);
  std::vector<uint8_t> copy(row, row + row_bytes(tr, static_cast<uint64_t>(n)));
  const size_t off = t == GgmlType::Q2_K ? 82 : 2;  // dmin (Q4_K, Q5_K: {d, dmin, ...}; Q5_1: {d, m, ...})
  for (int64_t b = 0; b < n / tr.block_elems; ++b) copy[b * tr.block_bytes + off] = 0, copy[b * tr.block_bytes + off + 1] = 0;
  quant::dequantize_row(t, copy.data(), w0, n);
}

double abs_terms(GgmlType t, const float* w, const float* w0, const float* a, int64_t n) {
  double s = 0;
  if (is_kquant(t)) {
    for (int64_t i = 0; i < n; ++i) s += (std::fabs(static_cast<double>(w0[i])) + std::fabs(static_cast<double>(w0[i]) - w[i])) * std::fabs(a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(w[i]) * a[i]);
    if (is_iq1(t)) s *= 9.0 / 7.0;
  }
  return s;
}

// Elements one GPU lane sums in sequence (mirrors the kernels' lanes-per-row choice).
int64_t lane_elems(GgmlType t, int64_t n) {
  const bool fl = is_float_type(t);
  const int64_t be = fl ? 8 : traits(t).block_elems;
  const int64_t items = fl ? (n + 7) / 8 : n / be;
  int64_t lpr = 1;
  while (lpr < 32 && lpr < items) lpr *= 2;
  return (items + lpr - 1) / lpr * be;
}
double float_tol_factor(GgmlType t, int64_t n) {
  return (static_cast<double>(n) / 8 + 16 + static_cast<double>(lane_elems(t, n)) + 5) * std::ldexp(1.0, -24);
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~Dev() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

int g_failures = 0, g_cases = 0;

void report(const char* kind, const std::string& name, double max_abs, double max_rel, const char* tol, bool ok,
            const std::string& extra = "") {
  ++g_cases;
  if (!ok) ++g_failures;
  std::printf("%-5s %-58s max|err| %.3e  max err/tol %.3f  tol %s %s %s\n", kind, name.c_str(), max_abs, max_rel, tol,
              extra.c_str(), ok ? "PASS" : "FAIL");
  std::fflush(stdout);
}

// ---- matmul cases --------------------------------------------------------------------------

struct Weights {
  GgmlType type;
  int64_t n_in, n_out;
  size_t row_stride, offset;  // offset: bytes from the allocation start (tests alignment edges)
  std::vector<uint8_t> host;  // offset + n_out * row_stride bytes
  Dev* dev = nullptr;
  cuda::DevMatrix mat() const {
    return {type, dev->as<uint8_t>() + offset, n_in, n_out, row_stride};
  }
};

Weights make_weights(GgmlType t, int64_t n_in, int64_t n_out, size_t pad, size_t offset, Rng& rng) {
  Weights w{t, n_in, n_out, row_bytes(traits(t), static_cast<uint64_t>(n_in)) + pad, offset, {}, nullptr};
  w.host.assign(offset + static_cast<size_t>(n_out) * w.row_stride, 0xee);
  fill_weights(t, w.host.data() + offset, n_out, w.row_stride, n_in, rng);
  w.dev = new Dev(w.host.size());
  ck(cudaMemcpy(w.dev->p, w.host.data(), w.host.size(), cudaMemcpyHostToDevice), "upload weights");
  return w;
}

void check_matmul(const Weights& w, int64_t rows, bool strided, bool float_acts, const std::string& label, Rng& rng,
                  cudaStream_t s) {
  const GgmlType t = w.type;
  const int64_t n = w.n_in, m = w.n_out;
  const int64_t xs = strided ? n + 40 : n, ys = strided ? m + 3 : m;
  std::vector<float> x(static_cast<size_t>(rows * xs)), y(static_cast<size_t>(rows * ys));
  fill_acts(x.data(), rows, n, xs, rng);
  Dev dx(x.size() * 4), dy(y.size() * 4);
  ck(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
  ck(cudaMemset(dy.p, 0xff, y.size() * 4), "poison y");  // 0xffffffff: a NaN no kernel writes
  std::string err;
  try {
    cuda::matmul(w.mat(), dx.as<float>(), rows, dy.as<float>(), strided ? xs : 0, strided ? ys : 0, float_acts, s);
    ck(cudaStreamSynchronize(s), "matmul");
  } catch (const Error& e) {
    err = e.what();
  }
  char name[160];
  std::snprintf(name, sizeof name, "matmul %s %s %lldx%lld rows %lld%s%s", tname(t).c_str(), label.c_str(),
                (long long)m, (long long)n, (long long)rows, strided ? " strided" : "", float_acts ? " float_acts" : "");
  if (!err.empty()) {
    report("CASE", name, 0, 0, "-", false, "error: " + err);
    return;
  }
  ck(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), "download y");

  // Untouched padding and written outputs.
  int64_t pad_touched = 0, unwritten = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < ys; ++o) {
      uint32_t bits;
      std::memcpy(&bits, &y[r * ys + o], 4);
      if (o >= m && bits != 0xffffffffu) ++pad_touched;
      if (o < m && bits == 0xffffffffu) ++unwritten;
    }

  // Which outputs get a CPU reference: all, or (big cases) the first/last 256 rows and an even
  // sample between, so that a case costs at most ~2^27 multiply-adds on the CPU.
  std::vector<int64_t> outs;
  const double budget = 134217728.0;
  const int64_t stride = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(m) * n * rows / budget)));
  const int64_t phase = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(stride));
  for (int64_t o = 0; o < m; ++o)
    if (stride == 1 || o < 256 || o >= m - 256 || o % stride == phase) outs.push_back(o);

  const bool fl = is_float_type(t) || float_acts;
  const GgmlType at = fl ? GgmlType::F32 : quant::vec_dot_type(t);
  const size_t abytes = fl ? n * 4 : row_bytes(traits(at), static_cast<uint64_t>(n));
  std::vector<uint8_t> acts(rows * abytes);
  std::vector<float> adec(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    if (fl) {
      std::memcpy(acts.data() + r * abytes, &x[r * xs], n * 4);
      std::memcpy(&adec[r * n], &x[r * xs], n * 4);
    } else {
      quant::quantize_activation_row(at, &x[r * xs], acts.data() + r * abytes, n);
      quant::dequantize_row(at, acts.data() + r * abytes, &adec[r * n], n);
    }
  }
  const double tol_factor = fl ? float_tol_factor(is_float_type(t) ? t : GgmlType::F32, n) : 1e-5;
  // float_acts lanes sum whole blocks of the quantized layout
  const double tol_f = float_acts ? (static_cast<double>(n) / 8 + 16 + lane_elems(t, n) + 5) * std::ldexp(1.0, -24)
                                  : tol_factor;
  std::vector<double> worst_abs(outs.size()), worst_rel(outs.size());
  // Without float_acts the kernels add the CPU's terms in the CPU's order (gemv_exact.cuh):
  // every output must equal quant::vec_dot bit for bit (float weights: the AVX2 order, so
  // only where the CPU has AVX2).
  const bool want_exact = !float_acts && (!is_float_type(t) || quant::have_avx2());
  std::atomic<int64_t> differ{0};
  parallel_for(static_cast<int64_t>(outs.size()), [&](int64_t k) {
    const int64_t o = outs[k];
    const uint8_t* row = w.host.data() + w.offset + static_cast<size_t>(o) * w.row_stride;
    std::vector<float> wd(n), w0(is_kquant(t) ? n : 0);
    decode_row(t, row, n, wd.data(), w0.data());
    double wa = 0, wr = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float ref = float_acts ? quant::vec_dot(GgmlType::F32, wd.data(), &x[r * xs], n)
                                   : quant::vec_dot(t, row, acts.data() + r * abytes, n);
      const double S = abs_terms(float_acts ? GgmlType::F32 : t, wd.data(), w0.data(), &adec[r * n], n);
      const double got = y[r * ys + o];
      if (want_exact && !(y[r * ys + o] == ref)) differ.fetch_add(1);
      const double e = std::fabs(got - ref);
      const double tol = tol_f * S;
      double rel = tol > 0 ? e / tol : (e == 0 ? 0 : INFINITY);
      if (!std::isfinite(got)) rel = INFINITY;
      wa = std::max(wa, e), wr = std::max(wr, rel);
    }
    worst_abs[k] = wa, worst_rel[k] = wr;
  });
  double max_abs = 0, max_rel = 0;
  for (size_t k = 0; k < outs.size(); ++k) max_abs = std::max(max_abs, worst_abs[k]), max_rel = std::max(max_rel, worst_rel[k]);
  char tol[64], extra[96];
  std::snprintf(tol, sizeof tol, "%.2e*S", tol_f);
  std::snprintf(extra, sizeof extra, "[%zu/%lld outputs checked]%s%s%s", outs.size(), (long long)m,
                pad_touched ? " PADDING-WRITTEN" : "", unwritten ? " UNWRITTEN" : "",
                want_exact ? (differ.load() ? " NOT-BIT-EXACT" : " bit-exact") : "");
  report("CASE", name, max_abs, max_rel, tol, max_rel <= 1.0 && !pad_touched && !unwritten && differ.load() == 0, extra);
}

// ---- moe cases -----------------------------------------------------------------------------

struct ExpertHost {
  GgmlType type;
  int64_t n_in, n_out, n_expert;
  size_t row_stride, expert_stride;
  std::vector<uint8_t> host;
  Dev* dev = nullptr;
  cuda::DevExperts dx() const {
    return {{type, dev->as<uint8_t>(), n_in, n_out, row_stride}, n_expert, expert_stride};
  }
  const uint8_t* row(int64_t e, int64_t o) const { return host.data() + e * expert_stride + o * row_stride; }
};

ExpertHost make_experts(GgmlType t, int64_t n_in, int64_t n_out, int64_t n_expert, Rng& rng) {
  ExpertHost x{t, n_in, n_out, n_expert, row_bytes(traits(t), static_cast<uint64_t>(n_in)), 0, {}, nullptr};
  x.expert_stride = x.row_stride * n_out;
  x.host.resize(x.expert_stride * n_expert);
  fill_weights(t, x.host.data(), n_out * n_expert, x.row_stride, n_in, rng);
  x.dev = new Dev(x.host.size());
  ck(cudaMemcpy(x.dev->p, x.host.data(), x.host.size(), cudaMemcpyHostToDevice), "upload experts");
  return x;
}

void random_routes(int64_t rows, int64_t k, int64_t n_expert, Rng& rng, std::vector<int32_t>& ids, std::vector<float>& wts) {
  ids.resize(rows * k), wts.resize(rows * k);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < k; ++i) {
      int32_t e;
      bool dup;
      do {
        e = static_cast<int32_t>(rng.next() % n_expert);
        dup = false;
        for (int64_t j = 0; j < i; ++j) dup |= ids[t * k + j] == e;
      } while (dup);
      ids[t * k + i] = e;
      wts[t * k + i] = static_cast<float>(0.05 + rng.uniform());
    }
}

void check_moe(const ExpertHost& gate, const ExpertHost& up, const ExpertHost& down, int64_t rows, int64_t k, float limit,
               bool float_acts, Rng& rng, cudaStream_t s) {
  const int64_t n_embd = gate.n_in, n_ff = gate.n_out;
  std::vector<float> x(rows * n_embd), y(rows * n_embd);
  fill_acts(x.data(), rows, n_embd, n_embd, rng);
  for (auto& v : x) v *= 0.2f;
  std::vector<int32_t> ids;
  std::vector<float> wts;
  random_routes(rows, k, gate.n_expert, rng, ids, wts);
  Dev dx(x.size() * 4), dy(y.size() * 4), di(ids.size() * 4), dw(wts.size() * 4);
  ck(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
  ck(cudaMemcpy(di.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "upload ids");
  ck(cudaMemcpy(dw.p, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice), "upload weights");
  ck(cudaMemset(dy.p, 0xff, y.size() * 4), "poison y");
  char name[160];
  std::snprintf(name, sizeof name, "moe %s/%s/%s %lldx%lld %lld experts k %lld rows %lld limit %g%s",
                tname(gate.type).c_str(), tname(up.type).c_str(), tname(down.type).c_str(), (long long)n_ff,
                (long long)n_embd, (long long)gate.n_expert, (long long)k, (long long)rows, limit,
                float_acts ? " float_acts" : "");
  try {
    cuda::moe_experts(gate.dx(), up.dx(), down.dx(), dx.as<float>(), di.as<int32_t>(), dw.as<float>(), rows, k, limit,
                      dy.as<float>(), float_acts, s);
    ck(cudaStreamSynchronize(s), "moe_experts");
  } catch (const Error& e) {
    report("CASE", name, 0, 0, "-", false, std::string("error: ") + e.what());
    return;
  }
  ck(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), "download y");

  const bool fa_g = float_acts || is_float_type(gate.type), fa_d = float_acts || is_float_type(down.type);
  const GgmlType at_g = fa_g ? GgmlType::F32 : quant::vec_dot_type(gate.type);
  const GgmlType at_d = fa_d ? GgmlType::F32 : quant::vec_dot_type(down.type);
  const double eps = std::ldexp(1.0, -24);
  const double tol_g = fa_g ? (n_embd / 8.0 + 16 + lane_elems(gate.type, n_embd) + 5) * eps : 1e-5;
  const double tol_d = fa_d ? (n_ff / 8.0 + 16 + lane_elems(down.type, n_ff) + 5) * eps : 1e-5;
  std::vector<double> worst_rel(rows), worst_abs(rows);
  std::vector<int64_t> allowance_used(rows);
  // Without float_acts: bit for bit the CPU backend's result (gemv_exact.cuh), up to glibc's
  // expf in silu (the kernel rounds exp in double once: see cuda_util.cuh expf_ref).
  const bool want_exact = !float_acts && ((!is_float_type(gate.type) && !is_float_type(down.type)) || quant::have_avx2());
  std::atomic<int64_t> differ{0};
  parallel_for(rows, [&](int64_t t) {
    const float* xt = &x[t * n_embd];
    std::vector<uint8_t> xq(fa_g ? n_embd * 4 : row_bytes(traits(at_g), n_embd));
    if (fa_g) std::memcpy(xq.data(), xt, n_embd * 4);
    else quant::quantize_activation_row(at_g, xt, xq.data(), n_embd);
    std::vector<float> yref(n_embd), allow(n_embd, 0.0f);
    std::vector<double> Sd(n_embd, 0.0), extra(n_embd, 0.0);
    std::vector<float> h(n_ff), dh(n_ff), wrow(std::max(n_embd, n_ff)), w0(std::max(n_embd, n_ff));
    std::vector<float> wg(n_embd), wu(n_embd);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = ids[t * k + i];
      const float wt = wts[t * k + i];
      for (int64_t o = 0; o < n_ff; ++o) {
        float g, u;
        if (fa_g) {
          quant::dequantize_row(gate.type, gate.row(e, o), wg.data(), n_embd);
          quant::dequantize_row(up.type, up.row(e, o), wu.data(), n_embd);
          g = quant::vec_dot(GgmlType::F32, wg.data(), xt, n_embd);
          u = quant::vec_dot(GgmlType::F32, wu.data(), xt, n_embd);
        } else {
          g = quant::vec_dot(gate.type, gate.row(e, o), xq.data(), n_embd);
          u = quant::vec_dot(up.type, up.row(e, o), xq.data(), n_embd);
        }
        float gv = g, uv = u;
        if (limit > 0) gv = std::min(gv, limit), uv = std::clamp(uv, -limit, limit);
        const float silu = gv / (1.0f + compute::exp_f(-gv));
        h[o] = silu * uv * wt;
        if (fa_g) {
          // How far the GPU's h may be from h[o]: g and u within their float bounds, silu' <= 1.1.
          double sg = 0, su = 0;
          for (int64_t j = 0; j < n_embd; ++j) sg += std::fabs(static_cast<double>(wg[j]) * xt[j]), su += std::fabs(static_cast<double>(wu[j]) * xt[j]);
          dh[o] = static_cast<float>(wt * (1.1 * tol_g * sg * std::fabs(uv) + std::fabs(silu) * tol_g * su) + 8 * eps * std::fabs(h[o]));
        }
      }
      std::vector<uint8_t> hq(fa_d ? n_ff * 4 : row_bytes(traits(at_d), n_ff));
      std::vector<float> hdec(n_ff);
      if (fa_d) std::memcpy(hq.data(), h.data(), n_ff * 4), hdec = h;
      else quant::quantize_activation_row(at_d, h.data(), hq.data(), n_ff), quant::dequantize_row(at_d, hq.data(), hdec.data(), n_ff);
      float d8max = 0;
      if (!fa_d) {
        float hmax = 0;
        for (float v : h) hmax = std::max(hmax, std::fabs(v));
        d8max = hmax / 127.0f * 1.01f;
      }
      for (int64_t o = 0; o < n_embd; ++o) {
        const uint8_t* row = down.row(e, o);
        decode_row(down.type, row, n_ff, wrow.data(), w0.data());
        const float out = fa_d ? quant::vec_dot(GgmlType::F32, wrow.data(), h.data(), n_ff) : quant::vec_dot(down.type, row, hq.data(), n_ff);
        yref[o] = i == 0 ? out : yref[o] + out;
        Sd[o] += abs_terms(fa_d ? GgmlType::F32 : down.type, wrow.data(), w0.data(), hdec.data(), n_ff);
        double wmax = 0, prop = 0;
        for (int64_t j = 0; j < n_ff; ++j) {
          wmax = std::max(wmax, static_cast<double>(std::fabs(wrow[j])));
          if (fa_d && fa_g) prop += std::fabs(wrow[j]) * dh[j];
        }
        if (!fa_d) allow[o] += static_cast<float>(3 * d8max * wmax);
        extra[o] += prop;
      }
    }
    double wr = 0, wa = 0;
    int64_t used = 0;
    for (int64_t o = 0; o < n_embd; ++o) {
      const double got = y[t * n_embd + o];
      if (want_exact && !(y[t * n_embd + o] == yref[o])) differ.fetch_add(1);
      const double e = std::fabs(got - yref[o]);
      const double base = tol_d * Sd[o] + extra[o];
      const double tol = base + allow[o];
      double rel = tol > 0 ? e / tol : (e == 0 ? 0 : INFINITY);
      if (!std::isfinite(got)) rel = INFINITY;
      if (e > base) ++used;
      wr = std::max(wr, rel), wa = std::max(wa, e);
    }
    worst_rel[t] = wr, worst_abs[t] = wa, allowance_used[t] = used;
  });
  double max_rel = 0, max_abs = 0;
  int64_t used = 0;
  for (int64_t t = 0; t < rows; ++t) max_rel = std::max(max_rel, worst_rel[t]), max_abs = std::max(max_abs, worst_abs[t]), used += allowance_used[t];
  char tol[64], extra[96];
  std::snprintf(tol, sizeof tol, "%.2e*S%s", tol_d, fa_d ? "+prop" : "+3 steps");
  std::snprintf(extra, sizeof extra, "[%lld/%lld outputs used the Q8_K-step allowance]%s", (long long)used,
                (long long)(rows * n_embd), want_exact ? (differ.load() ? " NOT-BIT-EXACT" : " bit-exact") : "");
  report("CASE", name, max_abs, max_rel, tol, max_rel <= 1.0 && differ.load() == 0, extra);
}

// ---- timing --------------------------------------------------------------------------------

double time_ms(const std::function<void(int)>& fn, cudaStream_t s, int reps = 30) {
  return cuda_check::time_ms(fn, s, reps);
}

// GPU time of one call without the host's cost of issuing it: 10 calls captured into a CUDA
// graph (after the warm-up, so every temporary comes from the backend's block cache), replayed;
// -1 when the calls cannot be captured.
double graph_ms(const std::function<void(int)>& fn, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) fn(i);
  ck(cudaStreamSynchronize(s), "sync");
  constexpr int kCalls = 10;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  bool ok = true;
  try {
    for (int i = 0; i < kCalls; ++i) fn(i);
  } catch (const Error&) {
    ok = false;
  }
  if (cudaStreamEndCapture(s, &g) != cudaSuccess || !ok) {
    cudaGetLastError();
    if (g) cudaGraphDestroy(g);
    return -1;
  }
  if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(g);
    return -1;
  }
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  ck(cudaGraphLaunch(ge, s), "graph launch");
  std::vector<double> ms;
  for (int r = 0; r < 7; ++r) {
    ck(cudaEventRecord(a, s), "record");
    ck(cudaGraphLaunch(ge, s), "graph launch");
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float t = 0;
    ck(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t / kCalls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--types" && i + 1 < argc) {
      which = argv[++i];
    } else {
      std::printf("usage: %s [--types all|old|new|flash-moe]\n", argv[0]);
      return 2;
    }
  }
  // flash-moe: only the Flash MoE layer's checks and timing (A/B of the MoE kernel switches).
  const bool moe_only = which == "flash-moe";
  if (which != "all" && which != "old" && which != "new" && which != "flash-moe") {
    std::printf("usage: %s [--types all|old|new|flash-moe]\n", argv[0]);
    return 2;
  }
  const bool run_old = which != "new", run_new = which != "old" && !moe_only;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device 0: %s, %d SMs, %.1f GiB, L2 %d KiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize / 1024);
  // Keep the stream-ordered pool's memory between calls (the backend should do the same).
  cudaMemPool_t pool;
  ck(cudaDeviceGetDefaultMemPool(&pool, 0), "mempool");
  uint64_t keep = UINT64_MAX;
  ck(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "mempool threshold");
  cudaStream_t s;
  ck(cudaStreamCreate(&s), "stream");
  const auto t_start = std::chrono::steady_clock::now();
  const uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::printf("seed %llu (types: %s)\n", (unsigned long long)seed, which.c_str());
  Rng rng(seed);
  g_pool_seed = rng.next();

  // The IQ2_XXS sign rule the kernels compute (7 bits + even parity) against the CPU's table.
  {
    int bad = 0;
    for (int i = 0; i < 128; ++i) {
      const int v = i | ((__builtin_popcount(i) & 1) << 7);
      bad += v != quant::ksigns_iq2xs[i];
    }
    report("CASE", "iq2_xxs/iq2_xs/iq3_xxs sign table = 7 bits + parity bit", bad, bad, "0", bad == 0);
  }

  std::vector<GgmlType> types;
  if (run_old && !moe_only)
    types = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS};
  if (run_new) types.insert(types.end(), kNewTypes.begin(), kNewTypes.end());
  const std::vector<int64_t> row_counts = {1, 2, 7, 16, 100};
  for (GgmlType t : types) {
    if (is_new_type(t)) {
      const auto t0 = std::chrono::steady_clock::now();
      pool_for(t);
      std::printf("pool  %-8s %lld blocks from the CPU quantizer in %.2f s\n", tname(t).c_str(),
                  (long long)pool_for(t).n_blocks,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const int64_t be = is_float_type(t) ? 1 : traits(t).block_elems;
    struct Shape {
      const char* label;
      int64_t n_in, n_out;
      size_t pad, offset;
    };
    std::vector<Shape> shapes = {
        {"q_a", 4096, 1024, 0, 0},
        {"q_b", 1024, 32768, 0, 0},
        {"expert_gate", 4096, 2048, 0, 0},
        {"expert_down", 2048, 4096, 0, 0},
        {"small", 3 * std::max<int64_t>(be, 32), 37, 0, 0},
        {"one_block", std::max<int64_t>(be, 8), 5, 0, 0},
        {"padded+offset", 5 * std::max<int64_t>(be, 32), 300, 16,
         t == GgmlType::F32 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ? 4u
         : t == GgmlType::MXFP4 || t == GgmlType::IQ1_M                  ? 1u  // byte-aligned formats: odd offsets
                                                                          : 2u},
    };
    // The further formats: the Flash expert shapes and the small ones (q_a/q_b are Q8_0 there).
    if (is_new_type(t)) shapes.erase(shapes.begin(), shapes.begin() + 2);
    if (is_float_type(t)) shapes.push_back({"odd_len", 100, 77, 0, 0});
    if (t == GgmlType::Q8_0 || t == GgmlType::F16) shapes.push_back({"output_head", 4096, 129280, 0, 0});
    for (const Shape& sh : shapes) {
      Weights w = make_weights(t, sh.n_in, sh.n_out, sh.pad, sh.offset, rng);
      for (int64_t rows : row_counts) check_matmul(w, rows, rows == 2 || rows == 100, false, sh.label, rng, s);
      if (!is_float_type(t))
        for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{100}}) check_matmul(w, rows, rows == 7, true, sh.label, rng, s);
      delete w.dev;
    }
  }

  // matmul_grouped (the attention output's 8 groups) against one matmul per group: same values.
  std::vector<GgmlType> grouped;
  if (run_old && !moe_only) grouped = {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::F16};
  if (run_new) grouped.insert(grouped.end(), {GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::Q6_K, GgmlType::IQ2_XS});
  for (GgmlType t : grouped) {
    const int64_t G = 8, gin = 512, per = 64, rows = 3;
    Weights w = make_weights(t, gin, G * per, 0, 0, rng);
    std::vector<float> x(rows * G * gin);
    fill_acts(x.data(), rows, G * gin, G * gin, rng);
    Dev dx(x.size() * 4), dy1(rows * G * per * 4), dy2(rows * G * per * 4);
    ck(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    std::string err;
    try {
      cuda::matmul_grouped(w.mat(), G, dx.as<float>(), rows, dy1.as<float>(), 0, 0, false, s);
      for (int64_t g = 0; g < G; ++g) {
        cuda::DevMatrix m = w.mat();
        m.data += g * per * m.row_stride, m.n_out = per;
        cuda::matmul(m, dx.as<float>() + g * gin, rows, dy2.as<float>() + g * per, G * gin, G * per, false, s);
      }
      ck(cudaStreamSynchronize(s), "grouped");
    } catch (const Error& e) {
      err = e.what();
    }
    std::vector<float> y1(rows * G * per), y2(y1.size());
    ck(cudaMemcpy(y1.data(), dy1.p, y1.size() * 4, cudaMemcpyDeviceToHost), "y1");
    ck(cudaMemcpy(y2.data(), dy2.p, y2.size() * 4, cudaMemcpyDeviceToHost), "y2");
    int64_t bad = 0;
    for (size_t i = 0; i < y1.size(); ++i) bad += std::memcmp(&y1[i], &y2[i], 4) != 0;
    report("CASE", "matmul_grouped " + tname(t) + " 8 groups of 64x512 rows 3 = per-group matmul", bad, bad,
           "0 differing", err.empty() && bad == 0, err);
    delete w.dev;
  }

  // MoE: the Flash layer (IQ2_XXS gate/up, Q2_K down, 256 experts, top-6) and other formats.
  // (kept for the timing below)
  ExpertHost fg{}, fu{}, fd{};
  std::vector<std::pair<GgmlType, GgmlType>> moe_types;
  if (run_old) {
    fg = make_experts(GgmlType::IQ2_XXS, 4096, 2048, 256, rng);
    fu = make_experts(GgmlType::IQ2_XXS, 4096, 2048, 256, rng);
    fd = make_experts(GgmlType::Q2_K, 2048, 4096, 256, rng);
    for (int64_t rows : row_counts) check_moe(fg, fu, fd, rows, 6, rows == 7 ? 0.0f : 10.0f, false, rng, s);
    check_moe(fg, fu, fd, 1, 6, 10.0f, true, rng, s);
    if (!moe_only)
      moe_types = {{GgmlType::Q2_K, GgmlType::Q2_K}, {GgmlType::IQ2_XXS, GgmlType::IQ2_XXS}, {GgmlType::Q8_0, GgmlType::Q8_0},
                 {GgmlType::Q4_K, GgmlType::Q4_K}, {GgmlType::F16, GgmlType::BF16}};
  }
  if (run_new) {
    // Every further format as gate/up/down, then two of llama.cpp's mixes (Q4_K_M-style
    // Q4_K gate/up with Q6_K down; IQ3_XXS gate/up with IQ4_XS down).
    for (GgmlType t : kNewTypes) moe_types.push_back({t, t});
    moe_types.push_back({GgmlType::Q4_K, GgmlType::Q6_K});
    moe_types.push_back({GgmlType::IQ3_XXS, GgmlType::IQ4_XS});
  }
  for (auto [tg, td] : moe_types) {
    ExpertHost g = make_experts(tg, 1024, 512, 16, rng);
    ExpertHost u = make_experts(tg, 1024, 512, 16, rng);
    ExpertHost d = make_experts(td, 512, 1024, 16, rng);
    for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{100}}) check_moe(g, u, d, rows, 6, 10.0f, false, rng, s);
    if (!is_float_type(tg)) check_moe(g, u, d, 2, 6, 10.0f, true, rng, s);
    delete g.dev, delete u.dev, delete d.dev;
  }
  const double check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("correctness: %d cases, %d failed, %.1f s\n", g_cases, g_failures, check_s);

  // ---- timing: rows = 1, weights rotated through copies so that each run reads from HBM ----
  std::printf("\ntiming (rows=1, median of 30 after warm-up, CUDA events; GB/s = weight bytes / time)\n");
  {
    const size_t bytes = size_t{1} << 30;
    Dev a(bytes), b(bytes);
    const double ms = time_ms([&](int) { ck(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s), "memcpy"); }, s, 20);
    std::printf("TIME  %-44s %9.1f us  %7.0f GB/s read+write (%.0f GB/s read)\n", "cudaMemcpy D2D 1 GiB",
                ms * 1e3, 2.0 * bytes / ms / 1e6, bytes / ms / 1e6);
  }
  struct TShape {
    std::string label;
    GgmlType type;
    int64_t n_in, n_out;
  };
  std::vector<TShape> tshapes;
  if (run_old && !moe_only)
    tshapes = {TShape{"q_a q8_0 4096->1024", GgmlType::Q8_0, 4096, 1024},
                           TShape{"q_b q8_0 1024->32768", GgmlType::Q8_0, 1024, 32768},
                           TShape{"shared expert q8_0 4096->2048", GgmlType::Q8_0, 4096, 2048},
                           TShape{"output head q8_0 4096->129280", GgmlType::Q8_0, 4096, 129280},
                           TShape{"output head f16 4096->129280", GgmlType::F16, 4096, 129280},
                           TShape{"expert iq2_xxs 4096->2048", GgmlType::IQ2_XXS, 4096, 2048},
                           TShape{"expert q2_k 2048->4096", GgmlType::Q2_K, 2048, 4096},
                           TShape{"q4_k 4096->4096", GgmlType::Q4_K, 4096, 4096},
                           TShape{"bf16 4096->4096", GgmlType::BF16, 4096, 4096},
                           TShape{"f32 4096->1024", GgmlType::F32, 4096, 1024},
                           TShape{"hc mix f16 16384->24", GgmlType::F16, 16384, 24},
                           TShape{"kv q8_0 4096->512", GgmlType::Q8_0, 4096, 512},
                           TShape{"out_b q8_0 8192->4096", GgmlType::Q8_0, 8192, 4096},
                           TShape{"router f16 4096->256", GgmlType::F16, 4096, 256}};
  if (run_new)
    for (GgmlType t : kNewTypes) tshapes.push_back({"expert " + tname(t) + " 4096->2048", t, 4096, 2048});
  for (const TShape& ts : tshapes) {
    const size_t mbytes = row_bytes(traits(ts.type), ts.n_in) * ts.n_out;
    const int copies = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / mbytes + 1));
    Dev w(mbytes * copies), x(ts.n_in * 4), y(ts.n_out * 4);
    {
      Rng r2(rng.next());
      std::vector<uint8_t> host(mbytes);
      fill_weights(ts.type, host.data(), ts.n_out, row_bytes(traits(ts.type), ts.n_in), ts.n_in, r2);
      for (int c = 0; c < copies; ++c) ck(cudaMemcpy(w.as<uint8_t>() + c * mbytes, host.data(), mbytes, cudaMemcpyHostToDevice), "upload");
      std::vector<float> hx(ts.n_in);
      fill_acts(hx.data(), 1, ts.n_in, ts.n_in, r2);
      ck(cudaMemcpy(x.p, hx.data(), ts.n_in * 4, cudaMemcpyHostToDevice), "upload x");
    }
    auto run = [&](int i) {
      cuda::DevMatrix m{ts.type, w.as<uint8_t>() + (i % copies) * mbytes, ts.n_in, ts.n_out,
                        row_bytes(traits(ts.type), ts.n_in)};
      cuda::matmul(m, x.as<float>(), 1, y.as<float>(), 0, 0, false, s);
    };
    const double ms = time_ms(run, s), gms = graph_ms(run, s);
    std::printf("TIME  %-44s %9.1f us  %7.0f GB/s  (%.1f MB, %d copies)  in a graph: %7.1f us %6.0f GB/s\n", ts.label.c_str(),
                ms * 1e3, mbytes / ms / 1e6, mbytes / 1e6, copies, gms * 1e3, gms > 0 ? mbytes / gms / 1e6 : 0.0);
  }
  // Decode-like MoE timing: one token, 6 experts, a different routing every run.
  auto time_moe = [&](const ExpertHost& g, const ExpertHost& u, const ExpertHost& d, const std::string& label) {
    const int reps = 33;
    std::vector<int32_t> ids;
    std::vector<float> wts;
    random_routes(reps, 6, g.n_expert, rng, ids, wts);
    const int64_t n_embd = g.n_in;
    Dev di(ids.size() * 4), dw(wts.size() * 4), x(n_embd * 4), y(n_embd * 4);
    ck(cudaMemcpy(di.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "ids");
    ck(cudaMemcpy(dw.p, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice), "wts");
    std::vector<float> hx(n_embd);
    fill_acts(hx.data(), 1, n_embd, n_embd, rng);
    for (auto& v : hx) v *= 0.2f;
    ck(cudaMemcpy(x.p, hx.data(), n_embd * 4, cudaMemcpyHostToDevice), "x");
    auto run = [&](int i) {
      cuda::moe_experts(g.dx(), u.dx(), d.dx(), x.as<float>(), di.as<int32_t>() + (i % reps) * 6,
                        dw.as<float>() + (i % reps) * 6, 1, 6, 10.0f, y.as<float>(), false, s);
    };
    const double ms = time_ms(run, s), gms = graph_ms(run, s);
    const double wbytes = 6.0 * (2.0 * g.expert_stride + d.expert_stride);
    std::printf("TIME  %-44s %9.1f us  %7.0f GB/s  (%.1f MB of expert weights per token)  in a graph: %7.1f us %6.0f GB/s\n",
                label.c_str(), ms * 1e3, wbytes / ms / 1e6, wbytes / 1e6, gms * 1e3, gms > 0 ? wbytes / gms / 1e6 : 0.0);
  };
  if (run_old) {
    time_moe(fg, fu, fd, "moe iq2_xxs gate/up + q2_k down, 6 of 256");
    delete fg.dev, delete fu.dev, delete fd.dev;
  }
  if (run_new)  // 32 experts of the Flash shape: several hundred MB, beyond the L2 cache
    for (auto [tg, td] : {std::pair{GgmlType::MXFP4, GgmlType::MXFP4}, std::pair{GgmlType::Q4_K, GgmlType::Q6_K},
                          std::pair{GgmlType::IQ3_XXS, GgmlType::IQ4_XS}}) {
      ExpertHost g = make_experts(tg, 4096, 2048, 32, rng);
      ExpertHost u = make_experts(tg, 4096, 2048, 32, rng);
      ExpertHost d = make_experts(td, 2048, 4096, 32, rng);
      time_moe(g, u, d, "moe " + tname(tg) + " gate/up + " + tname(td) + " down, 6 of 32");
      delete g.dev, delete u.dev, delete d.dev;
    }
  ck(cudaStreamDestroy(s), "stream");
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("%d cases, %d failed; total %.1f s\n", g_cases, g_failures, total_s);
  return g_failures ? 1 : 0;
}
