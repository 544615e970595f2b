// One sequence's place in an engine: which of the engine's state slots
// (the KV cache of its attention layers, and any recurrent state) it holds,
// and how many positions it has computed. Engines allocate their slots at
// creation; NewSequence hands one out and the Sequence gives it back when
// destroyed, so starting a sequence never allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moetier {

class SequenceSlots;

class Sequence {
 public:
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Positions 0..length()-1 have been computed.
  int length() const { return length_; }
  // The most positions the sequence can hold (the engine's context length).
  int capacity() const { return capacity_; }
  // Which of the engine's state slots holds the sequence.
  int slot() const { return slot_; }
  // The length the sequence's checkpoint was saved at; -1 without one.
  int checkpoint_length() const { return checkpoint_length_; }

 private:
  friend class SequenceSlots;
  struct Pool;
  Sequence(std::shared_ptr<Pool> pool, const void* owner, int slot, int capacity);

  std::shared_ptr<Pool> pool_;  // shared, so a late Sequence never frees into freed memory
  const void* owner_;
  int slot_;
  int capacity_;
  int length_ = 0;
  int checkpoint_length_ = -1;
};

// An engine's fixed set of sequence slots.
class SequenceSlots {
 public:
  // `owner` identifies the engine; n_slots >= 1, capacity >= 1.
  SequenceSlots(const void* owner, int n_slots, int capacity);

  // A free slot as a new, empty sequence; RESOURCE_EXHAUSTED when every
  // slot is held. The engine clears the slot's state before first use.
  absl::StatusOr<std::unique_ptr<Sequence>> Acquire();

  // OK when `seq` is one of these slots and n_new more positions fit;
  // otherwise InvalidArgument (another engine's sequence) or OutOfRange
  // (naming the length, the new tokens and the capacity).
  absl::Status CheckAppend(const Sequence& seq, size_t n_new) const;
  // Forward's checks of its tokens: at least one, every id in [0,
  // n_vocab), and they fit (CheckAppend); InvalidArgument naming the first
  // id outside the vocabulary and its index.
  absl::Status CheckTokens(const Sequence& seq, std::span<const int32_t> tokens,
                           int n_vocab) const;
  void SetLength(Sequence& seq, int length) const { seq.length_ = length; }
  void SetCheckpoint(Sequence& seq, int length) const { seq.checkpoint_length_ = length; }

  int n_slots() const { return n_slots_; }
  int capacity() const { return capacity_; }

 private:
  std::shared_ptr<Sequence::Pool> pool_;
  const void* owner_;
  int n_slots_;
  int capacity_;
};

}  // namespace moetier
