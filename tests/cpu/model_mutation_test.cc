// Mutation campaign over the architecture loaders and the CPU engine: each
// architecture's tiny vector with one of its own keys changed (to 0, 1, a
// huge or negative number, NaN, another type, an empty or hostile array, or
// removed), or one tensor's shape changed, goes through LoadModel, then
// CpuEngine::Create and a three-token Forward when accepted. Every step must
// end in a Status, never a crash or a check failure; a refusal must say
// something; and an accepted hyperparameter must keep the logits finite.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/cpu_engine.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

using testing::EditableGguf;
using testing::EditableTensor;

constexpr uint32_t kSeed = 20261207;
constexpr int kTensorMutants = 24;

// What one mutant came to.
struct Outcome {
  int refused_at_load = 0;
  int refused_by_engine = 0;
  int ran = 0;
};

// The replacements a key may get, whatever its type.
std::vector<GgufValue> Replacements(const GgufValue& v) {
  std::vector<GgufValue> out = {
      GgufValue::Uint32(0),
      GgufValue::Uint32(1),
      GgufValue::Uint32(3),
      GgufValue::Uint32(0xFFFFFFFFu),
      GgufValue::Int32(-1),
      GgufValue::Uint64(uint64_t{1} << 40),
      GgufValue::Float32(std::numeric_limits<float>::quiet_NaN()),
      GgufValue::Float32(-1.0f),
      GgufValue::Float32(std::numeric_limits<float>::infinity()),
      GgufValue::String("x"),
      GgufValue::Int32Array({}),
      GgufValue::Int32Array({-5, 1 << 30, 0, 7}),
  };
  if (v.type == GgufValueType::kArray) {
    out.push_back(GgufValue::Int32Array({0, 0, 0, 0}));
    out.push_back(GgufValue::Int32Array({1}));
  }
  return out;
}

class ModelMutationTest : public ::testing::TestWithParam<const char*> {
 protected:
  // Writes, loads and runs `g`, counting where it stopped.
  void Try(const EditableGguf& g, const std::string& what, Outcome& outcome) {
    SCOPED_TRACE(what);
    const std::string path = testing::TempPath(std::string(GetParam()) + "-mutant.gguf");
    if (!g.Write(path).ok()) return;  // a shape the writer itself refuses
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
    if (!gguf.ok()) {
      EXPECT_FALSE(gguf.status().message().empty());
      ++outcome.refused_at_load;
      return;
    }
    absl::StatusOr<Model> model = LoadModel(**gguf);
    if (!model.ok()) {
      EXPECT_FALSE(model.status().message().empty());
      ++outcome.refused_at_load;
      return;
    }
    CpuEngineConfig config;
    config.max_ctx = 16;
    config.n_threads = 1;
    config.max_batch = 4;
    absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(*model, config);
    if (!engine.ok()) {
      EXPECT_FALSE(engine.status().message().empty());
      ++outcome.refused_by_engine;
      return;
    }
    absl::StatusOr<std::unique_ptr<Sequence>> seq = (*engine)->NewSequence();
    ASSERT_TRUE(seq.ok()) << seq.status();
    const int32_t last = (*engine)->n_vocab() - 1;
    const std::vector<int32_t> tokens = {1, last, 0};
    std::vector<float> logits(tokens.size() * static_cast<size_t>((*engine)->n_vocab()));
    const absl::Status s = (*engine)->Forward(**seq, tokens, LogitRows::kAll, logits.data());
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
      ++outcome.refused_by_engine;
      return;
    }
    ++outcome.ran;
    for (float x : logits) {
      if (!std::isfinite(x)) {
        ADD_FAILURE() << "accepted, but the logits are not finite";
        break;
      }
    }
  }
};

