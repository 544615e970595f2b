// PrefixPool: which kept state serves a prompt and how much of it (any
// shared start for attention-only models, the exact length with recurrent
// layers, never the prompt's last token); where a prefill stops to store
// (a whole prompt; or where prompts fork and at the checkpoint); and the
// byte budget, least recently used first out. A fake engine stands in:
// the pool only moves opaque states between it and its sequences.
#include "generation/prefix_pool.h"

#include <memory>
#include <numeric>
#include <vector>

#include "engine/sequence.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

constexpr uint64_t kBytesPerPosition = 1000;

class FakeState final : public SequenceState {
 public:
  explicit FakeState(int length) : length_(length) {}
  int length() const override { return length_; }
  uint64_t bytes() const override { return kBytesPerPosition * static_cast<uint64_t>(length_); }

 private:
  int length_;
};

// Sequences whose length is all there is; CopyState and LoadState count.
class FakeEngine final : public ForwardEngine {
 public:
  FakeEngine() : slots_(this, 4, 256) {}
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override { return slots_.Acquire(); }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows,
                       float*) override {
    slots_.SetLength(seq, seq.length() + static_cast<int>(tokens.size()));
    return absl::OkStatus();
  }
  absl::Status SaveCheckpoint(Sequence&) override { return absl::OkStatus(); }
  absl::Status RestoreCheckpoint(Sequence&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) override {
    if (!copy_works) return absl::UnimplementedError("no copies here");
    ++copies;
    return std::make_unique<FakeState>(seq.length());
  }
  absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) override {
    last_loaded_from = state.length();
    slots_.SetLength(seq, length);
    return absl::OkStatus();
  }
  absl::StatusOr<int32_t> Sample(Sampler&) override { return 0; }
  absl::StatusOr<std::span<const float>> LastLogitsRow() override {
    return absl::FailedPreconditionError("none");
  }
  int n_vocab() const override { return 100; }
  int max_ctx() const override { return 256; }
  int max_sequences() const override { return 4; }

  bool copy_works = true;
  int copies = 0;
  int last_loaded_from = -1;

 private:
  SequenceSlots slots_;
};

// Tokens first, first + 1, ...
std::vector<int32_t> Ids(int first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Computes `prompt`'s first `length` positions on a new sequence and
// stores them.
void Store(PrefixPool& pool, FakeEngine& engine, const std::vector<int32_t>& prompt,
           int length) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  ASSERT_TRUE(seq.ok());
  const std::span<const int32_t> prefix = std::span(prompt).first(static_cast<size_t>(length));
  ASSERT_TRUE(engine.Forward(**seq, prefix, LogitRows::kNone, nullptr).ok());
  ASSERT_TRUE(pool.Store(engine, **seq, prefix).ok());
}

TEST(PrefixPoolTest, AnAttentionStateServesAnySharedStartButTheLastToken) {
  FakeEngine engine;
  PrefixPool pool(1 << 20, /*recurrent=*/false);
  const std::vector<int32_t> system = Ids(1, 30);
  Store(pool, engine, system, 30);
  EXPECT_EQ(pool.UsableLength(Join(system, Ids(500, 4))), 30);
  EXPECT_EQ(pool.UsableLength(Join(Ids(1, 20), Ids(900, 5))), 20) << "a fork inside the state";
  EXPECT_EQ(pool.UsableLength(system), 29) << "the last token's logits start generation";
  EXPECT_EQ(pool.UsableLength(Ids(2, 30)), 0);

  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  ASSERT_TRUE(seq.ok());
  absl::StatusOr<int> loaded = pool.LoadInto(engine, **seq, Join(Ids(1, 20), Ids(900, 5)));
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded, 20);
  EXPECT_EQ((*seq)->length(), 20);
  EXPECT_EQ(engine.last_loaded_from, 30);
  EXPECT_EQ(*pool.LoadInto(engine, **seq, Ids(700, 9)), 0);
  EXPECT_EQ((*seq)->length(), 20) << "no state serves: the sequence is left as it was";
}

TEST(PrefixPoolTest, ARecurrentStateServesOnlyPromptsThatContainItWhole) {
  FakeEngine engine;
  PrefixPool pool(1 << 20, /*recurrent=*/true);
  const std::vector<int32_t> prompt = Ids(1, 40);
  Store(pool, engine, prompt, 24);
  EXPECT_EQ(pool.UsableLength(prompt), 24);
  EXPECT_EQ(pool.UsableLength(Join(Ids(1, 24), Ids(300, 1))), 24);
  EXPECT_EQ(pool.UsableLength(Ids(1, 24)), 0) << "it would leave nothing to compute";
  EXPECT_EQ(pool.UsableLength(Join(Ids(1, 20), Ids(300, 10))), 0)
      << "recurrent layers cannot rewind to 20";
}

