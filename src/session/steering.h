#pragma once
// Internal: directional steering (docs/FORMATS.md "Steering direction file").
//
// A direction file holds, for a range of layers, one unit vector for the residual stream after
// the attention sublayer and one after the FFN sublayer. Steering adds attn_scale * v_attn to
// every hyper-connection stream after the attention sublayer of each covered layer, and
// ffn_scale * v_ffn after its FFN sublayer (backend `add` only, so it runs on any backend).
// The vectors are built from the mean over the n_hc streams (see CollectHook): adding s*v to
// every stream moves that mean by exactly s*v, so the scale is in the units the direction was
// measured in.
#include <cstdint>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "model/deepseek4/model.h"

namespace ds4::steer {

inline constexpr char kMagic[8] = {'D', 'S', '4', 'S', 'T', 'E', 'E', 'R'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 64;

enum class Position : uint32_t { Last = 0, Mean = 1 };
const char* to_string(Position p);

struct Directions {
  std::string model_id;        // EngineInfo::model_id (16 hex digits) of the model it was built on
  uint32_t model_layers = 0;   // that model's n_layer
  uint32_t first = 0;          // first covered layer
  uint32_t count = 0;          // covered layers: first .. first+count-1
  uint32_t dim = 0;            // n_embd
  Position position = Position::Last;
  uint32_t n_positive = 0, n_negative = 0;  // prompts each side (informational)
  std::vector<float> attn, ffn;  // count * dim each; layer first+i at [i*dim, (i+1)*dim)

  // The vector for layer il after `which`, or null when the file does not cover il.
  const float* vec(int64_t il, model::deepseek4::Sublayer which) const;
};

std::vector<uint8_t> encode(const Directions& d);
// Validates everything (magic, version, header size, model id, layer range, size, checksum,
// finite values). Throws ds4::Error naming `where`, the byte offset and the failed check.
Directions decode(std::span<const uint8_t> bytes, const std::string& where);
Directions load(const std::string& path);
std::vector<uint8_t> read_file(const std::string& path);
void save(const std::string& path, const Directions& d);  // path.tmp, then renamed
// Throws unless `d` was built for this model (identity, layer count, width).
void check_model(const Directions& d, const std::string& model_id, int64_t n_layer, int64_t dim,
                 const std::string& where);

// Adds the scaled directions to the residual streams (see the header comment). Scale 0 on a
// sublayer does nothing at all there, so it is bit-identical to no hook.
class SteerHook : public model::deepseek4::LayerHook {
 public:
  SteerHook(const Directions& d, int n_hc, float attn_scale, float ffn_scale)
      : d_(d), n_hc_(n_hc), attn_(attn_scale), ffn_(ffn_scale) {}
  void after_sublayer(compute::Backend& be, int64_t il, model::deepseek4::Sublayer which, float* X, int64_t rows,
                      int64_t p0) override;

 private:
  const Directions& d_;
  int n_hc_;
  float attn_, ffn_;
  std::vector<float> tile_;
};

// Records, per layer of [first, first+count) and sublayer, the mean over the n_hc streams of
// the residual after the sublayer: of the prompt's last token (Position::Last) or averaged
// over its tokens (Position::Mean). Call begin() before a prompt and end() after it; sums()
// then holds the sum over prompts.
class CollectHook : public model::deepseek4::LayerHook {
 public:
  CollectHook(int64_t first, int64_t count, int64_t dim, int n_hc, Position pos);
  void after_sublayer(compute::Backend& be, int64_t il, model::deepseek4::Sublayer which, float* X, int64_t rows,
                      int64_t p0) override;
  void begin();
  void end();
  int64_t prompts() const { return prompts_; }
  // [sublayer 0 attn / 1 ffn][layer i][dim] sums over prompts
  const std::vector<double>& sums(model::deepseek4::Sublayer which) const {
    return which == model::deepseek4::Sublayer::Attention ? sum_[0] : sum_[1];
  }

 private:
  int64_t first_, count_, dim_;
  int n_hc_;
  Position pos_;
  std::vector<double> cur_[2], sum_[2];
  int64_t rows_seen_[2] = {0, 0};
  int64_t prompts_ = 0;
  std::vector<float> host_;
};

// Unit directions from the positive and negative sums: normalize(mean_pos - mean_neg) per
// layer and sublayer. Throws when a difference is zero (the two sets gave identical states).
Directions directions_from(const CollectHook& pos, const CollectHook& neg, const std::string& model_id,
                           uint32_t model_layers, uint32_t first, uint32_t count, uint32_t dim, Position p);

}  // namespace ds4::steer

namespace ds4 {
class Engine;
}

namespace ds4::steer {

// Runs every prompt (token ids) through the engine's model from an empty state, collects the
// residual streams of layers [first, first+count) and returns the unit directions
// normalize(mean(positive) - mean(negative)). DeepSeek V4 engines only.
Directions build(const Engine& engine, const std::vector<std::vector<int32_t>>& positive,
                 const std::vector<std::vector<int32_t>>& negative, int64_t first, int64_t count, Position pos);

}  // namespace ds4::steer

namespace ds4::steer {

// Sum of the model's natural-log probabilities of tokens[1..n) given their prefixes, in one
// batched evaluation from an empty state, with the engine's steering file at these scales
// (0, 0: unsteered). Returns {sum, n-1}. For measuring a direction's effect (steer-eval).
std::pair<double, int64_t> score_text(const Engine& engine, std::span<const int32_t> tokens, float attn, float ffn);

}  // namespace ds4::steer
