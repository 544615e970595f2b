// Helpers for tests that run an ExpertStore in-process and look at it the
// way a worker does (StoreClient) or the way a debugger would (a raw map).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "io/io_backend_factory.h"
#include "manifest/model_manifest.h"
#include "store/expert_store.h"
#include "store/store_client.h"
#include "test_model.h"

namespace moetier::daemon_test {

inline absl::StatusOr<ModelManifest> ManifestOf(const TestModel& model) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(model.path);
  if (!gguf.ok()) return gguf.status();
  return BuildModelManifest(**gguf);
}

// Admits `worker` for this process and attaches a client to it.
inline std::unique_ptr<store::StoreClient> AttachInProcess(ExpertStore& s, uint32_t worker) {
  s.AdmitWorker(worker, static_cast<int32_t>(getpid()), "test");
  store::AttachOptions options;
  options.worker_index = worker;
  options.expected_fingerprint = s.manifest().fingerprint;
  absl::StatusOr<std::unique_ptr<store::StoreClient>> client =
      store::StoreClient::Attach(s.segment_fd(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

inline bool SameBytes(std::span<const uint8_t> got, const std::vector<uint8_t>& want) {
  return got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin());
}

inline ::testing::AssertionResult PinHolds(const store::ExpertPin& pin, const TestExpert& want) {
  if (!pin.valid()) return ::testing::AssertionFailure() << "invalid pin";
  if (!SameBytes(pin.gate(), want.gate)) {
    return ::testing::AssertionFailure() << "gate of expert " << pin.expert() << " of layer "
                                         << pin.layer() << " differs from the file";
  }
  if (!SameBytes(pin.up(), want.up)) {
    return ::testing::AssertionFailure() << "up of expert " << pin.expert() << " of layer "
                                         << pin.layer() << " differs from the file";
  }
  if (!SameBytes(pin.down(), want.down)) {
    return ::testing::AssertionFailure() << "down of expert " << pin.expert() << " of layer "
                                         << pin.layer() << " differs from the file";
  }
  return ::testing::AssertionSuccess();
}

// The whole segment mapped read-write, to inspect (and in a few tests,
// tamper with) shared state directly.
class MappedSegment {
 public:
  explicit MappedSegment(const ExpertStore& s) : size_(s.segment_bytes()) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, s.segment_fd(), 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~MappedSegment() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  store::SegmentHeader& header() const { return *store::HeaderOf(base_); }
  store::ExpertEntry& entry(uint32_t layer, uint32_t expert) const {
    return store::ExpertTableOf(base_, header())[store::ExpertIndex(layer, expert,
                                                                     header().n_expert)];
  }
  store::WorkerRegion& worker(uint32_t index) const {
    return *store::WorkerRegionOf(base_, header(), index);
  }
  uint32_t state(uint32_t layer, uint32_t expert) const {
    return store::Shared(entry(layer, expert).state).load();
  }

 private:
  uint64_t size_;
  uint8_t* base_;
};

// Polls `condition` every millisecond for up to timeout_ms.
template <typename Condition>
bool WaitFor(Condition condition, int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

}  // namespace moetier::daemon_test
