#include "cache/routing_trace.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {
namespace {

constexpr std::string_view kMagic = "moetier-trace";

bool ParseU32(std::string_view s, uint32_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseFloat(std::string_view s, float& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

// Splits on `sep` into `out` (reused, so the reader allocates per file,
// not per line). Debian's absl::string_view is not std::string_view, so
// absl::StrSplit is not used here.
void Split(std::string_view s, char sep, std::vector<std::string_view>& out,
           bool skip_empty = false) {
  out.clear();
  for (;;) {
    const size_t at = s.find(sep);
    const std::string_view piece = s.substr(0, at);
    if (!skip_empty || !piece.empty()) out.push_back(piece);
    if (at == std::string_view::npos) return;
    s.remove_prefix(at + 1);
  }
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Shortens a bad piece of input for an error message.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 24;
  return "'" + std::string(s.substr(0, kMax)) + (s.size() > kMax ? "...'" : "'");
}

struct Header {
  bool present = false;
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 0;
  bool weights = false;
};

absl::Status ParseHeader(std::string_view line, std::string_view where, Header& h) {
  std::vector<std::string_view> parts;
  Split(line, ' ', parts, /*skip_empty=*/true);
  if (parts.size() < 2 || parts[0] != kMagic || parts[1] != "v1") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header must start with '%s v1', found %s", where, kMagic, Quote(line)));
  }
  bool seen_layers = false, seen_experts = false, seen_top_k = false, seen_weights = false;
  for (size_t i = 2; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string_view name = parts[i].substr(0, eq);
    uint32_t value = 0;
    if (eq == std::string_view::npos || !ParseU32(parts[i].substr(eq + 1), value)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: header field %s is not name=unsigned-integer", where, Quote(parts[i])));
    }
    if (name == "layers") {
      h.n_layer = value, seen_layers = true;
    } else if (name == "experts") {
      h.n_expert = value, seen_experts = true;
    } else if (name == "top_k") {
      h.top_k = value, seen_top_k = true;
    } else if (name == "weights" && value <= 1) {
      h.weights = value == 1, seen_weights = true;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unknown header field %s (known: layers, experts, top_k, weights=0|1)", where,
          Quote(parts[i])));
    }
  }
  if (!seen_layers || !seen_experts || !seen_top_k || !seen_weights) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header needs layers=, experts=, top_k= and weights=", where));
  }
  if (h.n_layer == 0 || h.n_layer > kTraceMaxLayers || h.n_expert == 0 ||
      h.n_expert > kTraceMaxExperts || h.top_k == 0 || h.top_k > h.n_expert) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header counts out of range: layers=%u (1..%u), experts=%u (1..%u), top_k=%u "
        "(1..experts)",
        where, h.n_layer, kTraceMaxLayers, h.n_expert, kTraceMaxExperts, h.top_k));
  }
  h.present = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status RoutingTrace::Validate() const {
  if (n_layer == 0 || n_layer > kTraceMaxLayers || n_expert == 0 || n_expert > kTraceMaxExperts ||
      top_k == 0 || top_k > n_expert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("trace %s: counts out of range (layers %u, experts %u, top_k %u)", name,
                        n_layer, n_expert, top_k));
  }
  const size_t per_token = static_cast<size_t>(n_layer) * top_k;
  if (experts.size() % per_token != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "trace %s: %u expert ids are not whole tokens of %u", name, experts.size(), per_token));
  }
  if (!weights.empty() && weights.size() != experts.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("trace %s: %u weights for %u expert ids",
                                                      name, weights.size(), experts.size()));
  }
  for (size_t t = 0; t < n_token(); ++t) {
    for (uint32_t l = 0; l < n_layer; ++l) {
      const absl::Span<const uint32_t> ids = Experts(t, l);
      for (size_t a = 0; a < ids.size(); ++a) {
        if (ids[a] >= n_expert) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "trace %s: token %u layer %u: expert %u >= %u", name, t, l, ids[a], n_expert));
        }
        for (size_t b = 0; b < a; ++b) {
          if (ids[a] == ids[b]) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "trace %s: token %u layer %u: expert %u listed twice", name, t, l, ids[a]));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RoutingTrace> ParseRoutingTrace(std::string_view text, std::string_view source,
                                               uint32_t n_expert) {
  if (n_expert > kTraceMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expert count %u exceeds %u", source, n_expert, kTraceMaxExperts));
  }
  RoutingTrace trace;
  trace.name = std::string(source);
  Header header;
  bool first_data = true;
  uint32_t max_id = 0;
  size_t line_no = 0;
  std::vector<std::string_view> entries;
  // seen[id] == field number: id already listed in the current field.
  // Grows to the largest id (bounded by kTraceMaxExperts, checked first).
  std::vector<uint32_t> seen;
  uint32_t field_no = 0;
  std::vector<std::string_view> fields;
  std::string where;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = Trim(text.substr(0, eol));
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    where.assign(source);
    where += ':';
    where += std::to_string(line_no);
    if (line.substr(0, kMagic.size()) == kMagic) {
      if (!first_data || header.present) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: header must be the first line that is not a comment", where));
      }
      if (absl::Status s = ParseHeader(line, where, header); !s.ok()) return s;
      if (n_expert != 0 && n_expert != header.n_expert) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: header says experts=%u but %u was expected", where, header.n_expert, n_expert));
      }
      trace.n_layer = header.n_layer;
      trace.n_expert = header.n_expert;
      trace.top_k = header.top_k;
      first_data = false;
      continue;
    }
    Split(line, ';', fields);
    if (trace.n_layer == 0) {
      if (fields.size() > kTraceMaxLayers) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: %u layers exceed the limit of %u",
                                                          where, fields.size(), kTraceMaxLayers));
      }
      trace.n_layer = static_cast<uint32_t>(fields.size());
    }
    if (fields.size() != trace.n_layer) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %u layers (';'-separated fields), expected %u", where, fields.size(),
                          trace.n_layer));
    }
    first_data = false;
    for (uint32_t l = 0; l < trace.n_layer; ++l) {
      Split(fields[l], ',', entries);
      if (trace.top_k == 0) {
        if (entries.size() > kTraceMaxExperts) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: layer %u lists %u experts", where, l, entries.size()));
        }
        trace.top_k = static_cast<uint32_t>(entries.size());
      }
      if (entries.size() != trace.top_k) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: layer %u lists %u experts, expected %u", where, l, entries.size(), trace.top_k));
      }
      ++field_no;
      for (const std::string_view entry_raw : entries) {
        const std::string_view entry = Trim(entry_raw);
        std::string_view id_text = entry;
        std::string_view weight_text;
        const size_t colon = entry.find(':');
        if (colon != std::string_view::npos) {
          id_text = Trim(entry.substr(0, colon));
          weight_text = Trim(entry.substr(colon + 1));
        }
        uint32_t id = 0;
        if (!ParseU32(id_text, id)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: layer %u: %s is not an expert id (unsigned integer)", where, l, Quote(entry)));
        }
        const uint32_t limit = trace.n_expert != 0 ? trace.n_expert : n_expert;
        if ((limit != 0 && id >= limit) || id >= kTraceMaxExperts) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: layer %u: expert id %u is not below the expert count %u", where,
                              l, id, limit != 0 ? limit : kTraceMaxExperts));
        }
        if (id >= seen.size()) seen.resize(id + 1, 0);
        if (seen[id] == field_no) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: layer %u: expert %u is listed twice", where, l, id));
        }
        seen[id] = field_no;
        const bool want_weight = header.present && header.weights;
        if (colon != std::string_view::npos && !want_weight) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: layer %u: %s has a weight, but the file declares none (a header with "
              "weights=1 is needed)",
              where, l, Quote(entry)));
        }
        if (want_weight) {
          float w = 0;
          if (colon == std::string_view::npos || !ParseFloat(weight_text, w)) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "%s: layer %u: %s needs id:weight with a finite weight", where, l, Quote(entry)));
          }
          trace.weights.push_back(w);
        }
        max_id = std::max(max_id, id);
        trace.experts.push_back(id);
      }
    }
  }
  if (trace.experts.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: no tokens", source));
  }
  if (trace.n_expert == 0) trace.n_expert = n_expert != 0 ? n_expert : max_id + 1;
  if (trace.top_k > trace.n_expert) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: top_k %u exceeds the expert count %u",
                                                      source, trace.top_k, trace.n_expert));
  }
  return trace;
}

absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path, uint32_t n_expert) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("%s: cannot open routing trace: %s", path, std::strerror(errno)));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kTraceMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: routing trace is larger than %u bytes (or unreadable)", path, kTraceMaxFileBytes));
  }
  in.seekg(0, std::ios::beg);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) {
    return absl::DataLossError(absl::StrFormat("%s: short read", path));
  }
  return ParseRoutingTrace(text, path, n_expert);
}

namespace {

void AppendTokenLine(std::string& out, absl::Span<const uint32_t> experts,
                     absl::Span<const float> weights, uint32_t n_layer, uint32_t top_k) {
  for (uint32_t l = 0; l < n_layer; ++l) {
    if (l > 0) out.push_back(';');
    for (uint32_t j = 0; j < top_k; ++j) {
      const size_t i = static_cast<size_t>(l) * top_k + j;
      if (j > 0) out.push_back(',');
      if (weights.empty()) {
        absl::StrAppend(&out, experts[i]);
      } else {
        absl::StrAppendFormat(&out, "%u:%.9g", experts[i], weights[i]);
      }
    }
  }
  out.push_back('\n');
}

std::string HeaderLine(uint32_t n_layer, uint32_t n_expert, uint32_t top_k, bool weights) {
  return absl::StrFormat("%s v1 layers=%u experts=%u top_k=%u weights=%d\n", kMagic, n_layer,
                         n_expert, top_k, weights ? 1 : 0);
}

}  // namespace

