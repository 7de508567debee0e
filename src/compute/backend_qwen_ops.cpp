// Default bodies of the qwen35moe backend ops (backend.h): a backend that does not implement
// one reports it by name instead of computing anything.
#include "compute/backend.h"
#include "core/error.h"

namespace ds4::compute {

void Backend::not_implemented(const char* op) const {
  fail("op {} is not implemented on the {} backend (qwen35moe runs on the CPU backend only so far)", op, name());
}

void Backend::copy_rows(float*, int64_t, const float*, int64_t, int64_t, int64_t) { not_implemented("copy_rows"); }
void Backend::rope_neox(float*, int64_t, int64_t, int64_t, std::span<const double>, int64_t) {
  not_implemented("rope_neox");
}
void Backend::mul_sigmoid(float*, const float*, int64_t) { not_implemented("mul_sigmoid"); }
void Backend::sigmoid(float*, int64_t) { not_implemented("sigmoid"); }
void Backend::attention_causal(const float*, int64_t, int64_t, int64_t, int64_t, const float*, const float*, int64_t,
                               float, float*) {
  not_implemented("attention_causal");
}
void Backend::moe_route_softmax(const float*, int64_t, int64_t, int64_t, bool, int32_t*, float*) {
  not_implemented("moe_route_softmax");
}
void Backend::conv1d_silu(const float*, int64_t, int64_t, int64_t, const float*, float*, float*) {
  not_implemented("conv1d_silu");
}
void Backend::gdn_gates(const float*, const float*, const float*, const float*, int64_t, int64_t, float*, float*) {
  not_implemented("gdn_gates");
}
void Backend::gated_delta_rule(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                               float, float*, float*) {
  not_implemented("gated_delta_rule");
}

}  // namespace ds4::compute
