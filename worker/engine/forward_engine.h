// The forward pass as the rest of the worker sees it: tokens in, logits out,
// with a KV cache the engine owns. Every backend (the fp32 reference, the cpu
// engine, later cuda) implements this, so the standalone tool, the daemon
// protocol and the tests drive them all the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/expert_source.h"
#include "engine/routing_hook.h"
#include "model/qwen3moe_model.h"

namespace moetier {

// Which logits rows Forward writes.
enum class LogitRows {
  kAll,   // one row of n_vocab floats per input token, in input order
  kLast,  // only the row of the last input token (prefill for generation)
};

class ForwardEngine {
 public:
  virtual ~ForwardEngine() = default;

  // Runs `tokens` at positions pos0, pos0+1, ...: writes their keys and
  // values into the cache at those positions (dropping whatever the cache
  // held from pos0 on), attends causally over positions 0..pos0+i, and writes
  // the logits rows selected by `rows` to `logits` (row-major, n_vocab()
  // floats per row). Preconditions checked with a Status: tokens non-empty,
  // every id in [0, n_vocab()), 0 <= pos0 <= cached_tokens(),
  // pos0 + tokens.size() <= max_ctx(). On error the cache is unchanged up to
  // pos0 and its later contents are unspecified.
  virtual absl::Status Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                               float* logits) = 0;

  // Forgets every cached position (cached_tokens() becomes 0).
  virtual void Reset() = 0;

  virtual int n_vocab() const = 0;
  virtual int max_ctx() const = 0;
  // Positions 0..cached_tokens()-1 hold valid keys and values.
  virtual int cached_tokens() const = 0;
};

// Where the CPU engine reads weights from.
enum class WeightPages {
  // Huge pages when the kernel offers transparent huge pages, the weights
  // are large enough for TLB misses to matter and they fit in available RAM;
  // the file mapping otherwise.
  kAuto,
  kHuge,    // copy into transparent huge pages; an error when that is impossible
  kMapped,  // read the GGUF file mapping (4 KiB pages, shared with the page cache)
};

struct EngineOptions {
  int max_ctx = 4096;  // KV cache length in tokens; at most hparams.n_ctx_train
  int n_threads = 1;   // worker threads for backends that use them
  WeightPages weight_pages = WeightPages::kAuto;  // CPU backend only
  // CPU backend: where the routed experts come from; null reads them from
  // the model's mapping. When set, huge pages (if chosen) hold only the
  // dense weights, and the source must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
  // CPU backend: routing hooks (engine/routing_hook.h); null: none. Not
  // owned; must outlive the engine.
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

// The multithreaded CPU engine. Defined by the cpu engine library
// (target moetier_cpu_engine) when it is part of the build; otherwise the
// worker links a definition that returns an Unimplemented status saying so.
// `model` (and the GGUF mapping behind it) must outlive the engine.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngine(const Qwen3MoeModel& model,
                                                               const EngineOptions& options);

}  // namespace moetier
