#include "render/status_map.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "render/format.h"

namespace moetier::client {
namespace {

constexpr int kGroupSize = 16;  // cells between the spaces that ease counting
constexpr int kMinLabelWidth = 10;

constexpr const char* kReset = "\x1b[0m";
// Cold to hot: grey, blue, cyan, yellow, bold red.
constexpr std::array<const char*, 5> kHeatColor = {"\x1b[90m", "\x1b[34m", "\x1b[36m", "\x1b[33m",
                                                   "\x1b[1;31m"};

const char* ColorGlyph(v1::ExpertTier tier, bool unicode) {
  switch (tier) {
    case v1::EXPERT_TIER_VRAM:
      return unicode ? "\u2588" : "#";  // full block
    case v1::EXPERT_TIER_RAM:
      return unicode ? "\u2592" : "+";  // medium shade
    case v1::EXPERT_TIER_DISK:
      return unicode ? "\u2591" : ".";  // light shade
    default:
      return "?";
  }
}

char PlainGlyph(v1::ExpertTier tier, float heat) {
  const bool hot = HeatLevel(heat) >= kHotHeatLevel;
  switch (tier) {
    case v1::EXPERT_TIER_VRAM:
      return hot ? 'V' : 'v';
    case v1::EXPERT_TIER_RAM:
      return hot ? 'R' : 'r';
    case v1::EXPERT_TIER_DISK:
      return hot ? '!' : '.';
    default:
      return '?';
  }
}

// Appends cells, switching colour only where the heat level changes.
class CellPainter {
 public:
  explicit CellPainter(const MapStyle& style) : style_(style) {}

  void Cell(v1::ExpertTier tier, float heat) {
    if (!style_.color) {
      out_.push_back(PlainGlyph(tier, heat));
      return;
    }
    const int level = HeatLevel(heat);
    if (level != level_) {
      out_ += kHeatColor[level];
      level_ = level;
    }
    out_ += ColorGlyph(tier, style_.unicode);
  }

  void Space() { out_.push_back(' '); }

  std::string Finish() {
    if (level_ >= 0) out_ += kReset;
    level_ = -1;
    return std::move(out_);
  }