TEST_P(ModelMutationTest, EveryMutantEndsInAStatus) {
  absl::StatusOr<EditableGguf> base =
      EditableGguf::Read(testing::TestDataPath(absl::StrCat("vectors/", GetParam(), ".gguf")));
  ASSERT_TRUE(base.ok()) << base.status();
  std::string arch;
  for (const GgufKeyValue& kv : base->kvs) {
    if (kv.key == "general.architecture") arch = std::get<std::string>(kv.value.data);
  }
  ASSERT_FALSE(arch.empty());
  std::mt19937 rng(kSeed);
  Outcome outcome;
  for (const GgufKeyValue& kv : base->kvs) {
    if (!absl::StartsWith(kv.key, arch + ".")) continue;
    {
      EditableGguf g = *base;
      g.Remove(kv.key);
      Try(g, kv.key + " removed", outcome);
    }
    const std::vector<GgufValue> replacements = Replacements(kv.value);
    for (size_t i = 0; i < replacements.size(); ++i) {
      EditableGguf g = *base;
      g.Set(kv.key, replacements[i]);
      Try(g, absl::StrCat(kv.key, " replaced (variant ", i, ")"), outcome);
    }
  }
  // The tensors the main pass reads: a multi-token-prediction layer's
  // (glm4moe's last block) are never read, so their shape is no error.
  absl::flat_hash_set<std::string> read;
  {
    const std::string path = testing::TempPath(std::string(GetParam()) + "-base.gguf");
    ASSERT_TRUE(base->Write(path).ok());
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    const absl::StatusOr<Model> model = LoadModel(**gguf);
    ASSERT_TRUE(model.ok()) << model.status();
    for (const WeightRef* w : WeightRefs(model->weights, /*include_experts=*/true)) {
      read.insert(w->name);
    }
  }
  // A tensor's dimension off by one, doubled or halved, its bytes resized
  // to match: the loader must refuse it, naming the tensor. (token_embd's
  // rows define the vocabulary, so they are not a wrong shape.)
  for (int i = 0; i < kTensorMutants; ++i) {
    EditableGguf g = *base;
    const size_t t = std::uniform_int_distribution<size_t>(0, g.tensors.size() - 1)(rng);
    EditableTensor& tensor = g.tensors[t];
    if (tensor.type != TensorType::kF32 || tensor.name == "token_embd.weight" ||
        !read.contains(tensor.name)) {
      continue;
    }
    const size_t d = std::uniform_int_distribution<size_t>(0, tensor.ne.size() - 1)(rng);
    const int change = std::uniform_int_distribution<int>(0, 2)(rng);
    const int64_t old = tensor.ne[d];
    tensor.ne[d] = change == 0 ? old + 1 : change == 1 ? old * 2 : std::max<int64_t>(1, old / 2);
    if (tensor.ne[d] == old) continue;
    int64_t elements = 1;
    for (int64_t n : tensor.ne) elements *= n;
    tensor.data.assign(static_cast<size_t>(elements) * sizeof(float), 0);
    const std::string path = testing::TempPath(std::string(GetParam()) + "-shape.gguf");
    ASSERT_TRUE(g.Write(path).ok());
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    const absl::StatusOr<Model> model = LoadModel(**gguf);
    ASSERT_FALSE(model.ok()) << tensor.name << " dim " << d << ": " << old << " -> " << tensor.ne[d]
                             << " was accepted";
    EXPECT_TRUE(absl::StrContains(model.status().message(), tensor.name))
        << model.status().message();
    ++outcome.refused_at_load;
  }
  std::printf("%s: %d refused at load, %d refused by the engine, %d ran\n", GetParam(),
              outcome.refused_at_load, outcome.refused_by_engine, outcome.ran);
  EXPECT_GT(outcome.refused_at_load, 0);
  EXPECT_GT(outcome.ran, 0);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ModelMutationTest,
                         ::testing::Values("tiny-f32", "mixtral-tiny-f32", "olmoe-tiny-f32",
                                           "qwen35moe-tiny-f32", "qwen3next-tiny-f32",
                                           "qwen2moe-tiny-f32", "qwen3vlmoe-tiny-f32",
                                           "glm4moe-tiny-f32", "ernie45moe-tiny-f32",
                                           "gpt-oss-tiny-f32"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace moetier
