#include "gguf/tokenizer/python_json.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace moetier {
namespace {

using nlohmann::ordered_json;

// Each expected text is what python3 prints for repr(x) / json.dumps(x).
TEST(PythonJson, FloatsAreWrittenAsPythonRepr) {
  const struct {
    double value;
    const char* python;
  } kCases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {1.5e-05, "1.5e-05"},
      {0.0001, "0.0001"},
      {0.00012, "0.00012"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345.6, "123456789012345.6"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},
      {-0.0, "-0.0"},
      {-2.5, "-2.5"},
      {3.141592653589793, "3.141592653589793"},
      {100.0, "100.0"},
      {1e22, "1e+22"},
      {2.5e-07, "2.5e-07"},
      {0.3, "0.3"},
      {1.0 / 3.0, "0.3333333333333333"},
      {12345.678, "12345.678"},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(PythonFloatRepr(c.value), c.python);
    EXPECT_EQ(PythonJsonDumps(ordered_json(c.value)), c.python);
  }
}

TEST(PythonJson, NonFiniteFloatsAsJsonDumpsWritesThem) {
  const ordered_json values = ordered_json::array(
      {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
       -std::numeric_limits<double>::infinity()});
  EXPECT_EQ(PythonJsonDumps(values), "[NaN, Infinity, -Infinity]");
  EXPECT_EQ(PythonStr(ordered_json(std::numeric_limits<double>::infinity())), "inf");
}

TEST(PythonJson, ContainersKeepKeyOrderAndPythonSeparators) {
  // json.dumps({"a": [1, 2.0, True, None], "é": ..., "n": {}, "l": []}, ensure_ascii=False)
  ordered_json value = ordered_json::object();
  value["a"] = ordered_json::array({1, 2.0, true, nullptr});
  value["\xC3\xA9"] = "\"q\" \\ \n\r\t\b\f\x01\x1f\x7f \xE4\xB8\x96\xE7\x95\x8C";
  value["n"] = ordered_json::object();
  value["l"] = ordered_json::array();
  EXPECT_EQ(PythonJsonDumps(value),
            "{\"a\": [1, 2.0, true, null], \"\xC3\xA9\": \"\\\"q\\\" \\\\ \\n\\r\\t\\b\\f"
            "\\u0001\\u001f\x7f \xE4\xB8\x96\xE7\x95\x8C\", \"n\": {}, \"l\": []}");
  EXPECT_EQ(PythonJsonDumps(ordered_json::array({-7, 18446744073709551615ull})),
            "[-7, 18446744073709551615]");
}

TEST(PythonJson, KeyOrderIsTheInsertionOrderNotSorted) {
  const ordered_json parsed = ordered_json::parse(R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
  EXPECT_EQ(PythonJsonDumps(parsed), R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
}

TEST(PythonJson, StrOfScalarsIsPythonStr) {
  EXPECT_EQ(PythonStr(ordered_json("plain \"text\"")), "plain \"text\"");
  EXPECT_EQ(PythonStr(ordered_json(true)), "True");
  EXPECT_EQ(PythonStr(ordered_json(false)), "False");
  EXPECT_EQ(PythonStr(ordered_json(nullptr)), "None");
  EXPECT_EQ(PythonStr(ordered_json(42)), "42");
  EXPECT_EQ(PythonStr(ordered_json(0.5)), "0.5");
  EXPECT_EQ(PythonStr(ordered_json(1e-07)), "1e-07");
}

}  // namespace
}  // namespace moetier
