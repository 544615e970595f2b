// The fully resident store: preload makes every slot equal the file's
// bytes, dense tensors are in shared memory, the segment is sealed and
// locked; budgets are planned (and refused) with actionable messages.
#include "store/expert_store.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <sys/mman.h>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "io/uring_backend.h"
#include "store/expert_placement.h"
#include "store/segment_plan.h"
#include "store/store_segment.h"
#include "store_test_util.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using daemon_test::AttachInProcess;
using daemon_test::ManifestOf;
using daemon_test::MappedSegment;
using daemon_test::PinHolds;
using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::TestModelOptions;
using ::testing::HasSubstr;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMlockIsReal = false;  // AddressSanitizer intercepts mlock as a no-op
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kMlockIsReal = false;
#else
constexpr bool kMlockIsReal = true;
#endif
#else
constexpr bool kMlockIsReal = true;
#endif

std::unique_ptr<IoBackend> MakeIo(const std::string& kind) {
  if (kind == "pread") return std::make_unique<PreadBackend>(8);
  absl::StatusOr<std::unique_ptr<UringBackend>> uring = UringBackend::Create(8, true);
  return uring.ok() ? std::move(*uring) : nullptr;
}

struct PreloadCase {
  std::string io;
  bool fused;
  uint32_t shards;
};

class StorePreloadTest : public ::testing::TestWithParam<PreloadCase> {};

TEST_P(StorePreloadTest, EverySlotEqualsTheFile) {
  const PreloadCase& c = GetParam();
  std::unique_ptr<IoBackend> io = MakeIo(c.io);
  if (io == nullptr) GTEST_SKIP() << "io_uring_queue_init failed here; io_uring not tested";
  ScratchDir dir;
  TestModelOptions o;
  o.n_layer = 3;
  o.n_expert = 6;
  o.fused_gate_up = c.fused;
  o.n_shards = c.shards;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "m", o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelManifest> manifest = ManifestOf(*model);
  ASSERT_TRUE(manifest.ok()) << manifest.status();

  ExpertStoreOptions options;
  options.segment.allow_unlocked_memory = true;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s =
      ExpertStore::Create(*manifest, std::move(io), options);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpertStore& store = **s;
  EXPECT_EQ(store.mode(), store::StoreMode::kFullyResident);
  EXPECT_EQ(store.n_slot(), 18u);
  EXPECT_EQ(store.phase(), store::DaemonPhase::kStarting);
  store.Start();
  ASSERT_TRUE(store.WaitUntilReady(10000));

  const store::StoreCounters counters = store.counters();
  EXPECT_EQ(counters.loads, 18u);
  EXPECT_EQ(counters.preload_experts_done, 18u);
  EXPECT_EQ(counters.preload_experts_total, 18u);
  EXPECT_EQ(counters.resident_experts, 18u);
  EXPECT_EQ(counters.bytes_read, manifest->total_expert_bytes);
  EXPECT_EQ(counters.load_errors, 0u);
  EXPECT_EQ(counters.evictions, 0u);

  std::unique_ptr<store::StoreClient> client = AttachInProcess(store, 0);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->daemon_phase(), store::DaemonPhase::kReady);
  EXPECT_EQ(client->hparams().n_layer, 3u);
  for (uint32_t l = 0; l < 3; ++l) {
    for (uint32_t e = 0; e < 6; ++e) {
      std::optional<store::ExpertPin> pin = client->TryAcquire(l, e);
      ASSERT_TRUE(pin.has_value()) << "preloaded expert " << e << " of layer " << l;
      EXPECT_TRUE(PinHolds(*pin, model->experts[l][e]));
      // bytes() holds all three matrices at their offsets.
      EXPECT_EQ(pin->bytes().data() + pin->slice_offset(store::kDown), pin->down().data());
      EXPECT_LE(pin->slice_offset(store::kDown) + pin->down().size(), pin->bytes().size());
      EXPECT_EQ(pin->bytes().size() % 4096, 0u);
    }
  }
  EXPECT_EQ(client->status_page().ram_hits, 18u);
  EXPECT_EQ(client->status_page().ram_misses, 0u);

  // Dense tensors, byte for byte.
  EXPECT_EQ(client->dense_tensors().size(), model->dense.size());
  for (const auto& [name, bytes] : model->dense) {
    const store::DenseTensorEntry* t = client->FindDenseTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_TRUE(daemon_test::SameBytes(client->DenseData(*t), bytes)) << name;
  }
  const store::DenseTensorEntry* q = client->FindDenseTensor("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->n_dims, 2u);
  EXPECT_EQ(q->ne[0], 64);
  EXPECT_EQ(q->ne[1], 64);
  EXPECT_EQ(q->tensor_type, static_cast<uint32_t>(TensorType::kF32));
  EXPECT_EQ(client->FindDenseTensor("blk.0.ffn_down_exps.weight"), nullptr);
  client.reset();
  store.Stop();
  EXPECT_EQ(store.phase(), store::DaemonPhase::kStopping);
}

INSTANTIATE_TEST_SUITE_P(
    StoreBackends, StorePreloadTest,
    ::testing::Values(PreloadCase{"pread", false, 1}, PreloadCase{"io_uring", false, 1},
                      PreloadCase{"io_uring", true, 1}, PreloadCase{"io_uring", false, 3},
                      PreloadCase{"pread", true, 2}),
    [](const ::testing::TestParamInfo<PreloadCase>& param_info) {
      return param_info.param.io + (param_info.param.fused ? "_fused" : "_separate") + "_" +
             std::to_string(param_info.param.shards) + "shards";
    });

TEST(ExpertStoreTest, RefusesAWorkerExpectingAnotherModel) {
  ScratchDir dir;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "m", {});
  ASSERT_TRUE(model.ok());
  absl::StatusOr<ModelManifest> manifest = ManifestOf(*model);
  ASSERT_TRUE(manifest.ok());
  ExpertStoreOptions options;
  options.segment.allow_unlocked_memory = true;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s =
      ExpertStore::Create(*manifest, std::make_unique<PreadBackend>(4), options);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->AdmitWorker(2, static_cast<int32_t>(getpid()), "cpu");
  store::AttachOptions attach;
  attach.worker_index = 2;
  attach.expected_fingerprint = manifest->fingerprint ^ 1;
  absl::StatusOr<std::unique_ptr<store::StoreClient>> client =
      store::StoreClient::Attach((*s)->segment_fd(), attach);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("different model"));
  attach.expected_fingerprint = manifest->fingerprint;
  attach.worker_index = 3;  // never admitted
  client = store::StoreClient::Attach((*s)->segment_fd(), attach);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("not admitted"));
}

uint64_t LockedKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t locked_kb = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmLck:", 0) == 0) locked_kb = std::stoull(line.substr(6));
  }
  return locked_kb;
}

