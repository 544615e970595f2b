// What the CUDA engine tests share: the test-vector models, running
// sequences through any ForwardEngine, and comparing logits (max error
// against a row's range, mean KL and top-1 agreement).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/forward_engine.h"
#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "vectors.h"

namespace moetier::cuda_test {

// The build's tests/data, or MOETIER_TEST_DATA_DIR when set: a GPU bundle
// (tests/cuda/make-gpu-bundle.sh) runs these tests far from the source tree.
inline std::string VectorPath(const std::string& name) {
  const char* dir = std::getenv("MOETIER_TEST_DATA_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : MOETIER_TEST_DATA_DIR) + "/vectors/" +
         name;
}

using testing::ReadFloats;
using testing::ReadIds;

struct Loaded {
  std::unique_ptr<GgufModel> gguf;
  Model model;
  std::vector<int32_t> ids;
  const ModelHparams& hp() const { return model.hparams; }
};

// tests/data/vectors/<name>.gguf and its ids; null (and a failure) when it
// does not load or has no more than min_ids ids.
inline std::unique_ptr<Loaded> Load(const std::string& name, size_t min_ids = 0) {
  auto out = std::make_unique<Loaded>();
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(VectorPath(name + ".gguf"));
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  out->gguf = *std::move(gguf);
  absl::StatusOr<Model> model = LoadModel(*out->gguf);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  out->model = *std::move(model);
  out->ids = ReadIds(VectorPath(name + ".ids"));
  EXPECT_GT(out->ids.size(), min_ids);
  return out;
}

// A new sequence, or a failure and null.
inline std::unique_ptr<Sequence> NewSequence(ForwardEngine& engine) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  return seq.ok() ? *std::move(seq) : nullptr;
}

// Every row of `ids` in one call, as a new sequence.
inline std::vector<float> RunAll(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  std::vector<float> logits(ids.size() * engine.n_vocab());
  std::unique_ptr<Sequence> seq = NewSequence(engine);
  if (seq == nullptr) return logits;
  const absl::Status s = engine.Forward(*seq, ids, LogitRows::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// Every row of `ids`, one token per call (decode), as a new sequence.
inline std::vector<float> RunDecode(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  const size_t n_vocab = engine.n_vocab();
  std::vector<float> logits(ids.size() * n_vocab);
  std::unique_ptr<Sequence> seq = NewSequence(engine);
  if (seq == nullptr) return logits;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t token[1] = {ids[i]};
    const absl::Status s =
        engine.Forward(*seq, token, LogitRows::kLast, logits.data() + i * n_vocab);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    EXPECT_EQ(seq->length(), static_cast<int>(i + 1));
  }
  return logits;
}

// The first `prompt` rows in one call, then one token per call: logits of
// every position, as a new sequence. Stops at the first error, which it
// returns.
inline absl::Status RunSequence(ForwardEngine& engine, const std::vector<int32_t>& ids,
                                size_t prompt, std::vector<float>* out) {
  const size_t n_vocab = engine.n_vocab();
  out->assign(ids.size() * n_vocab, 0.0f);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  if (!seq.ok()) return seq.status();
  const std::vector<int32_t> first(ids.begin(), ids.begin() + prompt);
  if (absl::Status s = engine.Forward(**seq, first, LogitRows::kAll, out->data()); !s.ok()) {
    return s;
  }
  for (size_t i = prompt; i < ids.size(); ++i) {
    const int32_t token[1] = {ids[i]};
    if (absl::Status s = engine.Forward(**seq, token, LogitRows::kLast, out->data() + i * n_vocab);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

inline std::vector<float> RunOk(ForwardEngine& engine, const std::vector<int32_t>& ids,
                                size_t prompt) {
  std::vector<float> logits;
  const absl::Status s = RunSequence(engine, ids, prompt, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// One measure of row error for the CUDA tests and the others.
using ::moetier::testing::WorstRowError;

// KL(expected || actual), mean over positions, and top-1 agreement.
using testing::Agreement;
inline Agreement Compare(const std::vector<float>& actual, const std::vector<float>& expected,
                         size_t n_vocab) {
  return testing::CompareLogits(actual, expected, n_vocab);
}

}  // namespace moetier::cuda_test
