#include "engine/sequence.h"

#include <mutex>

#include "absl/strings/str_format.h"

namespace moetier {

struct Sequence::Pool {
  std::mutex mutex;
  std::vector<uint8_t> in_use;
};

Sequence::Sequence(std::shared_ptr<Pool> pool, const void* owner, int slot, int capacity)
    : pool_(std::move(pool)), owner_(owner), slot_(slot), capacity_(capacity) {}

Sequence::~Sequence() {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  pool_->in_use[static_cast<size_t>(slot_)] = 0;
}

SequenceSlots::SequenceSlots(const void* owner, int n_slots, int capacity)
    : pool_(std::make_shared<Sequence::Pool>()),
      owner_(owner),
      n_slots_(n_slots),
      capacity_(capacity) {
  pool_->in_use.assign(static_cast<size_t>(n_slots), 0);
}

absl::StatusOr<std::unique_ptr<Sequence>> SequenceSlots::Acquire() {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (int i = 0; i < n_slots_; ++i) {
    if (pool_->in_use[static_cast<size_t>(i)] == 0) {
      pool_->in_use[static_cast<size_t>(i)] = 1;
      return std::unique_ptr<Sequence>(new Sequence(pool_, owner_, i, capacity_));
    }
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "all %d sequence slots of the engine are in use; finish a sequence first", n_slots_));
}

absl::Status SequenceSlots::CheckAppend(const Sequence& seq, size_t n_new) const {
  if (seq.owner_ != owner_ || seq.pool_ != pool_) {
    return absl::InvalidArgumentError("the sequence belongs to another engine");
  }
  if (static_cast<uint64_t>(seq.length_) + n_new > static_cast<uint64_t>(capacity_)) {
    return absl::OutOfRangeError(
        absl::StrFormat("%d tokens after the sequence's %d exceed the context length %d", n_new,
                        seq.length_, capacity_));
  }
  return absl::OkStatus();
}

absl::Status SequenceSlots::CheckTokens(const Sequence& seq, std::span<const int32_t> tokens,
                                        int n_vocab) const {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to run");
  if (absl::Status s = CheckAppend(seq, tokens.size()); !s.ok()) return s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token %d at index %d is outside the vocabulary 0..%d", tokens[i], i, n_vocab - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier
