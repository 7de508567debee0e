#pragma once
// Scalar definitions of the quantization-aware activation steps of DeepSeek V4 (spec §5.2-5.4)
// and of the RoPE/YaRN frequency table (spec §5.1). They are the single source of truth for
// every backend: the CPU backend calls them directly, a GPU backend must reproduce them
// bit for bit and is tested against them.
#include <cmath>
#include <cstdint>
#include <vector>

namespace ds4::compute {

// e^x and log(1+x) of a float as every backend computes them: in double, rounded to float once.
// (libm's expf/log1pf differ between libraries and from a GPU's, in ~1 of 5000 arguments here;
// rounding the double result agrees everywhere except within ~1e-9 ulp of a float midpoint, so
// CPU and GPU results stay bit-identical.)
inline float exp_f(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float log1p_f(float x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }

// Nearest finite FP8 E4M3 value (codes: e=1..15 -> (1+m/8)*2^(e-7), e=0 -> m*2^-9, max 448),
// ties to the even code. |x| > 448 saturates to 448 (callers clamp first anyway).
float e4m3_round(float x);
// Nearest FP4 E2M1 value from {0, .5, 1, 1.5, 2, 3, 4, 6} (with sign), ties to the even code.
float e2m1_round(float x);

// FP8 round trip of x[0..n) in blocks of `block` (64 for the KV path): per block
// s = 2^ceil(log2(max(amax, 1e-4)/448)); x <- e4m3(clamp(x/s, +-448))*s.
// A trailing partial block is treated as its own block (only tiny test shapes have one).
void fp8_e4m3_round_trip(float* x, int64_t n, int64_t block = 64);

// FP4 round trip in blocks of 32: s = 2^ceil(log2(max(amax, 6*2^-126)/6)).
void fp4_e2m1_round_trip(float* x, int64_t n, int64_t block = 32);

// In-place orthonormal Walsh-Hadamard transform of n (a power of two) values:
// butterflies with strides 1, 2, 4, ... then scaling by n^-1/2.
void hadamard_transform(float* x, int64_t n);

struct RopeParams {
  int64_t n_rot = 64;        // rotated dims (the head's tail); pairs are adjacent elements
  double freq_base = 10000;
  // YaRN (used when yarn_factor > 1): frequencies blend between f and f/factor over [low, high].
  double yarn_factor = 1;
  double yarn_orig_ctx = 0;
  double yarn_beta_fast = 32;
  double yarn_beta_slow = 1;
};

// YaRN correction range (spec §5.1): low = max(0, floor(corr(beta_fast))),
// high = min(n_rot-1, ceil(corr(beta_slow))), corr(b) = n_rot*ln(orig/(b*2pi)) / (2 ln base).
struct YarnRange {
  double low, high;
};
YarnRange yarn_range(const RopeParams& p);

// f_k for k = 0 .. n_rot/2-1, in double (angles are formed as pos * f_k, see rope_tail).
std::vector<double> rope_frequencies(const RopeParams& p);

// Routes the hyper-connection mix (spec §6.2 steps 3-5) into pre, post and the
// Sinkhorn-normalized comb matrix (n_hc x n_hc, row-major M[i][j]).
// mix has (2 + n_hc) * n_hc entries: pre logits, post logits, comb logits.
void hc_split_mix(const float* mix, const float* scale /*3*/, const float* base, int n_hc, int sinkhorn_iters,
                  float eps, float* pre, float* post, float* comb);

}  // namespace ds4::compute
