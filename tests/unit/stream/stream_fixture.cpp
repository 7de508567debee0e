#include "stream_fixture.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include "common/test_paths.h"

namespace ds4::test {

SynthConfig stream_config(uint32_t seed) {
  SynthConfig c;
  c.n_layer = 4;
  c.n_embd = 64;
  c.expert_ff = 64;
  c.n_expert = 8;
  c.n_expert_used = 2;
  c.n_hash_layers = 1;
  c.compress_ratios = {0, 4, 0, 4};
  c.expert_gate_up_type = {GgmlType::F32, GgmlType::Q8_0, GgmlType::F16, GgmlType::Q8_0};
  c.expert_down_type = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::F32};
  c.seed = seed;
  return c;
}

std::string tmp_file(const std::string& name) {
  return (ds4::test::test_tmp_dir() / ("ds4_stream_" + name)).string();
}

std::string write_stream_model(const std::string& name, const SynthConfig& c) {
  const std::string p = tmp_file(name + ".gguf");
  std::filesystem::remove(p + ".experts");
  write_synthetic_model(p, c);
  return p;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace ds4::test
