// CpuEngine::CopyState and LoadState: a state copied out of one sequence
// and loaded into another (another slot) continues bit for bit as the
// original does, with every KV cache type and for recurrent layers; what
// cannot be loaded is refused with a reason, and the state's bytes are
// what its KV rows and recurrent layers take.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/kv_cache_types.h"
#include "vectors_model.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<CpuEngine> Engine(const Model& model, KvCacheTypes types = {}) {
  CpuEngineConfig config;
  config.max_ctx = 64;
  config.n_threads = 2;
  config.max_sequences = 3;
  config.kv_types = types;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::unique_ptr<Sequence> New(CpuEngine& engine) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  return seq.ok() ? *std::move(seq) : nullptr;
}

// The last row of running `tokens` on `seq`.
std::vector<float> LastRow(CpuEngine& engine, Sequence& seq, std::span<const int32_t> tokens) {
  std::vector<float> row(static_cast<size_t>(engine.n_vocab()));
  const absl::Status s = engine.Forward(seq, tokens, LogitRows::kLast, row.data());
  EXPECT_TRUE(s.ok()) << s;
  return row;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  std::string model;
  KvCacheTypes types;
};

class SequenceStateTest : public ::testing::TestWithParam<Case> {};

// A copy at 14 positions, loaded into another slot after that slot held
// other tokens, continues as the original sequence does.
TEST_P(SequenceStateTest, ALoadedStateContinuesAsTheOriginal) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel(GetParam().model);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(m->model, GetParam().types);
  ASSERT_NE(engine, nullptr);
  const std::span<const int32_t> ids(m->ids);
  ASSERT_GE(ids.size(), 24u);
  std::unique_ptr<Sequence> original = New(*engine);
  LastRow(*engine, *original, ids.first(14));
  absl::StatusOr<std::unique_ptr<SequenceState>> state = engine->CopyState(*original);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->length(), 14);
  const SequenceStateSize size = SequenceStateSizeOf(m->model, GetParam().types);
  EXPECT_EQ((*state)->bytes(), size.BytesAt(14));

  std::unique_ptr<Sequence> other = New(*engine);
  LastRow(*engine, *other, ids.subspan(4, 20));  // state the load must replace
  ASSERT_TRUE(engine->SaveCheckpoint(*other).ok());
  ASSERT_TRUE(engine->LoadState(*other, **state, 14).ok());
  EXPECT_EQ(other->length(), 14);
  EXPECT_EQ(other->checkpoint_length(), -1) << "the slot's checkpoint is not the state's";

  for (int step = 0; step < 3; ++step) {
    const std::span<const int32_t> next = ids.subspan(14 + 3 * step, 3);
    EXPECT_TRUE(SameBits(LastRow(*engine, *original, next), LastRow(*engine, *other, next)))
        << "step " << step;
  }
}

// A state of attention layers only serves any shorter start: loading 9 of
// its 14 positions and running on equals running those 9 then the rest.
TEST_P(SequenceStateTest, AttentionLayersLoadAShorterStartAndRecurrentOnesRefuse) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel(GetParam().model);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(m->model, GetParam().types);
  ASSERT_NE(engine, nullptr);
  const std::span<const int32_t> ids(m->ids);
  std::unique_ptr<Sequence> source = New(*engine);
  LastRow(*engine, *source, ids.first(14));
  absl::StatusOr<std::unique_ptr<SequenceState>> state = engine->CopyState(*source);
  ASSERT_TRUE(state.ok()) << state.status();

  std::unique_ptr<Sequence> loaded = New(*engine);
  const absl::Status s = engine->LoadState(*loaded, **state, 9);
  if (SequenceStateSizeOf(m->model).recurrent_bytes > 0) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("at position 14 only"));
    EXPECT_EQ(loaded->length(), 0);
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  std::unique_ptr<Sequence> alone = New(*engine);
  ASSERT_NE(alone, nullptr);
  LastRow(*engine, *alone, ids.first(9));
  // The fork: different tokens after the shared nine.
  const std::span<const int32_t> fork = ids.subspan(15, 6);
  EXPECT_TRUE(SameBits(LastRow(*engine, *alone, fork), LastRow(*engine, *loaded, fork)));
}

INSTANTIATE_TEST_SUITE_P(
    Vectors, SequenceStateTest,
    ::testing::Values(Case{"tiny-q8_0", {}}, Case{"small-q4_k_m", {}},
                      Case{"small-q4_k_m", {TensorType::kQ8_0, TensorType::kQ4_0}},
                      Case{"small-q4_k_m", {TensorType::kF16, TensorType::kF16}},
                      Case{"qwen35moe-tiny-f32", {}},
                      Case{"qwen35moe-small-q4_k_m", {TensorType::kQ8_0, TensorType::kQ8_0}}),
    [](const ::testing::TestParamInfo<Case>& param) {
      std::string name = param.param.model + "_" + std::string(KvCacheTypeName(param.param.types.k)) +
                         "_" + std::string(KvCacheTypeName(param.param.types.v));
      for (char& c : name) c = (c == '-' ? '_' : c);
      return name;
    });

TEST(SequenceStateErrorsTest, WhatCannotBeCopiedOrLoadedSaysWhy) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(m->model);
  std::unique_ptr<CpuEngine> another = Engine(m->model);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(another, nullptr);
  std::unique_ptr<Sequence> empty = New(*engine);
  EXPECT_EQ(engine->CopyState(*empty).status().code(), absl::StatusCode::kInvalidArgument);

  std::unique_ptr<Sequence> seq = New(*engine);
  LastRow(*engine, *seq, std::span<const int32_t>(m->ids).first(6));
  absl::StatusOr<std::unique_ptr<SequenceState>> state = engine->CopyState(*seq);
  ASSERT_TRUE(state.ok()) << state.status();
  for (const int bad : {0, 7}) {
    const absl::Status s = engine->LoadState(*empty, **state, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("a state that holds 6"));
  }
  std::unique_ptr<Sequence> elsewhere = New(*another);
  const absl::Status foreign = another->LoadState(*elsewhere, **state, 6);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(foreign.message()), HasSubstr("another engine"));
  // Nor does an engine load into another's sequence.
  EXPECT_FALSE(another->LoadState(*seq, **state, 6).ok());
  EXPECT_EQ(empty->length(), 0);
}

}  // namespace
}  // namespace moetier
