// Helpers for the daemon-mode tests: the model files they run (test vectors,
// moetier-synth models, fused gate_up variants), a loaded model, and the
// daemon's side of the store run in-process.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "io/io_backend_factory.h"
#include "manifest/model_manifest.h"
#include "model/architectures.h"
#include "store/expert_store.h"
#include "store/segment_plan.h"
#include "store/store_client.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier::serve_test {

// A fresh temporary folder, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/moetier_serve_XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string VectorsModel(const std::string& stem) {
  return moetier::testing::TestDataPath("vectors/" + stem + ".gguf");
}

// A moetier-synth model: `preset` shrunk to n_layer layers and n_vocab
// tokens, in the `quant` mix; split_count > 0 writes a split set.
inline absl::StatusOr<std::string> WriteSynth(const std::string& path, const char* preset,
                                              SynthQuant quant, int64_t n_layer, int64_t n_vocab,
                                              int64_t split_count = 0) {
  absl::StatusOr<SynthShape> shape = SynthPreset(preset);
  if (!shape.ok()) return shape.status();
  shape->n_layer = n_layer;
  shape->n_vocab = n_vocab;
  SynthOptions options;
  options.shape = *shape;
  options.quant = quant;
  options.seed = 11;
  options.threads = 2;
  options.out_path = path;
  options.split_count = split_count;
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = WriteSynthModel(*plan, options); !s.ok()) return s;
  return plan->shards.front().path;
}

// Rewrites `in` with every layer's ffn_gate_exps and ffn_up_exps fused into
// one ffn_gate_up_exps tensor (each expert's gate rows, then its up rows),
// as some converters store them.
inline absl::Status WriteFusedGateUp(const std::string& in, const std::string& out) {
  absl::StatusOr<moetier::testing::EditableGguf> gguf = moetier::testing::EditableGguf::Read(in);
  if (!gguf.ok()) return gguf.status();
  for (int il = 0;; ++il) {
    const std::string blk = absl::StrCat("blk.", il, ".");
    moetier::testing::EditableTensor* gate_ptr = gguf->Find(blk + "ffn_gate_exps.weight");
    moetier::testing::EditableTensor* up_ptr = gguf->Find(blk + "ffn_up_exps.weight");
    if (gate_ptr == nullptr || up_ptr == nullptr) break;
    const moetier::testing::EditableTensor gate = *gate_ptr;
    const moetier::testing::EditableTensor up = *up_ptr;
    if (gate.type != up.type || gate.ne != up.ne || gate.ne.size() != 3) {
      return absl::FailedPreconditionError(
          absl::StrCat(blk, ": gate and up differ in type or shape; cannot fuse them"));
    }
    moetier::testing::EditableTensor fused;
    fused.name = blk + "ffn_gate_up_exps.weight";
    fused.type = gate.type;
    fused.ne = {gate.ne[0], 2 * gate.ne[1], gate.ne[2]};
    const size_t expert_bytes = gate.data.size() / static_cast<size_t>(gate.ne[2]);
    for (int64_t e = 0; e < gate.ne[2]; ++e) {
      const size_t at = static_cast<size_t>(e) * expert_bytes;
      fused.data.insert(fused.data.end(), gate.data.begin() + at,
                        gate.data.begin() + at + expert_bytes);
      fused.data.insert(fused.data.end(), up.data.begin() + at,
                        up.data.begin() + at + expert_bytes);
    }
    gguf->RemoveTensor(gate.name);
    gguf->RemoveTensor(up.name);
    gguf->tensors.push_back(std::move(fused));
  }
  return gguf->Write(out);
}

struct LoadedModel {
  std::unique_ptr<GgufModel> gguf;
  Model model;
};

inline absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path) {
  auto loaded = std::make_unique<LoadedModel>();
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  if (!gguf.ok()) return gguf.status();
  loaded->gguf = std::move(*gguf);
  absl::StatusOr<Model> model = LoadModel(*loaded->gguf);
  if (!model.ok()) return model.status();
  loaded->model = std::move(*model);
  return loaded;
}

// The daemon's side of the store, in this process: the manifest, the store
// (fully resident, or a cache of `cache_slots` slots) and its service thread.
struct DaemonSide {
  ModelManifest manifest;
  std::unique_ptr<ExpertStore> store;

  ~DaemonSide() {
    if (store != nullptr) store->Stop();
  }

  static absl::StatusOr<std::unique_ptr<DaemonSide>> Start(const std::string& model_path,
                                                           uint32_t cache_slots) {
    auto side = std::make_unique<DaemonSide>();
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(model_path);
    if (!gguf.ok()) return gguf.status();
    absl::StatusOr<ModelManifest> manifest = BuildModelManifest(**gguf);
    if (!manifest.ok()) return manifest.status();
    side->manifest = std::move(*manifest);
    absl::StatusOr<std::unique_ptr<IoBackend>> io = CreateIoBackend(IoBackendOptions{});
    if (!io.ok()) return io.status();
    ExpertStoreOptions options;
    options.segment.allow_unlocked_memory = true;
    if (cache_slots > 0) {
      absl::StatusOr<SegmentPlan> full = PlanSegment(side->manifest, 0);
      if (!full.ok()) return full.status();
      options.ram_budget_bytes =
          FixedSegmentBytes(side->manifest) + cache_slots * full->max_span_bytes;
    }
    absl::StatusOr<std::unique_ptr<ExpertStore>> s =
        ExpertStore::Create(side->manifest, std::move(*io), options);
    if (!s.ok()) return s.status();
    side->store = std::move(*s);
    if (cache_slots > 0 &&
        (side->store->mode() != store::StoreMode::kCache || side->store->n_slot() != cache_slots)) {
      return absl::InternalError(absl::StrCat("asked for a cache of ", cache_slots, " slots, got ",
                                              side->store->n_slot()));
    }
    side->store->Start();
    if (!side->store->WaitUntilReady(30000)) {
      return absl::DeadlineExceededError("the store did not become ready");
    }
    return side;
  }

  // Admits `worker` for this process and attaches a client to it.
  absl::StatusOr<std::unique_ptr<store::StoreClient>> Attach(uint32_t worker) {
    store->AdmitWorker(worker, static_cast<int32_t>(getpid()), "cpu");
    store::AttachOptions options;
    options.worker_index = worker;
    options.expected_fingerprint = manifest.fingerprint;
    return store::StoreClient::Attach(store->segment_fd(), options);
  }
};

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace moetier::serve_test
