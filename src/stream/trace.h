#pragma once
// Routing traces (`--trace-routing FILE`): what the router chose, token by token and layer by
// layer, plus the lookahead guesses made, for offline replay (replay.h). Text, one record a
// line (docs/FORMATS.md, "Routing trace"):
//
//   # ds4-routing-trace v1 layers=43 experts=256 k=6 hash_layers=3
//   r POS LAYER E0 .. E(k-1)     routing of the token at position POS
//   h POS LAYER G0 .. Gn         lookahead guesses for LAYER made while evaluating POS
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace ds4::stream {

struct TraceHeader {
  int64_t n_layer = 0, n_expert = 0, k = 0, n_hash_layers = 0;
};

struct TraceRecord {
  bool hint = false;
  int64_t pos = 0, layer = 0;
  std::vector<int32_t> experts;
};

class TraceWriter {
 public:
  TraceWriter(const std::string& path, const TraceHeader& h);  // throws ds4::Error
  ~TraceWriter();
  void routing(int64_t pos, int64_t layer, std::span<const int32_t> experts);
  void hint(int64_t pos, int64_t layer, std::span<const int32_t> experts);

 private:
  void line(char tag, int64_t pos, int64_t layer, std::span<const int32_t> experts);
  std::string path_;
  std::FILE* f_ = nullptr;
};

struct Trace {
  TraceHeader header;
  std::vector<TraceRecord> records;  // in file order
};

// Parses and validates (ids in range, k ids per routing line); ds4::Error names file and line.
Trace read_trace(const std::string& path);
void write_trace(const std::string& path, const Trace& t);

}  // namespace ds4::stream
