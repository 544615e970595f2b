#include "heat/heat_keeper.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "log/daemon_log.h"

namespace moetier {
namespace {

std::string UtcTime(int64_t unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  tm parts{};
  gmtime_r(&t, &parts);
  char text[32] = {};
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &parts);
  return text;
}

}  // namespace

HeatKeeper::HeatKeeper(HeatKeeperOptions options) : options_(std::move(options)) {
  MOETIER_CHECK(options_.n_layer > 0 && options_.n_expert > 0 && options_.top_k > 0 &&
                options_.half_life_tokens > 0);
  const size_t n = static_cast<size_t>(options_.n_layer) * options_.n_expert;
  current_.fingerprint = options_.fingerprint;
  current_.n_layer = options_.n_layer;
  current_.n_expert = options_.n_expert;
  current_.half_life_tokens = options_.half_life_tokens;
  current_.counts.assign(n, 0.0);
  last_totals_.assign(n, 0);
  if (options_.state_directory.empty()) {
    origin_ = "not kept: no state_directory, so every start is cold";
    return;
  }
  path_ = HeatProfilePath(options_.state_directory, options_.fingerprint);
  absl::StatusOr<HeatProfile> saved = ReadHeatProfile(path_);
  if (saved.ok()) {
    if (absl::Status fits = CheckHeatProfileFits(*saved, options_.fingerprint, options_.n_layer,
                                                 options_.n_expert);
        !fits.ok()) {
      saved = absl::Status(fits.code(), absl::StrFormat("%s: %s", path_, fits.message()));
    }
  }
  if (saved.status().code() == absl::StatusCode::kNotFound) {
    origin_ = absl::StrFormat("cold start: no profile at %s yet", path_);
    return;
  }
  if (!saved.ok()) {
    LogWarning("heat profile refused, starting cold (it is replaced at the next save): %s",
               saved.status().message());
    origin_ = absl::StrFormat("cold start: the saved profile was refused (%s)",
                              saved.status().message());
    return;
  }
  origin_ = absl::StrFormat("loaded from %s (saved %s, %.0f tokens)", path_,
                            UtcTime(saved->saved_unix_s), saved->tokens);
  current_.tokens = saved->tokens;
  current_.counts = saved->counts;
  started_from_ = *std::move(saved);
}

int64_t HeatKeeper::Now() const {
  return options_.now_unix_s ? options_.now_unix_s() : static_cast<int64_t>(std::time(nullptr));
}

std::string HeatKeeper::Describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text = origin_;
  if (path_.empty()) return text;
  if (!last_save_error_.empty()) {
    absl::StrAppendFormat(&text, "; the last save failed: %s", last_save_error_);
  } else if (last_save_unix_s_ > 0) {
    absl::StrAppendFormat(&text, "; saved %d s ago, %.0f tokens",
                          std::max<int64_t>(0, Now() - last_save_unix_s_), current_.tokens);
  } else {
    absl::StrAppend(&text, "; not saved yet");
  }
  return text;
}

void HeatKeeper::Absorb(std::span<const uint64_t> totals) {
  std::lock_guard<std::mutex> lock(mutex_);
  MOETIER_CHECK(totals.size() == current_.counts.size());
  const uint32_t n_expert = options_.n_expert;
  auto fresh = [&](size_t i) { return totals[i] - std::min(totals[i], last_totals_[i]); };
  // Every token visits every MoE layer once, so the busiest layer's rows
  // over top_k are the tokens (layers without experts route nothing).
  uint64_t busiest = 0;
  for (uint32_t l = 0; l < options_.n_layer; ++l) {
    uint64_t rows = 0;
    for (uint32_t e = 0; e < n_expert; ++e) {
      rows += fresh(static_cast<size_t>(l) * n_expert + e);
    }
    busiest = std::max(busiest, rows);
  }
  if (busiest == 0) return;
  const double tokens = static_cast<double>(busiest) / options_.top_k;
  const double decay = std::exp2(-tokens / options_.half_life_tokens);
  for (size_t i = 0; i < totals.size(); ++i) {
    current_.counts[i] = current_.counts[i] * decay + static_cast<double>(fresh(i));
    last_totals_[i] = totals[i];
  }
  current_.tokens = current_.tokens * decay + tokens;
}

HeatProfile HeatKeeper::Current() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

absl::Status HeatKeeper::Save() {
  if (path_.empty()) return absl::OkStatus();
  HeatProfile profile = Current();
  // Nothing learned yet: an empty profile would only hide a cold start.
  if (profile.tokens == 0) return absl::OkStatus();
  profile.saved_unix_s = Now();
  absl::Status status = WriteHeatProfile(path_, profile);
  std::lock_guard<std::mutex> lock(mutex_);
  if (status.ok()) {
    last_save_unix_s_ = profile.saved_unix_s;
    last_save_error_.clear();
  } else {
    last_save_error_ = std::string(status.message());
  }
  return status;
}

}  // namespace moetier