 private:
  const MapStyle& style_;
  std::string out_;
  int level_ = -1;
};

v1::ExpertTier TierAt(const v1::LayerResidency& layer, int e) {
  return e < layer.tier_size() ? layer.tier(e) : v1::EXPERT_TIER_UNSPECIFIED;
}

float HeatAt(const v1::LayerResidency& layer, int e) {
  return e < layer.heat_size() ? layer.heat(e) : 0.0f;
}

struct TierCounts {
  uint64_t vram = 0;
  uint64_t ram = 0;
  uint64_t disk = 0;
  uint64_t unknown = 0;
  uint64_t total() const { return vram + ram + disk + unknown; }
  void Add(v1::ExpertTier tier) {
    switch (tier) {
      case v1::EXPERT_TIER_VRAM:
        ++vram;
        break;
      case v1::EXPERT_TIER_RAM:
        ++ram;
        break;
      case v1::EXPERT_TIER_DISK:
        ++disk;
        break;
      default:
        ++unknown;
    }
  }
};

std::string Share(uint64_t part, uint64_t whole) {
  return FormatPercent(whole == 0 ? std::nullopt
                                  : std::optional<double>(static_cast<double>(part) / whole));
}

std::string HitLine(const char* name, const v1::TierCounters& c) {
  const std::optional<double> rate = HitRate(c.hits(), c.misses());
  if (!rate.has_value()) return absl::StrFormat("%s - (no lookups yet)", name);
  return absl::StrFormat("%s %s (%s hits, %s misses)", name, FormatPercent(rate),
                         FormatCount(c.hits()), FormatCount(c.misses()));
}

bool HasExpertCache(const v1::WorkerStatus& w) { return w.expert_cache_bytes() > 0; }

std::string WorkerLine(const v1::WorkerStatus& w) {
  std::vector<std::string> parts;
  parts.push_back(absl::StrFormat("#%d %s %s", w.index(), w.device(), w.state()));
  parts.push_back(w.pid() > 0 ? absl::StrFormat("pid %d", w.pid()) : "no process");
  // With a device cache the rate sits on the cache line, beside what explains it.
  if (w.tokens_per_s() > 0 && !HasExpertCache(w)) {
    parts.push_back(absl::StrFormat("%.1f tok/s", w.tokens_per_s()));
  }
  parts.push_back(absl::StrFormat("served %d", w.requests_served()));
  parts.push_back(absl::StrFormat("restarts %d", w.restarts()));
  if (w.heartbeat_age_ms() >= 0) {
    parts.push_back(absl::StrFormat("heartbeat %d ms ago", w.heartbeat_age_ms()));
  }
  std::string line = absl::StrJoin(parts, ", ");
  if (!w.last_exit().empty()) absl::StrAppend(&line, "; last exit: ", w.last_exit());
  return line;
}

// The device expert cache of one worker: how full, how often it hit, what
// its misses and prefetches cost, and how fast experts came in. Copy rates
// are in decimal GB/s, as link bandwidths are quoted.
std::string ExpertCacheLine(const v1::WorkerStatus& w) {
  const v1::TierCounters& c = w.vram();
  std::string copied = absl::StrCat("copied ", FormatBytes(w.bytes_copied()));
  if (w.copy_bytes_per_s() > 0) {
    absl::StrAppendFormat(&copied, " at %.1f GB/s", w.copy_bytes_per_s() / 1e9);
  }
  // A cpu worker's slots are RAM: the same cache logic, nothing in VRAM.
  const char* what = w.device() == "cpu" ? "RAM slot cache" : "VRAM cache";
  std::string line = absl::StrFormat(
      "   %s %s, %s resident   hits %s   misses %s (%s on host)   "
      "prefetch %s issued, %s used (%s), %s wasted   %s",
      what, FormatBytes(w.expert_cache_bytes()), FormatBytes(c.resident_bytes()),
      FormatPercent(HitRate(c.hits(), c.misses())), FormatCount(c.misses()),
      FormatCount(w.misses_on_host()), FormatCount(w.prefetch_issued()),
      FormatCount(w.prefetch_used()), Share(w.prefetch_used(), w.prefetch_issued()),
      FormatCount(w.prefetch_wasted()), copied);
  if (w.tokens_per_s() > 0) absl::StrAppendFormat(&line, "   %.1f tok/s", w.tokens_per_s());
  return line;
}

// What one sequence's state takes on a worker: its KV rows per token of
// context, the whole context's worth, and any recurrent state (live and
// checkpoint copy, whatever the length); and, for a worker that decodes
// several sequences together, how many it holds and runs.
std::string SequenceStateLine(const v1::WorkerStatus& w) {
  std::string line = absl::StrFormat(
      "   sequence state: KV %s per token x %d tokens = %s", FormatBytes(w.kv_bytes_per_token()),
      w.max_ctx(), FormatBytes(w.kv_bytes_per_token() * static_cast<uint64_t>(w.max_ctx())));
  if (!w.kv_type_k().empty()) {
    absl::StrAppendFormat(&line, " (keys %s, values %s)", w.kv_type_k(), w.kv_type_v());
  }
  if (w.recurrent_state_bytes() > 0) {
    absl::StrAppendFormat(&line, "   recurrent %s (+ %s checkpoint)",
                          FormatBytes(w.recurrent_state_bytes()),
                          FormatBytes(w.recurrent_state_bytes()));
  }
  if (w.max_sequences() > 1) {
    absl::StrAppendFormat(&line, "   x %d sequences decoded together, %d running",
                          w.max_sequences(), w.running_requests());
  }
  return line;
}

// A worker's prefix cache: the states it keeps of prompt starts, what they
// take of its budget, and the prompt tokens its requests did not compute.
std::string PrefixCacheLine(const v1::WorkerStatus& w) {
  return absl::StrFormat("   prefix cache: %d states, %s of %s   %s prompt tokens reused",
                         w.prefix_cache_states(), FormatBytes(w.prefix_cache_bytes()),
                         FormatBytes(w.prefix_cache_budget_bytes()),
                         FormatCount(w.prompt_tokens_reused()));
}

}  // namespace

int HeatLevel(float heat) {
  if (!(heat > 0.0f)) return 0;  // also NaN
  if (heat < 0.25f) return 1;
  if (heat < 0.5f) return 2;
  if (heat < 0.75f) return 3;
  return 4;
}

std::string RenderCell(v1::ExpertTier tier, float heat, const MapStyle& style) {
  CellPainter painter(style);
  painter.Cell(tier, heat);
  return painter.Finish();
}

std::string RenderStatusMap(const v1::Status& status, const MapStyle& style) {
  std::string out;
  const auto line = [&out](std::string_view label, std::string_view text) {
    absl::StrAppendFormat(&out, "%-*s%s\n", kMinLabelWidth, label, text);
  };

  line("model", absl::StrFormat("%s, %d layers x %d experts (top %d), vocab %d",
                                status.architecture().empty() ? "?" : status.architecture(),
                                status.n_layer(), status.n_expert(), status.n_expert_used(),
                                status.n_vocab()));
  if (!status.model_path().empty()) line("", status.model_path());
  std::string store =
      absl::StrFormat("%s: %s of experts; RAM holds %s of a %s budget",
                      status.store_mode().empty() ? "?" : status.store_mode(),
                      FormatBytes(status.expert_bytes_total()),
                      FormatBytes(status.ram_used_bytes()), FormatBytes(status.ram_budget_bytes()));
  if (status.preload_fraction() < 1.0) {
    absl::StrAppend(&store, "; preload ", FormatPercent(status.preload_fraction()));
  }
  line("store", store);
  line("uptime", FormatDuration(status.uptime_s()));
  if (!status.heat_profile().empty()) line("heat", status.heat_profile());
  out.push_back('\n');

  // --- the map ---------------------------------------------------------------
  const int n_expert = static_cast<int>(status.n_expert());
  TierCounts totals;
  if (status.layers_size() == 0 || n_expert == 0) {
    line("experts", "no residency map yet (the daemon is still loading the model)");
  } else {
    const int layer_digits =
        static_cast<int>(absl::StrCat(std::max(status.layers_size() - 1, 0)).size());
    const int label_width = std::max(kMinLabelWidth, 6 + layer_digits + 1);
    const auto cells_width = [](int cells) { return cells + (cells - 1) / kGroupSize; };
    // Cells per line: everything when it fits, else whole groups.
    int per_line = n_expert;
    if (style.width > 0 && label_width + cells_width(n_expert) > style.width) {
      const int groups = std::max(1, (style.width - label_width + 1) / (kGroupSize + 1));
      per_line = std::min(n_expert, groups * kGroupSize);
    }

    std::string ruler(static_cast<size_t>(label_width + cells_width(per_line)), ' ');
    ruler.replace(0, 7, "experts");
    for (int e = 0; e < per_line; e += kGroupSize) {
      const std::string index = absl::StrCat(e);
      const size_t at = static_cast<size_t>(label_width + cells_width(e + 1) - 1);
      if (at + index.size() <= ruler.size()) ruler.replace(at, index.size(), index);
    }
    while (!ruler.empty() && ruler.back() == ' ') ruler.pop_back();
    absl::StrAppend(&out, ruler, "\n");

    for (int l = 0; l < status.layers_size(); ++l) {
      const v1::LayerResidency& layer = status.layers(l);
      if (layer.tier_size() == 0) {
        absl::StrAppendFormat(&out, "%-*s%s\n", label_width,
                              absl::StrFormat("layer %*d", layer_digits, l),
                              "dense: no routed experts");
        continue;
      }
      TierCounts counts;
      for (int start = 0; start < n_expert; start += per_line) {
        const std::string label =
            start == 0 ? absl::StrFormat("layer %*d", layer_digits, l) : absl::StrCat("+", start);
        absl::StrAppendFormat(&out, start == 0 ? "%-*s" : "%*s  ",
                              start == 0 ? label_width : label_width - 2, label);
        CellPainter painter(style);
        const int end = std::min(n_expert, start + per_line);
        for (int e = start; e < end; ++e) {
          if (e > start && (e - start) % kGroupSize == 0) painter.Space();
          painter.Cell(TierAt(layer, e), HeatAt(layer, e));
          counts.Add(TierAt(layer, e));
        }
        out += painter.Finish();
        if (end == n_expert) {
          absl::StrAppendFormat(&out, "%*s  vram %d ram %d disk %d",
                                cells_width(per_line) - cells_width(end - start), "", counts.vram,
                                counts.ram, counts.disk);
        }
        out.push_back('\n');
      }
      totals.vram += counts.vram;
      totals.ram += counts.ram;
      totals.disk += counts.disk;
      totals.unknown += counts.unknown;
    }

    if (style.color) {
      const auto sample = [&style](v1::ExpertTier tier, float heat) {
        return RenderCell(tier, heat, style);
      };
      line("legend",
           absl::StrFormat("%s in VRAM   %s in RAM   %s on disk only   ? unknown",
                           sample(v1::EXPERT_TIER_VRAM, 1.0f), sample(v1::EXPERT_TIER_RAM, 1.0f),
                           sample(v1::EXPERT_TIER_DISK, 1.0f)));
      line("",
           absl::StrFormat("colour = heat, recent use against the hottest expert: "
                           "%s unused %s <25%% %s <50%% %s <75%% %s hot",
                           sample(v1::EXPERT_TIER_VRAM, 0.0f), sample(v1::EXPERT_TIER_VRAM, 0.1f),
                           sample(v1::EXPERT_TIER_VRAM, 0.3f), sample(v1::EXPERT_TIER_VRAM, 0.6f),
                           sample(v1::EXPERT_TIER_VRAM, 1.0f)));
    } else {
      line("legend", "V v in VRAM   R r in RAM   ! . on disk only   ? unknown");
      line("", "upper case and ! = hot: recent use >= 50% of the hottest expert's");
    }
  }
  out.push_back('\n');

  // --- totals ----------------------------------------------------------------
  if (totals.total() > 0) {
    line("experts", absl::StrFormat("VRAM %d (%s)   RAM %d (%s)   disk %d (%s)   of %d",
                                    totals.vram, Share(totals.vram, totals.total()), totals.ram,
                                    Share(totals.ram, totals.total()), totals.disk,
                                    Share(totals.disk, totals.total()), totals.total()));
  }
  line("hits", absl::StrCat(HitLine("VRAM", status.vram()), "   ", HitLine("RAM", status.ram())));
  uint64_t copied = 0;
  for (const v1::WorkerStatus& w : status.workers()) copied += w.bytes_copied();
  std::string moved = absl::StrCat("disk -> RAM ", FormatBytes(status.bytes_read_from_disk()));
  if (status.read_bytes_per_s() > 0) {
    absl::StrAppend(&moved, " at ",
                    FormatBytes(static_cast<uint64_t>(std::llround(status.read_bytes_per_s()))),
                    "/s");
  }
  absl::StrAppend(&moved, "   RAM -> VRAM ", FormatBytes(copied), "   evictions ",
                  status.evictions());
  line("moved", moved);
  const v1::QueueStatus& q = status.queue();
  line("queue", absl::StrFormat("active %d/%d   queued %d/%d   completed %d   rejected %d   "
                                "cancelled %d",
                                q.active_requests(), q.max_active_sequences(), q.queued_requests(),
                                q.max_queued_requests(), q.requests_completed(),
                                q.requests_rejected(), q.requests_cancelled()));
  if (status.workers_size() == 0) {
    line("workers", "none");
  }
  for (int i = 0; i < status.workers_size(); ++i) {
    const v1::WorkerStatus& w = status.workers(i);
    line(i == 0 ? "workers" : "", WorkerLine(w));
    if (HasExpertCache(w)) line("", ExpertCacheLine(w));
    if (w.max_ctx() > 0) line("", SequenceStateLine(w));
    if (w.prefix_cache_budget_bytes() > 0) line("", PrefixCacheLine(w));
  }
  return out;
}

}  // namespace moetier::client
