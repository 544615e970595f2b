#include "http/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace moetier {

std::string EscapePrometheusLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapePrometheusHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatPrometheusValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void PrometheusTextWriter::Family(std::string_view name, std::string_view type,
                                  std::string_view help) {
  family_ = std::string(name);
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += EscapePrometheusHelp(help);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void PrometheusTextWriter::AppendSeries(std::string_view suffix, const PrometheusLabels& labels,
                                        const std::pair<std::string, std::string>* extra_label) {
  text_ += family_;
  text_ += suffix;
  if (labels.empty() && extra_label == nullptr) {
    text_ += ' ';
    return;
  }
  text_ += '{';
  bool first = true;
  auto append = [&](const std::pair<std::string, std::string>& label) {
    if (!first) text_ += ',';
    first = false;
    text_ += label.first;
    text_ += "=\"";
    text_ += EscapePrometheusLabelValue(label.second);
    text_ += '"';
  };
  for (const auto& label : labels) append(label);
  if (extra_label != nullptr) append(*extra_label);
  text_ += "} ";
}

void PrometheusTextWriter::Sample(const PrometheusLabels& labels, double value) {
  AppendSeries("", labels, nullptr);
  text_ += FormatPrometheusValue(value);
  text_ += '\n';
}

void PrometheusTextWriter::Sample(const PrometheusLabels& labels, uint64_t value) {
  AppendSeries("", labels, nullptr);
  text_ += std::to_string(value);
  text_ += '\n';
}

void PrometheusTextWriter::Histogram(const PrometheusLabels& labels,
                                     const HistogramSnapshot& histogram) {
  // +Inf comes from count, so a snapshot without buckets still gives the
  // bucket the format requires.
  for (size_t i = 0; i <= histogram.upper_bounds.size(); ++i) {
    const bool is_inf = i == histogram.upper_bounds.size();
    const std::pair<std::string, std::string> le{
        "le", is_inf ? "+Inf" : FormatPrometheusValue(histogram.upper_bounds[i])};
    const uint64_t at_or_below = !is_inf && i < histogram.cumulative_counts.size()
                                     ? histogram.cumulative_counts[i]
                                     : histogram.count;
    AppendSeries("_bucket", labels, &le);
    text_ += std::to_string(at_or_below);
    text_ += '\n';
  }
  AppendSeries("_sum", labels, nullptr);
  text_ += FormatPrometheusValue(histogram.sum);
  text_ += '\n';
  AppendSeries("_count", labels, nullptr);
  text_ += std::to_string(histogram.count);
  text_ += '\n';
}

}  // namespace moetier
