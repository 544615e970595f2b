// Helpers shared by the synthetic-model tests: temporary directories, writing
// and reopening models, dequantizing tensors, and running the tool.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gtest/gtest.h"
#include "support/subprocess.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier::synth_test {

namespace fs = std::filesystem;

inline fs::path MakeTempDir(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / absl::StrCat("moetier_synth_test_", tag, "_", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::vector<uint8_t> ReadFileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline SynthOptions Options(SynthArch arch, std::string_view preset, SynthQuant quant, uint64_t seed,
                            const fs::path& out) {
  SynthOptions o;
  o.shape = *SynthPreset(arch, preset);
  o.quant = quant;
  o.seed = seed;
  o.out_path = out.string();
  o.threads = 2;
  return o;
}

// A qwen3moe model.
inline SynthOptions Options(std::string_view preset, SynthQuant quant, uint64_t seed, const fs::path& out) {
  return Options(SynthArch::kQwen3Moe, preset, quant, seed, out);
}

// The metadata moetier-synth writes for `shape` (F32), as a reader holds it.
inline absl::StatusOr<GgufMetadata> MetadataOf(const SynthShape& shape) {
  absl::StatusOr<std::vector<GgufKeyValue>> kvs = BuildSynthMetadata(shape, SynthQuant::kF32, "t");
  if (!kvs.ok()) return kvs.status();
  GgufMetadata md;
  for (GgufKeyValue& kv : *kvs) md.Add(std::move(kv));
  return md;
}

inline SynthPlan WriteOrDie(const SynthOptions& options) {
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  const absl::Status status = WriteSynthModel(*plan, options);
  EXPECT_TRUE(status.ok()) << status;
  return *plan;
}

inline std::unique_ptr<GgufModel> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

inline std::vector<float> Dequantize(const GgufModel& model, const GgufTensorInfo& info) {
  std::vector<float> out(static_cast<size_t>(info.element_count()));
  const std::span<const uint8_t> data = model.TensorData(info);
  const int64_t rows = info.ne[1] * info.ne[2] * info.ne[3];
  const uint64_t row_bytes = static_cast<uint64_t>(TensorRowBytes(info.type, info.ne[0]));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(info.type, data.data() + static_cast<uint64_t>(r) * row_bytes,
                  out.data() + r * info.ne[0], info.ne[0]);
  }
  return out;
}

inline double Mean(const std::vector<float>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

inline double StdDev(const std::vector<float>& v) {
  const double m = Mean(v);
  double acc = 0;
  for (float x : v) acc += (x - m) * (x - m);
  return std::sqrt(acc / static_cast<double>(v.size()));
}

using RunResult = testing::CommandResult;

// Runs moetier-synth with `args` (stdout and stderr together).
inline RunResult RunTool(const std::string& args) {
  return testing::RunBuiltProgram("tools/synth/moetier-synth", args);
}

}  // namespace moetier::synth_test
