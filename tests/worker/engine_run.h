// Test helper: run tokens through any ForwardEngine as a new sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/forward_engine.h"
#include "gtest/gtest.h"

namespace moetier::testing {

// Every row of logits for `ids` run as one new sequence; a test failure
// (and what was computed) when the engine refuses.
inline std::vector<float> RunNewSequence(ForwardEngine& engine, std::span<const int32_t> ids) {
  std::vector<float> logits(ids.size() * static_cast<size_t>(engine.n_vocab()));
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return logits;
  const absl::Status s = engine.Forward(**seq, ids, LogitRows::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

}  // namespace moetier::testing
