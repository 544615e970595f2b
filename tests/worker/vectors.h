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

// max |a - b| / (max - min of b) over every row; infinite where a row of a
// holds a NaN, so NaN logits never pass.
inline double WorstRowError(const std::vector<float>& a, const std::vector<float>& b,
                            size_t n_vocab) {
  double worst = 0.0;
  for (size_t row = 0; row < b.size() / n_vocab; ++row) {
    const float* pa = a.data() + row * n_vocab;
    const float* pb = b.data() + row * n_vocab;
    const auto [lo, hi] = std::minmax_element(pb, pb + n_vocab);
    double max_abs = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const double d = std::fabs(static_cast<double>(pa[i]) - pb[i]);
      max_abs = std::isnan(d) ? INFINITY : std::max(max_abs, d);
    }
    worst = std::max(worst, max_abs / (static_cast<double>(*hi) - *lo));
  }
  return worst;
}

// How rows of n_vocab logits agree with expected ones: the mean over rows
// of KL(softmax(expected) || softmax(actual)), infinite for NaN logits, and
// the share of rows whose argmax agrees.
struct Agreement {
  double mean_kl = 0.0;
  double median_kl = 0.0;  // over positions: what a router flip or two leave alone
  double top1_fraction = 0.0;
};

inline Agreement CompareLogits(const std::vector<float>& actual,
                               const std::vector<float>& expected, size_t n_vocab) {
  Agreement a;
  const size_t n_pos = expected.size() / n_vocab;
  std::vector<double> kls;
  int same = 0;
  for (size_t p = 0; p < n_pos; ++p) {
    const float* x = actual.data() + p * n_vocab;
    const float* y = expected.data() + p * n_vocab;
    const double mx = *std::max_element(x, x + n_vocab);
    const double my = *std::max_element(y, y + n_vocab);
    double zx = 0.0, zy = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      zx += std::exp(x[i] - mx);
      zy += std::exp(y[i] - my);
    }
    double kl = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const double log_py = y[i] - my - std::log(zy);
      const double log_px = x[i] - mx - std::log(zx);
      kl += std::exp(log_py) * (log_py - log_px);
    }
    a.mean_kl += kl / n_pos;
    kls.push_back(kl);
    same += std::max_element(x, x + n_vocab) - x == std::max_element(y, y + n_vocab) - y;
  }
  a.top1_fraction = static_cast<double>(same) / n_pos;
  if (!kls.empty()) {
    std::nth_element(kls.begin(), kls.begin() + kls.size() / 2, kls.end());
    a.median_kl = kls[kls.size() / 2];
  }
  if (std::isnan(a.mean_kl)) a.mean_kl = INFINITY;  // NaN logits must not pass
  if (std::isnan(a.median_kl)) a.median_kl = INFINITY;
  return a;
}

}  // namespace moetier::testing
