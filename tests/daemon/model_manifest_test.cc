// The manifest of small written models: every expert's planned reads and
// slot placement give exactly the bytes the model was written with —
// separate and fused gate/up tensors, single files and split sets.
#include "manifest/model_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/model_fingerprint.h"
#include "gguf/writer/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_model.h"

namespace moetier {
namespace {

using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::TestModelOptions;
using ::testing::HasSubstr;

std::vector<uint8_t> ReadRange(const std::string& path, uint64_t offset, uint64_t size) {
  std::vector<uint8_t> out(size);
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(pread(fd, out.data(), size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
  close(fd);
  return out;
}

// Reads each matrix of an expert through the manifest's plan alone.
std::array<std::vector<uint8_t>, 3> ReadExpert(const ModelManifest& m, uint32_t layer,
                                               uint32_t expert) {
  const ExpertReadPlan plan = m.PlanExpertReads(layer, expert);
  std::array<std::vector<uint8_t>, 3> out;
  for (int i = 0; i < 3; ++i) {
    const SliceInRead& s = plan.slices[i];
    EXPECT_LT(s.read_index, plan.n_reads);
    const FileRange& r = plan.reads[s.read_index];
    EXPECT_LE(s.offset_in_read + s.size, r.size);
    out[i] = ReadRange(m.shard_paths[r.shard], r.offset + s.offset_in_read, s.size);
  }
  return out;
}

void ExpectEveryExpertMatches(const TestModel& model, const ModelManifest& m) {
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    const store::LayerDesc& d = m.layers[l].desc;
    for (uint32_t e = 0; e < m.n_expert; ++e) {
      const std::array<std::vector<uint8_t>, 3> got = ReadExpert(m, l, e);
      const daemon_test::TestExpert& want = model.experts[l][e];
      EXPECT_EQ(got[0].size(), d.gate.size_bytes);
      ASSERT_EQ(got[0], want.gate) << "layer " << l << " expert " << e;
      ASSERT_EQ(got[1], want.up) << "layer " << l << " expert " << e;
      ASSERT_EQ(got[2], want.down) << "layer " << l << " expert " << e;
    }
  }
}

absl::StatusOr<ModelManifest> ManifestOf(const TestModel& model) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(model.path);
  if (!gguf.ok()) return gguf.status();
  return BuildModelManifest(**gguf);
}

TEST(ModelManifestTest, SeparateGateAndUpTensors) {
  ScratchDir dir;
  TestModelOptions o;
  o.n_layer = 3;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "m", o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelManifest> m = ManifestOf(*model);
  ASSERT_TRUE(m.ok()) << m.status();

  EXPECT_STREQ(m->hparams.architecture, "qwen3moe");
  EXPECT_EQ(m->hparams.n_layer, 3u);
  EXPECT_EQ(m->hparams.n_expert, 8u);
  EXPECT_EQ(m->hparams.n_expert_used, 2u);
  EXPECT_EQ(m->hparams.n_embd, 64u);
  EXPECT_EQ(m->hparams.n_ff_exp, 32u);
  EXPECT_EQ(m->hparams.n_head, 4u);
  EXPECT_EQ(m->hparams.n_head_kv, 2u);
  EXPECT_EQ(m->hparams.head_dim, 16u);
  EXPECT_EQ(m->hparams.n_vocab, 96u);
  EXPECT_EQ(m->expert_count, 24u);

  // gate/up Q8_0 {64, 32}: 32 rows of 2 blocks of 34 bytes; down F16 on odd layers.
  const store::LayerDesc& even = m->layers[0].desc;
  const store::LayerDesc& odd = m->layers[1].desc;
  EXPECT_EQ(even.gate.size_bytes, 32u * 68u);
  EXPECT_EQ(even.gate.rows, 32);
  EXPECT_EQ(even.gate.cols, 64);
  EXPECT_EQ(even.down.rows, 64);
  EXPECT_EQ(even.down.size_bytes, 64u * 34u);
  EXPECT_EQ(odd.down.size_bytes, 64u * 64u);
  EXPECT_EQ(odd.down.tensor_type, static_cast<uint32_t>(TensorType::kF16));
  EXPECT_EQ(even.fused_gate_up, 0u);
  for (const store::LayerDesc* d : {&even, &odd}) {
    EXPECT_EQ(d->expert_bytes, d->gate.size_bytes + d->up.size_bytes + d->down.size_bytes);
  }
  EXPECT_EQ(m->max_expert_bytes, odd.expert_bytes);
  EXPECT_EQ(m->total_expert_bytes, 8 * (2 * even.expert_bytes + odd.expert_bytes));
  EXPECT_EQ(m->layers[0].sources.size(), 3u);
  ExpectEveryExpertMatches(*model, *m);

  // Dense: every tensor that is not an expert tensor, with its exact size.
  std::set<std::string> names;
  for (const DenseTensor& t : m->dense) {
    names.insert(t.name);
    EXPECT_EQ(t.size_bytes, model->dense.at(t.name).size()) << t.name;
    EXPECT_EQ(ReadRange(m->shard_paths[t.shard], t.file_offset, t.size_bytes),
              model->dense.at(t.name))
        << t.name;
  }
  EXPECT_EQ(names.size(), model->dense.size());
  for (const std::string& n : names) EXPECT_THAT(n, ::testing::Not(HasSubstr("_exps")));
}

TEST(ModelManifestTest, FusedGateUpIsSplitIntoItsHalves) {
  ScratchDir dir;
  TestModelOptions o;
  o.fused_gate_up = true;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "fused", o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelManifest> m = ManifestOf(*model);
  ASSERT_TRUE(m.ok()) << m.status();
  const store::LayerDesc& d = m->layers[0].desc;
  EXPECT_EQ(d.fused_gate_up, 1u);
  EXPECT_EQ(d.gate.rows, 32);  // half of 2 * n_ff
  EXPECT_EQ(d.up.rows, 32);
  EXPECT_EQ(m->layers[0].sources.size(), 2u);  // one read covers gate and up
  EXPECT_EQ(m->hparams.n_ff_exp, 32u);
  const ExpertReadPlan plan = m->PlanExpertReads(0, 5);
  EXPECT_EQ(plan.n_reads, 2u);
  EXPECT_EQ(plan.reads[0].size, 2 * d.gate.size_bytes);
  EXPECT_EQ(plan.slices[1].read_index, 0u);
  EXPECT_EQ(plan.slices[1].offset_in_read, d.gate.size_bytes);
  ExpectEveryExpertMatches(*model, *m);
}

TEST(ModelManifestTest, SplitModelRangesPointIntoTheRightShards) {
  ScratchDir dir;
  TestModelOptions o;
  o.n_shards = 3;
  o.n_layer = 4;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "split", o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelManifest> m = ManifestOf(*model);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shard_paths.size(), 3u);
  std::set<uint32_t> shards_used;
  for (uint32_t l = 0; l < m->n_layer; ++l) {
    for (const ExpertSource& s : m->layers[l].sources) shards_used.insert(s.shard);
  }
  EXPECT_EQ(shards_used.size(), 3u) << "the test model spreads expert tensors over every shard";
  ExpectEveryExpertMatches(*model, *m);
}

TEST(ModelManifestTest, FingerprintIdentifiesTheModel) {
  ScratchDir dir;
  TestModelOptions a;
  TestModelOptions b;
  b.n_ff = 64;
  absl::StatusOr<TestModel> ma = daemon_test::WriteTestModel(dir.path(), "a", a);
  absl::StatusOr<TestModel> ma2 = daemon_test::WriteTestModel(dir.path(), "a2", a);
  absl::StatusOr<TestModel> mb = daemon_test::WriteTestModel(dir.path(), "b", b);
  ASSERT_TRUE(ma.ok() && ma2.ok() && mb.ok());
  absl::StatusOr<ModelManifest> fa = ManifestOf(*ma);
  absl::StatusOr<ModelManifest> fa2 = ManifestOf(*ma2);
  absl::StatusOr<ModelManifest> fb = ManifestOf(*mb);
  ASSERT_TRUE(fa.ok() && fa2.ok() && fb.ok());
  EXPECT_EQ(fa->fingerprint, fa2->fingerprint) << "same layout, same fingerprint";
  EXPECT_NE(fa->fingerprint, fb->fingerprint);
  EXPECT_NE(fa->fingerprint, 0u);
}

// glm4moe: a dense first layer (no experts to store) and a last block that
// only predicts further tokens (nextn_predict_layers), which the worker
// never runs: neither its experts nor its other tensors go into the store.
TEST(ModelManifestTest, DenseLayersHoldNoExpertsAndTheMtpBlockIsLeftOut) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf =
      GgufModel::Open(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/glm4moe-tiny-f32.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<ModelManifest> m = BuildModelManifest(**gguf);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->n_layer, 3u);  // block_count 4 less one MTP block
  ASSERT_EQ(m->layers.size(), 3u);
  EXPECT_FALSE(m->HasExperts(0));
  EXPECT_TRUE(m->HasExperts(1));
  EXPECT_TRUE(m->HasExperts(2));
  EXPECT_EQ(m->expert_count, 2u * m->n_expert);
  bool dense_ffn = false;
  for (const DenseTensor& d : m->dense) {
    EXPECT_EQ(d.name.rfind("blk.3.", 0), std::string::npos) << d.name;
    dense_ffn = dense_ffn || d.name == "blk.0.ffn_down.weight";
  }
  EXPECT_TRUE(dense_ffn);
}