TEST(PrefixPoolTest, AttentionModelsStoreEachPromptWholeOnce) {
  FakeEngine engine;
  PrefixPool pool(1 << 20, /*recurrent=*/false);
  const std::vector<int32_t> first = Ids(1, 30);
  EXPECT_EQ(pool.PlanStores(first, 0, 30), std::vector<int>({30}));
  Store(pool, engine, first, 30);
  EXPECT_TRUE(pool.PlanStores(first, 29, 30).empty()) << "already kept";
  EXPECT_TRUE(pool.PlanStores(Ids(1, 12), 11, 12).empty()) << "a kept state covers it";
  // A follow-up that extends the prompt replaces its state.
  const std::vector<int32_t> longer = Join(first, Ids(100, 10));
  EXPECT_EQ(pool.PlanStores(longer, 30, 40), std::vector<int>({40}));
  Store(pool, engine, longer, 40);
  EXPECT_EQ(pool.states(), 1u);
  EXPECT_EQ(pool.bytes(), 40 * kBytesPerPosition + 40 * sizeof(int32_t));
}

TEST(PrefixPoolTest, RecurrentModelsStoreWherePromptsForkAndAtTheCheckpoint) {
  FakeEngine engine;
  PrefixPool pool(1 << 20, /*recurrent=*/true);
  const std::vector<int32_t> system = Ids(1, 24);
  const std::vector<int32_t> first = Join(system, Ids(100, 16));
  EXPECT_EQ(pool.PlanStores(first, 0, 39), std::vector<int>({39}))
      << "nothing seen yet to fork from";
  // The second prompt shares the system prompt with the first one.
  const std::vector<int32_t> second = Join(system, Ids(200, 10));
  EXPECT_EQ(pool.PlanStores(second, 0, 33), std::vector<int>({24, 33}));
  Store(pool, engine, second, 24);
  // The third forks from the same place, now kept: it loads it instead.
  const std::vector<int32_t> third = Join(system, Ids(300, 8));
  EXPECT_EQ(pool.UsableLength(third), 24);
  EXPECT_EQ(pool.PlanStores(third, 24, 31), std::vector<int>({31}));
  // A start shared for fewer than kMinSharedPrefixTokens is no fork.
  const std::vector<int32_t> short_share = Join(Ids(1, kMinSharedPrefixTokens - 1), Ids(400, 20));
  EXPECT_EQ(pool.PlanStores(short_share, 0, 34), std::vector<int>({34}));
}

TEST(PrefixPoolTest, TheBudgetDropsTheLeastRecentlyUsedState) {
  FakeEngine engine;
  const uint64_t state_bytes = 20 * (kBytesPerPosition + sizeof(int32_t));
  PrefixPool pool(2 * state_bytes, /*recurrent=*/true);
  const std::vector<int32_t> a = Join(Ids(1, 20), Ids(5000, 2));
  const std::vector<int32_t> b = Join(Ids(101, 20), Ids(5000, 2));
  const std::vector<int32_t> c = Join(Ids(201, 20), Ids(5000, 2));
  Store(pool, engine, a, 20);
  Store(pool, engine, b, 20);
  EXPECT_EQ(pool.bytes(), 2 * state_bytes);
  // Using a makes b the least recently used.
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*pool.LoadInto(engine, **seq, a), 20);
  Store(pool, engine, c, 20);
  EXPECT_EQ(pool.states(), 2u);
  EXPECT_EQ(pool.bytes(), 2 * state_bytes);
  EXPECT_EQ(pool.UsableLength(a), 20);
  EXPECT_EQ(pool.UsableLength(b), 0);
  EXPECT_EQ(pool.UsableLength(c), 20);
  // A state larger than the whole budget is not kept, and drops nothing.
  const std::vector<int32_t> huge = Ids(1000, 60);
  Store(pool, engine, huge, 50);
  EXPECT_EQ(pool.states(), 2u);
  EXPECT_EQ(pool.UsableLength(huge), 0);
}

TEST(PrefixPoolTest, AnEmptyBudgetOrADisabledPoolKeepsNothing) {
  FakeEngine engine;
  PrefixPool off(0, /*recurrent=*/false);
  EXPECT_TRUE(off.PlanStores(Ids(1, 30), 0, 30).empty());
  Store(off, engine, Ids(1, 30), 30);
  EXPECT_EQ(off.states(), 0u);
  EXPECT_EQ(engine.copies, 0) << "nothing is copied for a pool that keeps nothing";

  PrefixPool pool(1 << 20, /*recurrent=*/false);
  Store(pool, engine, Ids(1, 30), 30);
  pool.Disable();
  EXPECT_EQ(pool.states(), 0u);
  EXPECT_EQ(pool.bytes(), 0u);
  EXPECT_EQ(pool.UsableLength(Ids(1, 31)), 0);
}

TEST(PrefixPoolTest, AnEngineThatCannotCopySaysSo) {
  FakeEngine engine;
  engine.copy_works = false;
  PrefixPool pool(1 << 20, /*recurrent=*/false);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  ASSERT_TRUE(seq.ok());
  const std::vector<int32_t> prompt = Ids(1, 8);
  ASSERT_TRUE(engine.Forward(**seq, prompt, LogitRows::kNone, nullptr).ok());
  EXPECT_TRUE(absl::IsUnimplemented(pool.Store(engine, **seq, prompt)));
  EXPECT_EQ(pool.states(), 0u);
}

}  // namespace
}  // namespace moetier
