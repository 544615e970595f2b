// libFuzzer target for the GGUF reader: any input must give OK or an error
// Status, never a crash, a hang or an out-of-bounds read (ASan).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gguf/gguf_reader.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "gguf_reader_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using moetier::GgufFile;
  using moetier::GgufModel;
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) {
    if (file.status().message().empty()) Fail("error Status without a message");
    return 0;
  }
  const GgufFile& f = **file;
  volatile uint8_t sink = 0;
  for (const moetier::GgufTensorInfo& t : f.tensors()) {
    if (t.file_offset < f.data_offset() || t.file_offset > size ||
        t.size_bytes > size - t.file_offset) {
      Fail("tensor outside the input accepted");
    }
    if (t.size_bytes > 0) {
      sink = data[t.file_offset];
      sink = data[t.file_offset + t.size_bytes - 1];
    }
  }
  const moetier::GgufMetadata& md = f.metadata();
  for (const moetier::GgufKeyValue& kv : md.entries()) {
    (void)md.GetUint(kv.key);
    (void)md.GetInt(kv.key);
    (void)md.GetFloat(kv.key);
    (void)md.GetString(kv.key);
    (void)md.GetStringArray(kv.key);
    (void)md.GetIntArray(kv.key);
    (void)md.GetFloatArray(kv.key);
    (void)md.GetUintOrArray(kv.key, 3);
  }
  std::vector<std::unique_ptr<GgufFile>> shards;
  shards.push_back(*std::move(file));
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::FromFiles(std::move(shards));
  if (model.ok()) {
    for (const moetier::GgufTensorInfo& t : (*model)->tensors()) {
      const std::span<const uint8_t> bytes = (*model)->TensorData(t);
      if (!bytes.empty()) sink = bytes.back();
    }
  }
  (void)sink;
  return 0;
}