TEST(ModelManifestTest, RefusesModelsWithoutExperts) {
  ScratchDir dir;
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("general.architecture", GgufValue::String("qwen3")).ok());
  ASSERT_TRUE(w.AddKeyValue("qwen3.block_count", GgufValue::Uint32(1)).ok());
  ASSERT_TRUE(w.AddTensor("output_norm.weight", TensorType::kF32, {8}).ok());
  ASSERT_TRUE(w.Open(dir.File("dense.gguf")).ok());
  std::vector<uint8_t> zeros(32, 0);
  ASSERT_TRUE(w.AppendTensorData(zeros).ok());
  ASSERT_TRUE(w.Finish().ok());
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(dir.File("dense.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<ModelManifest> m = BuildModelManifest(**gguf);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("expert_count"));
}

// A model whose layer 0 lacks ffn_up_exps, or whose down tensor is misshapen.
absl::Status WriteBrokenModel(const std::string& path, bool drop_up, bool bad_down) {
  GgufWriter w;
  absl::Status s = w.AddKeyValue("general.architecture", GgufValue::String("qwen3moe"));
  if (s.ok()) s = w.AddKeyValue("qwen3moe.block_count", GgufValue::Uint32(1));
  if (s.ok()) s = w.AddKeyValue("qwen3moe.expert_count", GgufValue::Uint32(4));
  if (s.ok()) s = w.AddKeyValue("qwen3moe.expert_used_count", GgufValue::Uint32(2));
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"blk.0.ffn_gate_exps.weight", {32, 16, 4}},
      {"blk.0.ffn_up_exps.weight", {32, 16, 4}},
      {"blk.0.ffn_down_exps.weight", {16, bad_down ? 16 : 32, 4}},
  };
  if (drop_up) tensors.erase(tensors.begin() + 1);
  for (const auto& [name, ne] : tensors) {
    if (s.ok()) s = w.AddTensor(name, TensorType::kF32, ne);
  }
  if (s.ok()) s = w.Open(path);
  for (const auto& [name, ne] : tensors) {
    std::vector<uint8_t> bytes(4 * static_cast<size_t>(ne[0] * ne[1] * ne[2]), 7);
    if (s.ok()) s = w.AppendTensorData(bytes);
  }
  if (s.ok()) s = w.Finish();
  return s;
}

