// The ds4-gguf tool and the fixture generator, run as programs:
//  * `inspect --json` on the committed fixture is valid JSON and matches llama.cpp's reading of it;
//  * --help lists the registered subcommands, --version prints the build identity;
//  * errors go to stderr with exit status 1;
//  * make_gguf_fixture regenerates the committed fixtures byte for byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gguf_bytes.h"
#include "ggml_gguf.h"

namespace ds4::gguf {
namespace {

using ::testing::HasSubstr;

struct Proc {
  int status = -1;
  std::string out;
};

// Runs a shell command, capturing stdout (stderr too when `with_stderr`).
Proc run(const std::string& cmd, bool with_stderr = false) {
  Proc r;
  std::FILE* p = popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const std::string kTool = std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf";
const std::string kTiny = std::string(DS4_FIXTURES_DIR) + "/gguf/tiny.gguf";

// ggml's view of metadata key k as JSON in the same shape inspect --json uses.
nlohmann::json ggml_json_value(const test::GgmlGguf& g, test::gguf_context* c, int64_t k) {
  auto scalar = [&](int type, const void* p, size_t i) -> nlohmann::json {
    switch (type) {
      case 0: return static_cast<const uint8_t*>(p)[i];
      case 1: return static_cast<const int8_t*>(p)[i];
      case 2: return static_cast<const uint16_t*>(p)[i];
      case 3: return static_cast<const int16_t*>(p)[i];
      case 4: return static_cast<const uint32_t*>(p)[i];
      case 5: return static_cast<const int32_t*>(p)[i];
      case 6: return static_cast<double>(static_cast<const float*>(p)[i]);
      case 7: return static_cast<const int8_t*>(p)[i] != 0;
      case 10: return static_cast<const uint64_t*>(p)[i];
      case 11: return static_cast<const int64_t*>(p)[i];
      case 12: return static_cast<const double*>(p)[i];
    }
    return nullptr;
  };
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  int type = g.get_kv_type(c, k);
  nlohmann::json out{{"key", g.get_key(c, k)}, {"type", names[type]}};
  if (type == 8) {
    out["value"] = g.get_val_str(c, k);
  } else if (type == 9) {
    int et = g.get_arr_type(c, k);
    auto items = nlohmann::json::array();
    for (size_t i = 0; i < g.get_arr_n(c, k); ++i)
      items.push_back(et == 8 ? nlohmann::json(g.get_arr_str(c, k, i)) : scalar(et, g.get_arr_data(c, k), i));
    out["value"] = {{"elem_type", names[et]}, {"items", items}};
  } else {
    out["value"] = scalar(type, g.get_val_data(c, k), 0);
  }
  return out;
}

TEST(GgufInspectJson, MatchesLlamaCppReadingOfTheFixture) {
  Proc r = run(kTool + " inspect " + kTiny + " --json");
  ASSERT_EQ(r.status, 0);
  nlohmann::json j = nlohmann::json::parse(r.out);  // throws (fails the test) if not valid JSON

  test::GgmlGguf g;
  auto* c = g.init_from_file(kTiny.c_str(), test::gguf_init_params{true, nullptr});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(j["version"], g.get_version(c));
  EXPECT_EQ(j["alignment"], g.get_alignment(c));
  EXPECT_EQ(j["data_offset"], g.get_data_offset(c));
  EXPECT_EQ(j["file_size"], test::read_all(kTiny).size());
  ASSERT_EQ(j["metadata"].size(), static_cast<size_t>(g.get_n_kv(c)));
  for (int64_t k = 0; k < g.get_n_kv(c); ++k) EXPECT_EQ(j["metadata"][k], ggml_json_value(g, c, k)) << k;
  ASSERT_EQ(j["tensors"].size(), static_cast<size_t>(g.get_n_tensors(c)));
  for (int64_t i = 0; i < g.get_n_tensors(c); ++i) {
    const auto& t = j["tensors"][i];
    EXPECT_EQ(t["name"], g.get_tensor_name(c, i));
    EXPECT_EQ(t["type_id"], g.get_tensor_type(c, i));
    EXPECT_EQ(t["offset"], g.get_tensor_offset(c, i));
    EXPECT_EQ(t["file_offset"], g.get_data_offset(c) + g.get_tensor_offset(c, i));
    EXPECT_EQ(t["bytes"], g.get_tensor_size(c, i));
    const int64_t* ne = g.get_tensor_ne(c, i);
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(d < t["shape"].size() ? t["shape"][d].get<int64_t>() : 1, ne[d]);
  }
  g.free(c);
}

TEST(GgufInspectText, AbbreviatesLongArrays) {
  Proc r = run(kTool + " inspect " + kTiny);
  ASSERT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("GGUF v3"));
  EXPECT_THAT(r.out, HasSubstr("array[string](16)"));
  EXPECT_THAT(r.out, HasSubstr("... 8 more]"));
  EXPECT_THAT(r.out, HasSubstr("blk.0.attn_q_a.weight"));
}

TEST(GgufTool, HelpVersionAndErrors) {
  Proc help = run(kTool + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("inspect"));
  Proc ver = run(kTool + " --version");
  EXPECT_EQ(ver.status, 0);
  for (const char* s : {"ds4-gguf ", "compiler: ", "build type: ", "CPU AVX2: "}) EXPECT_THAT(ver.out, HasSubstr(s));

  test::TempDir dir;
  std::string bad = dir.file("bad.gguf");
  test::write_all(bad, std::vector<uint8_t>{'G', 'G', 'U', 'F', 2, 0, 0, 0});
  Proc err = run(kTool + " inspect " + bad, true);
  EXPECT_EQ(err.status, 1);
  EXPECT_THAT(err.out, HasSubstr(bad + ": offset 4: unsupported GGUF version 2"));
  Proc out_only = run(kTool + " inspect " + bad);
  EXPECT_EQ(out_only.out, "");  // the message went to stderr
  EXPECT_EQ(run(kTool + " nosuchcommand").status, 1);
  EXPECT_EQ(run(kTool + " inspect").status, 1);
}

TEST(GgufFixture, GeneratorReproducesCommittedFiles) {
  test::TempDir dir;
  ASSERT_EQ(run(std::string(DS4_BUILD_DIR) + "/bin/make_gguf_fixture " + dir.path.string()).status, 0);
  for (const char* name : {"tiny.gguf", "nested.gguf"}) {
    auto committed = test::read_all(std::string(DS4_FIXTURES_DIR) + "/gguf/" + name);
    EXPECT_FALSE(committed.empty());
    EXPECT_TRUE(test::read_all(dir.file(name)) == committed) << name << " differs from make_gguf_fixture's output";
  }
}

}  // namespace
}  // namespace ds4::gguf
