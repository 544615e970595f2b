#include "gguf/model_fingerprint.h"

#include <string_view>

namespace moetier::store {
namespace {

// FNV-1a, 64 bit: stable across builds and platforms, no dependency.
class Fnv1a {
 public:
  void Bytes(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ = (hash_ ^ p[i]) * 0x100000001B3ULL;
    }
  }
  void U64(uint64_t v) { Bytes(&v, sizeof(v)); }
  void String(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xCBF29CE484222325ULL;
};

}  // namespace

uint64_t ModelFingerprint(const GgufModel& model) {
  Fnv1a h;
  h.U64(model.shards().size());
  for (const auto& shard : model.shards()) h.U64(shard->file_size());
  h.U64(model.tensors().size());
  for (const GgufTensorInfo& t : model.tensors()) {
    h.String(t.name);
    h.U64(static_cast<uint64_t>(t.type));
    h.U64(t.n_dims);
    for (int64_t n : t.ne) h.U64(static_cast<uint64_t>(n));
    h.U64(t.shard);
    h.U64(t.file_offset);
    h.U64(t.size_bytes);
  }
  // 0 means "do not check" in AttachOptions; never produce it.
  return h.value() == 0 ? 1 : h.value();
}

}  // namespace moetier::store