TEST(ModelManifestTest, RefusesIncompleteOrMisshapenExpertTensors) {
  ScratchDir dir;
  ASSERT_TRUE(WriteBrokenModel(dir.File("noup.gguf"), true, false).ok());
  ASSERT_TRUE(WriteBrokenModel(dir.File("baddown.gguf"), false, true).ok());
  absl::StatusOr<std::unique_ptr<GgufModel>> noup = GgufModel::Open(dir.File("noup.gguf"));
  absl::StatusOr<std::unique_ptr<GgufModel>> baddown = GgufModel::Open(dir.File("baddown.gguf"));
  ASSERT_TRUE(noup.ok() && baddown.ok());
  absl::StatusOr<ModelManifest> a = BuildModelManifest(**noup);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("only some of its expert tensors"));
  absl::StatusOr<ModelManifest> b = BuildModelManifest(**baddown);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("blk.0.ffn_down_exps.weight"));
}

// The full Qwen3-30B-A3B expert shape: 48 layers x 128 experts, hidden 2048,
// expert FFN 768, gate/up Q4_K, down Q6_K (Q4_K on odd layers, as mixed
// quantizations do). Only the header is written; the file is extended
// sparse to its full ~17.5 GiB, which the reader maps without touching.
TEST(ModelManifestTest, FullQwen3MoeShapeWithoutWritingTheData) {
  ScratchDir dir;
  const std::string path = dir.File("qwen3-30b-a3b-shape.gguf");
  constexpr uint32_t kLayers = 48;
  constexpr uint32_t kExperts = 128;
  constexpr int64_t kEmbd = 2048;
  constexpr int64_t kFf = 768;
  uint64_t file_bytes = 0;
  {
    GgufWriter w;
    absl::Status s;
    auto kv = [&](std::string key, GgufValue value) {
      if (s.ok()) s = w.AddKeyValue(std::move(key), std::move(value));
    };
    kv("general.architecture", GgufValue::String("qwen3moe"));
    kv("qwen3moe.block_count", GgufValue::Uint32(kLayers));
    kv("qwen3moe.context_length", GgufValue::Uint32(40960));
    kv("qwen3moe.embedding_length", GgufValue::Uint32(kEmbd));
    kv("qwen3moe.feed_forward_length", GgufValue::Uint32(6144));
    kv("qwen3moe.attention.head_count", GgufValue::Uint32(32));
    kv("qwen3moe.attention.head_count_kv", GgufValue::Uint32(4));
    kv("qwen3moe.attention.key_length", GgufValue::Uint32(128));
    kv("qwen3moe.attention.value_length", GgufValue::Uint32(128));
    kv("qwen3moe.expert_count", GgufValue::Uint32(kExperts));
    kv("qwen3moe.expert_used_count", GgufValue::Uint32(8));
    kv("qwen3moe.expert_feed_forward_length", GgufValue::Uint32(kFf));
    for (uint32_t l = 0; l < kLayers && s.ok(); ++l) {
      const std::string b = absl::StrFormat("blk.%d.", l);
      s = w.AddTensor(b + "ffn_gate_exps.weight", TensorType::kQ4_K, {kEmbd, kFf, kExperts});
      if (s.ok()) {
        s = w.AddTensor(b + "ffn_up_exps.weight", TensorType::kQ4_K, {kEmbd, kFf, kExperts});
      }
      if (s.ok()) {
        s = w.AddTensor(b + "ffn_down_exps.weight",
                        l % 2 == 0 ? TensorType::kQ6_K : TensorType::kQ4_K, {kFf, kEmbd, kExperts});
      }
    }
    if (s.ok()) s = w.Open(path);
    ASSERT_TRUE(s.ok()) << s;
    file_bytes = (w.bytes_written() + 31) / 32 * 32;
    for (size_t i = 0; i < w.tensor_count(); ++i) file_bytes += (w.TensorSizeBytes(i) + 31) / 32 * 32;
    // The writer is dropped without Finish: its destructor flushes the header.
  }
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(file_bytes)), 0) << strerror(errno);

  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<ModelManifest> m = BuildModelManifest(**gguf);
  ASSERT_TRUE(m.ok()) << m.status();

  // Q4_K: 144 bytes per 256 weights; Q6_K: 210 bytes per 256 weights.
  constexpr uint64_t kGateBytes = kFf * (kEmbd / 256 * 144);      // 884,736
  constexpr uint64_t kDownQ6Bytes = kEmbd * (kFf / 256 * 210);    // 1,290,240
  constexpr uint64_t kDownQ4Bytes = kEmbd * (kFf / 256 * 144);    // 884,736
  EXPECT_EQ(m->n_layer, kLayers);
  EXPECT_EQ(m->n_expert, kExperts);
  EXPECT_EQ(m->expert_count, uint64_t{kLayers} * kExperts);
  EXPECT_EQ(m->hparams.n_embd, uint32_t{kEmbd});
  EXPECT_EQ(m->hparams.n_ff_exp, uint32_t{kFf});
  EXPECT_EQ(m->max_expert_bytes, 2 * kGateBytes + kDownQ6Bytes);
  EXPECT_EQ(m->total_expert_bytes, uint64_t{kExperts} * (kLayers / 2) *
                                       (4 * kGateBytes + kDownQ6Bytes + kDownQ4Bytes));
  EXPECT_EQ(m->total_expert_bytes, 17'553'162'240u);
  EXPECT_EQ(m->shard_sizes[0], file_bytes);

  for (uint32_t l = 0; l < kLayers; ++l) {
    const store::LayerDesc& d = m->layers[l].desc;
    const uint64_t down_bytes = l % 2 == 0 ? kDownQ6Bytes : kDownQ4Bytes;
    ASSERT_EQ(d.gate.size_bytes, kGateBytes) << "layer " << l;
    ASSERT_EQ(d.up.size_bytes, kGateBytes) << "layer " << l;
    ASSERT_EQ(d.down.size_bytes, down_bytes) << "layer " << l;
    ASSERT_EQ(d.expert_bytes, 2 * kGateBytes + down_bytes) << "layer " << l;
    const GgufTensorInfo* gate = (*gguf)->FindTensor(absl::StrFormat("blk.%d.ffn_gate_exps.weight", l));
    const GgufTensorInfo* up = (*gguf)->FindTensor(absl::StrFormat("blk.%d.ffn_up_exps.weight", l));
    const GgufTensorInfo* down = (*gguf)->FindTensor(absl::StrFormat("blk.%d.ffn_down_exps.weight", l));
    ASSERT_TRUE(gate != nullptr && up != nullptr && down != nullptr);
    // Tensors follow each other in declaration order, each padded to 32.
    ASSERT_EQ(up->file_offset, gate->file_offset + kExperts * kGateBytes);
    ASSERT_EQ(down->file_offset, up->file_offset + kExperts * kGateBytes);
    for (uint32_t e : {0u, 1u, 63u, 127u}) {
      const ExpertReadPlan plan = m->PlanExpertReads(l, e);
      const uint64_t want_offset[3] = {gate->file_offset + e * kGateBytes,
                                       up->file_offset + e * kGateBytes,
                                       down->file_offset + e * down_bytes};
      const uint64_t want_size[3] = {kGateBytes, kGateBytes, down_bytes};
      for (int i = 0; i < 3; ++i) {
        const SliceInRead& sl = plan.slices[i];
        ASSERT_LT(sl.read_index, plan.n_reads);
        const FileRange& r = plan.reads[sl.read_index];
        EXPECT_EQ(r.offset + sl.offset_in_read, want_offset[i]) << l << "/" << e << "/" << i;
        EXPECT_EQ(sl.size, want_size[i]) << l << "/" << e << "/" << i;
        EXPECT_LE(r.offset + r.size, file_bytes);
      }
    }
  }
  EXPECT_TRUE(m->dense.empty()) << "an expert tensor was taken for a dense one: "
                                << m->dense.front().name;
}

}  // namespace
}  // namespace moetier
