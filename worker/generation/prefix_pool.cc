#include "generation/prefix_pool.h"

#include <algorithm>
#include <utility>

namespace moetier {
namespace {

// Prompts remembered for fork points.
constexpr size_t kRecentPrompts = 16;

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
}

bool IsPrefixOf(std::span<const int32_t> prefix, std::span<const int32_t> of) {
  return prefix.size() <= of.size() && CommonPrefix(prefix, of) == prefix.size();
}

}  // namespace

PrefixPool::PrefixPool(uint64_t budget_bytes, bool recurrent)
    : budget_bytes_(budget_bytes), recurrent_(recurrent) {}

PrefixPool::~PrefixPool() = default;

int PrefixPool::Best(std::span<const int32_t> prompt, int* usable) const {
  *usable = 0;
  int best = -1;
  if (prompt.empty()) return best;
  const size_t limit = prompt.size() - 1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const std::vector<int32_t>& tokens = entries_[i].tokens;
    size_t supplies = 0;
    if (recurrent_) {
      if (tokens.size() <= limit && IsPrefixOf(tokens, prompt)) supplies = tokens.size();
    } else {
      supplies = std::min(CommonPrefix(tokens, prompt), limit);
    }
    if (supplies > static_cast<size_t>(*usable)) {
      *usable = static_cast<int>(supplies);
      best = static_cast<int>(i);
    }
  }
  return best;
}

int PrefixPool::UsableLength(std::span<const int32_t> prompt) const {
  int usable = 0;
  Best(prompt, &usable);
  return usable;
}

absl::StatusOr<int> PrefixPool::LoadInto(ForwardEngine& engine, Sequence& seq,
                                         std::span<const int32_t> prompt) {
  int usable = 0;
  const int best = Best(prompt, &usable);
  if (best < 0) return 0;
  Entry& entry = entries_[static_cast<size_t>(best)];
  if (absl::Status s = engine.LoadState(seq, *entry.state, usable); !s.ok()) return s;
  entry.last_use = ++clock_;
  return usable;
}

std::vector<int> PrefixPool::PlanStores(std::span<const int32_t> prompt, int from,
                                        int checkpoint_position) {
  std::vector<int> positions;
  if (!enabled() || prompt.empty()) return positions;
  const int n = static_cast<int>(prompt.size());
  // Whether a kept state already holds exactly what a store at `position`
  // would, or (attention only) more.
  auto kept = [&](int position) {
    const std::span<const int32_t> head = prompt.first(static_cast<size_t>(position));
    for (const Entry& e : entries_) {
      if (recurrent_ ? e.tokens.size() == head.size() && IsPrefixOf(e.tokens, head)
                     : IsPrefixOf(head, e.tokens)) {
        return true;
      }
    }
    return false;
  };
  auto add = [&](int position) {
    if (position > from && position <= n && !kept(position)) positions.push_back(position);
  };
  if (!recurrent_) {
    add(n);
  } else {
    size_t fork = 0;
    for (const std::vector<int32_t>& seen : recent_prompts_) {
      fork = std::max(fork, CommonPrefix(seen, prompt));
    }
    for (const Entry& e : entries_) fork = std::max(fork, CommonPrefix(e.tokens, prompt));
    if (fork >= static_cast<size_t>(kMinSharedPrefixTokens)) add(static_cast<int>(fork));
    if (checkpoint_position > 0) add(checkpoint_position);
    std::sort(positions.begin(), positions.end());
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
    recent_prompts_.emplace_back(prompt.begin(), prompt.end());
    if (recent_prompts_.size() > kRecentPrompts) recent_prompts_.pop_front();
  }
  return positions;
}

absl::Status PrefixPool::Store(ForwardEngine& engine, const Sequence& seq,
                               std::span<const int32_t> prefix) {
  if (!enabled() || prefix.empty()) return absl::OkStatus();
  const uint64_t token_bytes = prefix.size() * sizeof(int32_t);
  absl::StatusOr<std::unique_ptr<SequenceState>> state = engine.CopyState(seq);
  if (!state.ok()) return state.status();
  const uint64_t bytes = (*state)->bytes() + token_bytes;
  if (bytes > budget_bytes_) return absl::OkStatus();
  // A state of attention layers makes every shorter one of its start
  // redundant.
  for (size_t i = entries_.size(); i-- > 0;) {
    const bool redundant = recurrent_ ? entries_[i].tokens.size() == prefix.size() &&
                                            IsPrefixOf(entries_[i].tokens, prefix)
                                      : IsPrefixOf(entries_[i].tokens, prefix);
    if (redundant) Evict(i);
  }
  while (bytes_ + bytes > budget_bytes_) {
    size_t oldest = 0;
    for (size_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].last_use < entries_[oldest].last_use) oldest = i;
    }
    Evict(oldest);
  }
  entries_.push_back(Entry{.tokens = std::vector<int32_t>(prefix.begin(), prefix.end()),
                           .state = *std::move(state),
                           .bytes = bytes,
                           .last_use = ++clock_});
  bytes_ += bytes;
  return absl::OkStatus();
}

void PrefixPool::Evict(size_t index) {
  bytes_ -= entries_[index].bytes;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
}

void PrefixPool::Disable() {
  entries_.clear();
  recent_prompts_.clear();
  bytes_ = 0;
  budget_bytes_ = 0;
}

}  // namespace moetier