TEST(StoreSegmentTest, IsSealedAndLockedChunkByChunk) {
  if (!kMlockIsReal) GTEST_SKIP() << "mlock is a no-op under AddressSanitizer";
  SegmentOptions options;
  options.lock_chunk_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<StoreSegment>> segment =
      StoreSegment::Create(32 << 20, options);
  if (!segment.ok()) GTEST_SKIP() << "cannot lock 32 MiB here: " << segment.status();
  StoreSegment& s = **segment;
  const uint64_t before_kb = LockedKib();
  EXPECT_EQ(s.locked_bytes(), 0u) << "nothing is locked before it is filled";
  EXPECT_TRUE(s.locking());
  ASSERT_TRUE(s.LockThrough(10 << 20).ok());
  EXPECT_EQ(s.locked_bytes(), 12u << 20) << "whole chunks, up to the one holding the end";
  EXPECT_GE(LockedKib(), before_kb + 12 * 1024) << "VmLck counts the chunks locked";
  std::vector<uint64_t> seen;
  ASSERT_TRUE(s.LockThrough(s.size(), [&](uint64_t locked) { seen.push_back(locked); }).ok());
  EXPECT_THAT(seen, ::testing::ElementsAre(16 << 20, 20 << 20, 24 << 20, 28 << 20, 32 << 20));
  EXPECT_TRUE(s.locked());
  EXPECT_FALSE(s.locking());
  EXPECT_GE(LockedKib(), before_kb + 32 * 1024) << "VmLck should include the store";
  const int seals = fcntl(s.fd(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_NE(ftruncate(s.fd(), 4096), 0) << "a sealed segment cannot shrink";
  s.base()[123] = 7;
  EXPECT_EQ(s.base()[123], 7);
}

TEST(StoreSegmentTest, MlockFailureMessageNamesTheLimitAndTheFix) {
  const std::string m = MlockFailureMessage(ENOMEM, 64ull << 30, 6 << 20, 8 << 20, 8 << 20);
  EXPECT_THAT(m, HasSubstr("RLIMIT_MEMLOCK is 8388608 bytes (8.00 MiB)"));
  EXPECT_THAT(m, HasSubstr("with 6.00 MiB of it locked"));
  EXPECT_THAT(m, HasSubstr("LimitMEMLOCK=infinity"));
  EXPECT_THAT(m, HasSubstr("ulimit -l unlimited"));
  EXPECT_THAT(m, HasSubstr("allow_unlocked_memory"));
  EXPECT_THAT(m, HasSubstr("64.0 GiB"));
  const std::string plenty =
      MlockFailureMessage(ENOMEM, 1 << 20, 0, RLIM_INFINITY, RLIM_INFINITY);
  EXPECT_THAT(plenty, HasSubstr("unlimited"));
  EXPECT_THAT(plenty, HasSubstr("lower ram_budget_bytes"));
}

// Runs Create and LockThrough(everything) in a child without CAP_IPC_LOCK,
// so RLIMIT_MEMLOCK applies even when the test runs as root; returns
// "locked", "unlocked" or the error. `own_mlock` passes mlock as an
// injected lock function, which skips Create's check of the limit, so the
// chunk that crosses the limit is refused by the kernel itself.
std::string CreateWithoutIpcLock(uint64_t bytes, bool allow_unlocked, bool own_mlock = false) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    syscall(SYS_capget, &header, data);
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    syscall(SYS_capset, &header, data);
    SegmentOptions options;
    options.allow_unlocked_memory = allow_unlocked;
    options.lock_chunk_bytes = 1 << 20;
    if (own_mlock) {
      options.lock_function = [](void* a, uint64_t n) { return mlock(a, n) == 0 ? 0 : errno; };
    }
    absl::StatusOr<std::unique_ptr<StoreSegment>> s = StoreSegment::Create(bytes, options);
    absl::Status lock = s.ok() ? (*s)->LockThrough(bytes) : s.status();
    const std::string result = !lock.ok()     ? std::string(lock.message())
                               : (*s)->locked() ? "locked"
                                                : "unlocked";
    (void)!write(pipe_fds[1], result.data(), result.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string result;
  char buffer[1024];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) result.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return result;
}

TEST(StoreSegmentTest, MlockAboveTheLimitFailsWithTheLimitNamed) {
  if (!kMlockIsReal) GTEST_SKIP() << "mlock is a no-op under AddressSanitizer";
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  if (limit.rlim_cur == RLIM_INFINITY) GTEST_SKIP() << "RLIMIT_MEMLOCK is unlimited here";
  const uint64_t bytes = limit.rlim_cur + (4 << 20);
  const std::string refused = CreateWithoutIpcLock(bytes, false);
  EXPECT_THAT(refused, HasSubstr(absl::StrFormat("RLIMIT_MEMLOCK is %d bytes", limit.rlim_cur)));
  EXPECT_THAT(refused, HasSubstr("LimitMEMLOCK=infinity"));
  EXPECT_EQ(CreateWithoutIpcLock(bytes, true), "unlocked")
      << "allow_unlocked_memory continues without the lock";
  // The chunk that crosses the limit fails in mlock itself; the error says
  // how much was locked by then (the chunks below the limit).
  const std::string crossed = CreateWithoutIpcLock(bytes, false, /*own_mlock=*/true);
  EXPECT_THAT(crossed, HasSubstr(absl::StrFormat("RLIMIT_MEMLOCK is %d bytes", limit.rlim_cur)));
  EXPECT_THAT(crossed, HasSubstr(absl::StrFormat(
                           "with %s of it locked", FormatBytes(limit.rlim_cur / (1 << 20) << 20))));
  EXPECT_EQ(CreateWithoutIpcLock(bytes, true, /*own_mlock=*/true), "unlocked");
}

std::vector<uint8_t> ReadAt(const std::string& path, uint64_t offset, uint64_t size) {
  std::vector<uint8_t> out(size, 0);
  const int fd = open(path.c_str(), O_RDONLY);
  const ssize_t got = pread(fd, out.data(), size, static_cast<off_t>(offset));
  close(fd);
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  out.resize(size, 0);  // past the end of the file: what a short read leaves
  return out;
}

TEST(ExpertPlacementTest, AlignedReadsCoverEveryMatrixAtItsOffset) {
  for (bool fused : {false, true}) {
    ScratchDir dir;
    TestModelOptions o;
    o.fused_gate_up = fused;
    o.n_shards = fused ? 1 : 2;
    absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "m", o);
    ASSERT_TRUE(model.ok());
    absl::StatusOr<ModelManifest> m = ManifestOf(*model);
    ASSERT_TRUE(m.ok());
    for (uint32_t l = 0; l < m->n_layer; ++l) {
      for (uint32_t e = 0; e < m->n_expert; ++e) {
        const ExpertPlacement p = PlaceExpert(*m, l, e);
        ASSERT_EQ(p.n_reads, fused ? 2u : 3u);
        std::vector<uint8_t> slot;
        for (uint32_t i = 0; i < p.n_reads; ++i) {
          EXPECT_EQ(p.reads[i].offset % 4096, 0u);
          EXPECT_EQ(p.reads[i].size % 4096, 0u);
          EXPECT_EQ(p.read_slot_offset[i], slot.size());
          EXPECT_LE(p.needed_bytes[i], p.reads[i].size);
          const std::vector<uint8_t> bytes =
              ReadAt(m->shard_paths[p.reads[i].shard], p.reads[i].offset, p.reads[i].size);
          slot.insert(slot.end(), bytes.begin(), bytes.end());
        }
        ASSERT_EQ(slot.size(), p.span_bytes);
        const daemon_test::TestExpert& want = model->experts[l][e];
        const std::vector<uint8_t>* parts[3] = {&want.gate, &want.up, &want.down};
        for (int s = 0; s < 3; ++s) {
          ASSERT_LE(p.slice_offset[s] + parts[s]->size(), slot.size());
          EXPECT_TRUE(std::equal(parts[s]->begin(), parts[s]->end(),
                                 slot.begin() + p.slice_offset[s]))
              << "matrix " << s << " of expert " << e << " of layer " << l;
        }
      }
    }
  }
}