std::string FormatRoutingTrace(const RoutingTrace& trace) {
  std::string out = HeaderLine(trace.n_layer, trace.n_expert, trace.top_k, trace.has_weights());
  const size_t per_token = static_cast<size_t>(trace.n_layer) * trace.top_k;
  for (size_t t = 0; t < trace.n_token(); ++t) {
    const absl::Span<const uint32_t> ids =
        absl::MakeConstSpan(trace.experts).subspan(t * per_token, per_token);
    const absl::Span<const float> w =
        trace.has_weights() ? absl::MakeConstSpan(trace.weights).subspan(t * per_token, per_token)
                            : absl::Span<const float>();
    AppendTokenLine(out, ids, w, trace.n_layer, trace.top_k);
  }
  return out;
}

absl::Status WriteRoutingTrace(const std::string& path, const RoutingTrace& trace) {
  if (absl::Status s = trace.Validate(); !s.ok()) return s;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create: %s", path, std::strerror(errno)));
  }
  const std::string text = FormatRoutingTrace(trace);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrFormat("%s: write failed", path));
  return absl::OkStatus();
}

RoutingTraceWriter::~RoutingTraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status RoutingTraceWriter::Open(const std::string& path, uint32_t n_layer, uint32_t n_expert,
                                      uint32_t top_k, bool with_weights) {
  if (file_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: trace writer already open on %s", path, path_));
  }
  if (n_layer == 0 || n_layer > kTraceMaxLayers || n_expert == 0 || n_expert > kTraceMaxExperts ||
      top_k == 0 || top_k > n_expert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: trace counts out of range (layers %u, experts %u, top_k %u)", path,
                        n_layer, n_expert, top_k));
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create: %s", path, std::strerror(errno)));
  }
  path_ = path;
  n_layer_ = n_layer;
  n_expert_ = n_expert;
  top_k_ = top_k;
  with_weights_ = with_weights;
  line_ = HeaderLine(n_layer, n_expert, top_k, with_weights);
  if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) {
    return absl::DataLossError(absl::StrFormat("%s: write failed", path_));
  }
  return absl::OkStatus();
}

absl::Status RoutingTraceWriter::AppendToken(absl::Span<const uint32_t> experts,
                                             absl::Span<const float> weights) {
  if (file_ == nullptr) return absl::FailedPreconditionError("trace writer is not open");
  const size_t want = static_cast<size_t>(n_layer_) * top_k_;
  if (experts.size() != want || weights.size() != (with_weights_ ? want : 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: token with %u ids and %u weights, expected %u and %u", path_,
                        experts.size(), weights.size(), want, with_weights_ ? want : 0));
  }
  for (const uint32_t e : experts) {
    if (e >= n_expert_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expert id %u is not below %u", path_, e, n_expert_));
    }
  }
  line_.clear();
  AppendTokenLine(line_, experts, weights, n_layer_, top_k_);
  if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) {
    return absl::DataLossError(absl::StrFormat("%s: write failed", path_));
  }
  return absl::OkStatus();
}

absl::Status RoutingTraceWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();
  if (std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrFormat("%s: write failed: %s", path_, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RoutingTraceWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const bool failed = std::fclose(file_) != 0;
  file_ = nullptr;
  if (failed) return absl::DataLossError(absl::StrFormat("%s: close failed", path_));
  return absl::OkStatus();
}

}  // namespace moetier
