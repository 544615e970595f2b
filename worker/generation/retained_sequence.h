// The last generation's sequence, kept after its request ends so that the
// next request whose prompt starts with the same tokens computes only the
// rest. A chat's next turn sends the whole conversation again: its prompt is
// the last prompt, the reply and the new message, and only the reply's last
// token and the new message are computed. Recurrent layers (Gated DeltaNet)
// cannot rewind, so the generate loop saves a checkpoint with each prompt
// (generation/generate_loop.h says where); a request that shares the last
// prompt but not the reply (a history the chat template re-rendered; with a
// recurrent model also a regeneration) restores it instead of starting over.
//
// What is kept: one sequence (the engine's state slot, already allocated)
// and its token ids, until a request that cannot use it needs the slot, an
// engine error, or the worker's exit. Nothing is copied to keep it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/forward_engine.h"
#include "engine/sequence.h"

namespace moetier {

// How much of a prompt a kept sequence can supply.
struct PrefixReuse {
  enum class Kind {
    kNone,      // start a new sequence
    kContinue,  // the kept sequence as it is: its tokens are a prefix of the prompt
    kRestore,   // the kept sequence rewound to its checkpoint
  };
  Kind kind = Kind::kNone;
  int reused_tokens = 0;  // prompt positions not computed again
};

// The choice for `prompt` (non-empty), given the kept sequence's tokens
// (its positions hold kept_tokens[0..kept_length)) and its checkpoint length
// (-1: none). At least the prompt's last token is always computed: its
// logits are what generation starts from.
PrefixReuse PlanPrefixReuse(std::span<const int32_t> kept_tokens, int kept_length,
                            int checkpoint_length, std::span<const int32_t> prompt);

class RetainedSequence {
 public:
  // A sequence for `prompt` from `engine`, holding as long a prefix of it
  // as the kept one allows (*reused_tokens says how long); the kept
  // sequence is handed over or given back to the engine.
  absl::StatusOr<std::unique_ptr<Sequence>> TakeFor(ForwardEngine& engine,
                                                    std::span<const int32_t> prompt,
                                                    int* reused_tokens);
  // Keeps `seq`, whose positions hold tokens[0..seq->length()); `tokens`
  // may run one further (the last sampled token, never fed back).
  void Keep(std::unique_ptr<Sequence> seq, std::vector<int32_t> tokens);
  // Gives the kept sequence back to its engine.
  void Drop();
  bool holds_sequence() const { return seq_ != nullptr; }

 private:
  std::unique_ptr<Sequence> seq_;
  std::vector<int32_t> tokens_;
};

}  // namespace moetier
