#pragma once
// Importance matrices in llama.cpp's GGUF imatrix format (what llama-imatrix writes and
// llama-quantize reads since 2025):
//   general.type = "imatrix"; imatrix.datasets (array of strings); imatrix.chunk_count (u32);
//   imatrix.chunk_size (u32);
//   per weight tensor W with ne0 columns and n_mat matrices (1 for a 2-D weight, the expert
//   count for a 3-D routed-expert tensor): "<W>.in_sum2" F32 [ne0, n_mat] = per matrix the sum
//   over its input rows of x[j]^2, and "<W>.counts" F32 [1, n_mat] = the number of those rows.
// The importance weights a quantizer gets are in_sum2 / count per matrix (all ones for a matrix
// whose count is 0), as llama-quantize computes them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ds4::quantize {

struct ImatrixEntry {
  int64_t ne0 = 0;
  std::vector<double> sums;     // n_mat * ne0 (accumulated in double; stored as f32)
  std::vector<double> counts;   // n_mat
  int64_t n_mat() const { return static_cast<int64_t>(counts.size()); }
};

struct Imatrix {
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;
  uint32_t chunk_size = 0;
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name

  // Importance weights of matrix `mat` of `tensor` (ne0 floats), or empty when the file has
  // no entry for it. Throws when the entry's shape does not fit ne0 / n_mat.
  std::vector<float> weights(const std::string& tensor, int64_t mat, int64_t ne0, int64_t n_mat) const;
  // Adds another collection's sums and counts (same shapes; throws naming the tensor otherwise).
  void merge(const Imatrix& other);
};

// Written through gguf::Writer: "<path>.tmp", renamed on success (atomic).
void write_imatrix(const std::string& path, const Imatrix& m);
// Throws ds4::Error naming the file and the problem: not GGUF (or truncated), general.type not
// "imatrix", missing metadata, a sum without counts, wrong types or shapes, non-finite or
// negative values.
Imatrix read_imatrix(const std::string& path);

}  // namespace ds4::quantize
