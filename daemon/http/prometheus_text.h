// Writes the Prometheus text exposition format 0.0.4: one family at a time,
// its # HELP and # TYPE lines, then its samples, with label values and help
// text escaped as the format requires.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stats/request_metrics.h"

namespace moetier {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

using PrometheusLabels = std::vector<std::pair<std::string, std::string>>;

// Backslash, double quote and newline escaped (\\, \", \n).
std::string EscapePrometheusLabelValue(std::string_view value);
// Backslash and newline escaped (\\, \n).
std::string EscapePrometheusHelp(std::string_view help);
// Shortest text that reads back as the same double; NaN, +Inf, -Inf.
std::string FormatPrometheusValue(double value);

class PrometheusTextWriter {
 public:
  // `type`: "counter", "gauge" or "histogram". Samples that follow belong to
  // this family; a counter's name ends in _total.
  void Family(std::string_view name, std::string_view type, std::string_view help);

  void Sample(const PrometheusLabels& labels, double value);
  void Sample(const PrometheusLabels& labels, uint64_t value);
  // name_bucket{...,le="..."} for every bound and +Inf, then name_sum and name_count.
  void Histogram(const PrometheusLabels& labels, const HistogramSnapshot& histogram);

  const std::string& text() const { return text_; }

 private:
  void AppendSeries(std::string_view suffix, const PrometheusLabels& labels,
                    const std::pair<std::string, std::string>* extra_label);

  std::string family_;
  std::string text_;
};

}  // namespace moetier
