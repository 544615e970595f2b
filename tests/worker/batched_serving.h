// A simulated serving run for any ForwardEngine (continuous batching
// through ForwardMany) and the same requests served one at a time, so a
// backend's batched logits can be compared with its solo ones.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/forward_engine.h"
#include "gtest/gtest.h"

namespace moetier::testing {

// One request of the simulated run: its prompt, then the tokens it is fed
// one by one (standing in for sampled ones), and the step it arrives at.
// With a `start`, its sequence begins by loading that state's first
// `loaded` positions (a prefix hit) and computes the rest.
struct Plan {
  std::vector<int32_t> prompt;
  std::vector<int32_t> decode;
  int arrives = 0;
  const SequenceState* start = nullptr;
  int loaded = 0;
};

// What a sequence went through: the length of each call's tokens, and the
// logits row of each call's last token.
struct Transcript {
  std::vector<int> chunks;
  std::vector<std::vector<float>> rows;
};

// `count` plans over the vector's ids: prompts of 2 to 17 tokens starting
// at different places, 1 to 9 decode tokens, arriving one step apart.
inline std::vector<Plan> Plans(const std::vector<int32_t>& ids, int count) {
  std::vector<Plan> plans;
  const int n = static_cast<int>(ids.size());
  for (int i = 0; i < count; ++i) {
    Plan p;
    const int prompt = 2 + (i * 7) % 16;
    const int decode = 1 + (i * 5) % 9;
    for (int j = 0; j < prompt; ++j) p.prompt.push_back(ids[(i * 3 + j) % n]);
    for (int j = 0; j < decode; ++j) p.decode.push_back(ids[(i * 11 + 2 * j + 1) % n]);
    p.arrives = i;
    plans.push_back(std::move(p));
  }
  return plans;
}

// Serves `plans` on `engine` with up to max_sequences() at once: each step
// gives every running sequence its next prompt chunk (up to `chunk` tokens)
// or its next decode token in one ForwardMany; a sequence whose tokens are
// all run leaves (its slot freed at once), and a waiting plan joins when a
// slot is free and its step has come.
inline std::vector<Transcript> ServeBatched(ForwardEngine& engine, const std::vector<Plan>& plans,
                                     int chunk) {
  struct Running {
    size_t plan;
    std::unique_ptr<Sequence> seq;
    size_t fed = 0;  // of prompt then decode
  };
  std::vector<Transcript> out(plans.size());
  std::vector<Running> running;
  size_t next_plan = 0;
  const size_t n_vocab = static_cast<size_t>(engine.n_vocab());
  std::vector<std::vector<float>> rows(static_cast<size_t>(engine.max_sequences()),
                                       std::vector<float>(n_vocab));
  for (int step = 0; next_plan < plans.size() || !running.empty(); ++step) {
    while (next_plan < plans.size() && plans[next_plan].arrives <= step &&
           static_cast<int>(running.size()) < engine.max_sequences()) {
      absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
      EXPECT_TRUE(seq.ok()) << seq.status();
      if (!seq.ok()) return out;
      const Plan& p = plans[next_plan];
      if (p.start != nullptr) {
        const absl::Status loaded = engine.LoadState(**seq, *p.start, p.loaded);
        EXPECT_TRUE(loaded.ok()) << loaded;
        if (!loaded.ok()) return out;
      }
      running.push_back({next_plan++, *std::move(seq), static_cast<size_t>(p.loaded)});
    }
    if (running.empty()) continue;
    std::vector<std::vector<int32_t>> tokens(running.size());
    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < running.size(); ++i) {
      const Plan& p = plans[running[i].plan];
      const size_t fed = running[i].fed;
      if (fed < p.prompt.size()) {
        const size_t take = std::min(p.prompt.size() - fed, static_cast<size_t>(chunk));
        tokens[i].assign(p.prompt.begin() + fed, p.prompt.begin() + fed + take);
      } else {
        tokens[i].push_back(p.decode[fed - p.prompt.size()]);
      }
      steps.push_back({running[i].seq.get(), tokens[i], rows[i].data()});
    }
    const absl::Status s = engine.ForwardMany(steps);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    for (size_t i = 0; i < running.size(); ++i) {
      Transcript& t = out[running[i].plan];
      t.chunks.push_back(static_cast<int>(tokens[i].size()));
      t.rows.push_back(rows[i]);
      running[i].fed += tokens[i].size();
    }
    std::erase_if(running, [&](const Running& r) {
      const Plan& p = plans[r.plan];
      return r.fed == p.prompt.size() + p.decode.size();
    });
  }
  return out;
}

// `plan` alone on a fresh sequence of `engine`, cut into the same calls
// (a first call of the prefix a plan loads, then the batched run's).
inline Transcript ServeAlone(ForwardEngine& engine, const Plan& plan, const std::vector<int>& chunks) {
  Transcript out;
  std::vector<int32_t> all = plan.prompt;
  all.insert(all.end(), plan.decode.begin(), plan.decode.end());
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return out;
  std::vector<float> row(static_cast<size_t>(engine.n_vocab()));
  size_t at = 0;
  for (const int chunk : chunks) {
    const absl::Status s = engine.Forward(**seq, std::span(all).subspan(at, chunk),
                                          LogitRows::kLast, row.data());
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    out.chunks.push_back(chunk);
    out.rows.push_back(row);
    at += static_cast<size_t>(chunk);
  }
  return out;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every plan's batched transcript equals what `alone` (an engine of one
// sequence) gives it served by itself in the same calls, bit for bit.
inline void ExpectBatchedEqualsAlone(ForwardEngine& alone, const std::vector<Plan>& plans,
                                     const std::vector<Transcript>& batched) {
  ASSERT_EQ(batched.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "plan " << i << " (" << plans[i].prompt.size()
                                      << " prompt + " << plans[i].decode.size()
                                      << " decode tokens)");
    std::vector<int> chunks = batched[i].chunks;
    const size_t skipped = plans[i].loaded > 0 ? 1 : 0;
    if (skipped > 0) chunks.insert(chunks.begin(), plans[i].loaded);
    const Transcript solo = ServeAlone(alone, plans[i], chunks);
    ASSERT_EQ(solo.rows.size(), batched[i].rows.size() + skipped);
    for (size_t r = 0; r < batched[i].rows.size(); ++r) {
      EXPECT_TRUE(SameBits(solo.rows[r + skipped], batched[i].rows[r])) << "call " << r;
    }
  }
}

}  // namespace moetier::testing
