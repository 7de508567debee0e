#pragma once
// The further weight formats of the CPU engine on the staged GEMV / MoE kernels (internal to the
// CUDA backend): Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4 (gemv_formats_legacy.cuh), Q3_K, Q5_K, Q6_K, IQ4_XS
// (gemv_formats_k.cuh), IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (gemv_formats_iq.cuh).
// gemv.cu, gemv_moe.cu and cuda_dequant.cu reach them through with_ext_format().
#include "compute/cuda/gemv_formats_iq.cuh"
#include "compute/cuda/gemv_formats_k.cuh"
#include "compute/cuda/gemv_formats_legacy.cuh"
#include "quant/types.h"

namespace ds4::cuda::gemv_detail {

// True for the types of these headers.
inline bool ext_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::Q3_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: return true;
    default: return false;
  }
}

// Calls fn(F{}) with the format struct of `t` after making its device tables ready in this
// translation unit (host side, before any launch); false when `t` is not one of them.
template <class Fn>
bool with_ext_format(GgmlType t, Fn&& fn) {
  if (!ext_format(t)) return false;
  ext_check_tables();
  switch (t) {
    case GgmlType::Q4_0: fn(FmtQ4_0{}); return true;
    case GgmlType::Q5_0: fn(FmtQ5_0{}); return true;
    case GgmlType::Q5_1: fn(FmtQ5_1{}); return true;
    case GgmlType::IQ4_NL: fn(FmtIQ4_NL{}); return true;
    case GgmlType::MXFP4: fn(FmtMXFP4{}); return true;
    case GgmlType::Q3_K: fn(FmtQ3_K{}); return true;
    case GgmlType::Q5_K: fn(FmtQ5_K{}); return true;
    case GgmlType::Q6_K: fn(FmtQ6_K{}); return true;
    case GgmlType::IQ4_XS: fn(FmtIQ4_XS{}); return true;
    default: break;
  }
  ext_upload_tables();  // the codebook formats
  switch (t) {
    case GgmlType::IQ1_S: fn(FmtIQ1_S{}); return true;
    case GgmlType::IQ1_M: fn(FmtIQ1_M{}); return true;
    case GgmlType::IQ2_XS: fn(FmtIQ2_XS{}); return true;
    case GgmlType::IQ2_S: fn(FmtIQ2_S{}); return true;
    case GgmlType::IQ3_XXS: fn(FmtIQ3_XXS{}); return true;
    case GgmlType::IQ3_S: fn(FmtIQ3_S{}); return true;
    default: return false;
  }
}

}  // namespace ds4::cuda::gemv_detail
