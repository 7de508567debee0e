#pragma once
// Small mixed-precision DeepSeek V4 files for the streaming tests (written by the model tests'
// synthetic writer): layer experts in F32, Q8_0 and F16, each expert > 4 KiB so hole punching
// frees whole blocks.
#include <cstdint>
#include <string>
#include <vector>

#include "synthetic_model.h"

namespace ds4::test {

SynthConfig stream_config(uint32_t seed = 3);
// A fresh file under the temp directory (any packed file next to it removed).
std::string write_stream_model(const std::string& name, const SynthConfig& c);
std::vector<uint8_t> read_file(const std::string& path);
std::string tmp_file(const std::string& name);

}  // namespace ds4::test
