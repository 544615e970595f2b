// Reading the test vectors of tests/data/vectors (see its README.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gguf_edit.h"

namespace moetier::testing {

// M.ids: comma-separated token ids.
inline std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  std::string part;
  while (std::getline(in, part, ',')) ids.push_back(std::stoi(part));
  return ids;
}

// Raw little-endian float32.
inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

struct RowError {
  double max_abs = 0.0;  // max |a - b| over the row
  double range = 0.0;    // max - min of the expected row
  double relative() const { return range > 0.0 ? max_abs / range : max_abs; }
};

inline RowError CompareRow(const float* actual, const float* expected, size_t n) {
  RowError e;
  float lo = expected[0];
  float hi = expected[0];
  for (size_t i = 0; i < n; ++i) {
    lo = std::min(lo, expected[i]);
    hi = std::max(hi, expected[i]);
    e.max_abs = std::max(e.max_abs, std::abs(static_cast<double>(actual[i]) - expected[i]));
  }
  e.range = static_cast<double>(hi) - lo;
  return e;
}

}  // namespace moetier::testing
