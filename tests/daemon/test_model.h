// Small qwen3moe-shaped GGUF models for the daemon tests, written with the
// project's GgufWriter. Every tensor gets distinct pseudo-random bytes, and
// each expert's gate, up and down bytes are kept in memory, generated per
// expert: the expected contents of a slot come from here, not from the
// offset arithmetic under test.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::daemon_test {

struct TestModelOptions {
  uint32_t n_layer = 2;
  uint32_t n_expert = 8;
  uint32_t n_expert_used = 2;
  int64_t n_embd = 64;
  int64_t n_ff = 32;
  TensorType expert_type = TensorType::kQ8_0;
  // Odd layers store ffn_down_exps as this type, so layers differ in size.
  TensorType odd_layer_down_type = TensorType::kF16;
  bool fused_gate_up = false;
  uint32_t n_shards = 1;  // > 1: a split set, tensors spread over the shards
  uint32_t seed = 1;
};

struct TestExpert {
  std::vector<uint8_t> gate;
  std::vector<uint8_t> up;
  std::vector<uint8_t> down;
};

struct TestModel {
  TestModelOptions options;
  std::string path;                  // the file, or the first shard
  std::vector<std::string> shard_paths;
  std::vector<std::vector<TestExpert>> experts;       // [layer][expert]
  std::map<std::string, std::vector<uint8_t>> dense;  // every non-expert tensor
};

// Writes the model under `dir` with file name stem `name`.
absl::StatusOr<TestModel> WriteTestModel(const std::string& dir, const std::string& name,
                                         const TestModelOptions& options);

// A fresh temporary folder, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace moetier::daemon_test
