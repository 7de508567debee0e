#pragma once
// Expert profile (how often each routed expert is selected and its routing-weight mass, per
// layer) and prune masks (which experts the engine removes from routing). Both are small JSON
// files (docs/FORMATS.md), written atomically (temporary file + rename).
//
// Hash-routed layers: their experts are fixed per token id (tid2eid), so removing one would
// leave those tokens with fewer than k experts or need a re-mapping the model was never trained
// with. Masks therefore never prune an expert of a hash layer: `make_mask` keeps all of them,
// and `check_mask` rejects a mask that prunes one.
#include <cstdint>
#include <string>
#include <vector>

namespace ds4::quantize {

struct ModelKey {  // what a profile / mask must agree on with the model it is used with
  std::string architecture, name;
  int64_t n_layer = 0, n_expert = 0, n_expert_used = 0;
  std::vector<bool> hash_layer;  // n_layer
};

struct ExpertProfile {
  ModelKey model;
  uint64_t tokens = 0;  // token evaluations counted (each token routes once per layer)
  std::vector<std::vector<uint64_t>> count;  // [layer][expert] selections
  std::vector<std::vector<double>> weight;   // [layer][expert] sum of routing weights
  void reset(const ModelKey& k);
  void merge(const ExpertProfile& o);  // same model key (throws otherwise)
};

void write_profile(const std::string& path, const ExpertProfile& p);
ExpertProfile read_profile(const std::string& path);

struct PruneMask {
  ModelKey model;
  std::string method;  // e.g. "keep-fraction 0.75 by weight", "random 0.5 seed 1"
  std::vector<std::vector<uint8_t>> pruned;  // [layer][expert] 1 = removed from routing
  int64_t pruned_count() const;
};

// Per learned-routing layer: experts ranked by weight mass (then selection count, then lower
// id), keeping the top ceil(keep_fraction * n_expert) (keep_fraction in (0, 1]) or, with
// min_share > 0, those whose share of the layer's weight mass is >= min_share; never fewer than
// n_expert_used. Hash layers keep every expert.
PruneMask make_mask(const ExpertProfile& p, double keep_fraction, double min_share);
// Same count per layer as make_mask(keep_fraction), experts drawn at random (the baseline).
PruneMask random_mask(const ModelKey& k, double keep_fraction, uint64_t seed);

void write_mask(const std::string& path, const PruneMask& m);
PruneMask read_mask(const std::string& path);
// Throws ds4::Error naming `what` when the mask is for another model (architecture, name,
// layer / expert counts), prunes an expert of a hash layer, or leaves a layer fewer than
// n_expert_used experts.
void check_mask(const PruneMask& m, const ModelKey& model, const std::string& what);

// Writes bytes to path atomically: path.tmp, fsync, rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace ds4::quantize