TEST(SegmentPlanTest, BudgetPicksTheModeAndRefusesTooLittle) {
  ScratchDir dir;
  TestModelOptions o;
  o.n_layer = 2;
  o.n_expert = 8;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir.path(), "m", o);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<ModelManifest> m = ManifestOf(*model);
  ASSERT_TRUE(m.ok());
  absl::StatusOr<SegmentPlan> full = PlanSegment(*m, 0);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->mode, store::StoreMode::kFullyResident);
  EXPECT_EQ(full->n_slot, 16u);
  // Slots are sized per expert: the odd layer's experts are larger.
  EXPECT_LT(full->slots[0].capacity_bytes, full->slots[8].capacity_bytes);
  EXPECT_EQ(full->slots[3].capacity_bytes, PlaceExpert(*m, 0, 3).span_bytes);
  for (const store::SlotDesc& slot : full->slots) {
    EXPECT_EQ(slot.offset % store::kSlotAlignmentBytes, 0u);
  }
  absl::StatusOr<SegmentPlan> exact = PlanSegment(*m, full->segment_bytes);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->mode, store::StoreMode::kFullyResident);

  absl::StatusOr<SegmentPlan> cache = PlanSegment(*m, full->segment_bytes - 1);
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache->mode, store::StoreMode::kCache);
  EXPECT_LT(cache->n_slot, 16u);
  EXPECT_LE(cache->segment_bytes, full->segment_bytes - 1);
  const uint64_t slot = full->max_span_bytes;
  EXPECT_EQ(slot % 4096, 0u);
  absl::StatusOr<SegmentPlan> three = PlanSegment(*m, FixedSegmentBytes(*m) + 3 * slot);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->n_slot, 3u);

  absl::StatusOr<SegmentPlan> small = PlanSegment(*m, FixedSegmentBytes(*m) + slot);
  ASSERT_FALSE(small.ok());
  const std::string message(small.status().message());
  EXPECT_THAT(message, HasSubstr("too small"));
  EXPECT_THAT(message, HasSubstr("at least 2 slots"));
  EXPECT_THAT(message, HasSubstr("holding every expert takes"));
}

}  // namespace
}  // namespace moetier
