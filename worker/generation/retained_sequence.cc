#include "generation/retained_sequence.h"

#include <algorithm>
#include <utility>

namespace moetier {

PrefixReuse PlanPrefixReuse(std::span<const int32_t> kept_tokens, int kept_length,
                            int checkpoint_length, std::span<const int32_t> prompt) {
  PrefixReuse plan;
  const size_t usable = std::min({kept_tokens.size(), static_cast<size_t>(std::max(kept_length, 0)),
                                  prompt.empty() ? size_t{0} : prompt.size() - 1});
  const size_t common =
      static_cast<size_t>(std::mismatch(kept_tokens.begin(), kept_tokens.begin() + usable,
                                        prompt.begin())
                              .first -
                          kept_tokens.begin());
  if (kept_length > 0 && common == static_cast<size_t>(kept_length)) {
    plan.kind = PrefixReuse::Kind::kContinue;
    plan.reused_tokens = kept_length;
  } else if (checkpoint_length > 0 && static_cast<size_t>(checkpoint_length) <= common) {
    plan.kind = PrefixReuse::Kind::kRestore;
    plan.reused_tokens = checkpoint_length;
  }
  return plan;
}

absl::StatusOr<std::unique_ptr<Sequence>> RetainedSequence::TakeFor(
    ForwardEngine& engine, std::span<const int32_t> prompt, int* reused_tokens) {
  *reused_tokens = 0;
  if (seq_ != nullptr) {
    const PrefixReuse plan =
        PlanPrefixReuse(tokens_, seq_->length(), seq_->checkpoint_length(), prompt);
    if (plan.kind == PrefixReuse::Kind::kRestore) {
      if (absl::Status s = engine.RestoreCheckpoint(*seq_); !s.ok()) {
        Drop();
        return s;
      }
    }
    if (plan.kind != PrefixReuse::Kind::kNone) {
      *reused_tokens = plan.reused_tokens;
      tokens_.clear();
      return std::move(seq_);
    }
    Drop();
  }
  return engine.NewSequence();
}

void RetainedSequence::Keep(std::unique_ptr<Sequence> seq, std::vector<int32_t> tokens) {
  seq_ = std::move(seq);
  tokens_ = std::move(tokens);
}

void RetainedSequence::Drop() {
  seq_.reset();
  tokens_.clear();
}

}  // namespace moetier
