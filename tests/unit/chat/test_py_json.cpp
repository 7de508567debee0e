// Python-compatible JSON text. Expected strings are what CPython 3.11 prints for
// repr(float) and json.dumps(value, ensure_ascii=False) (run by hand with python3 -c;
// the values are written below as literals).
#include "chat/py_json.h"

#include <gtest/gtest.h>

namespace ds4::chat {
namespace {

TEST(ChatPyJson, FloatReprMatchesCPython) {
  struct Case {
    double v;
    const char* want;
  } cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {0.5, "0.5"},
      {100.0, "100.0"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {9999999999999998.0, "9999999999999998.0"},
      {1234567890123456.7, "1234567890123456.8"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {1e-7, "1e-07"},
      {2.5e-05, "2.5e-05"},
      {1.5e-07, "1.5e-07"},
      {-12.75, "-12.75"},
      {0.1, "0.1"},
      {1.0 / 3.0, "0.3333333333333333"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {1e22, "1e+22"},
      {3.0e-4, "0.0003"},
  };
  for (const auto& c : cases) EXPECT_EQ(py_float_repr(c.v), c.want) << c.want;
}

TEST(ChatPyJson, DumpsMatchesCPythonEnsureAsciiFalse) {
  Json v = Json::parse(R"({"a": "x\u0001\u001f\u007f\"\\\n\t\r\b\f é 🚀 \u2028",
                          "b": [1, -2, true, false, null, {}], "c": {}, "d": []})");
  // CPython keeps DEL (0x7f) and U+2028 raw and escapes other controls as \u00XX.
  std::string want =
      "{\"a\": \"x\\u0001\\u001f\x7f\\\"\\\\\\n\\t\\r\\b\\f é 🚀 \u2028\", "
      "\"b\": [1, -2, true, false, null, {}], \"c\": {}, \"d\": []}";
  EXPECT_EQ(py_json_dumps(v), want);
}

TEST(ChatPyJson, KeyOrderIsInsertionOrder) {
  Json v = Json::parse(R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
  EXPECT_EQ(py_json_dumps(v), R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
}

TEST(ChatPyJson, LargeIntegers) {
  EXPECT_EQ(py_json_dumps(Json::parse("[-9223372036854775808, 18446744073709551615]")),
            "[-9223372036854775808, 18446744073709551615]");
}

}  // namespace
}  // namespace ds4::chat
