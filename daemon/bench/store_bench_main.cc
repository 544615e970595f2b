// moetier-bench-store: how fast the store fills from a model file compared
// with a plain sequential O_DIRECT read of the same file, and what a hit
// (acquire + release of a resident expert) costs, alone and while another
// worker thread hammers the store. Prints medians over --runs.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/flags/flag_set.h"
#include "gguf/gguf_reader.h"
#include "io/io_backend_factory.h"
#include "manifest/model_manifest.h"
#include "store/expert_store.h"
#include "store/store_client.h"
#include "test_model.h"

namespace moetier {
namespace {

constexpr char kUsage[] = "usage: moetier-bench-store (--model FILE | --synthetic-mib N) [options]";

constexpr int kDeepReaders = 4;

struct Flags {
  std::string model;
  uint64_t synthetic_mib = 0;
  int runs = 5;
  std::string io = "auto";
  uint64_t hit_iterations = 200000;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

// True when the page cache was dropped (needs root); the O_DIRECT reads below
// bypass it anyway, this only removes doubt about read-ahead leftovers.
bool DropPageCache() {
  sync();
  const int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, "3\n", 2) == 2;
  close(fd);
  return ok;
}

// Reads every file of the model front to back with O_DIRECT in 8 MiB
// chunks. With `threads` > 1, thread t reads chunks t, t + threads, ... so
// that many chunks are in flight, as the store's io_uring queue has. GB/s.
absl::StatusOr<double> SequentialDirectRead(const std::vector<std::string>& paths, int threads) {
  constexpr uint64_t kChunk = 8u << 20;
  std::vector<int> fds;
  std::vector<uint64_t> sizes;
  for (const std::string& path : paths) {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0) {
      const int e = errno;
      for (int f : fds) close(f);
      if (fd >= 0) close(fd);
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot open %s with O_DIRECT: %s", path, strerror(e)));
    }
    fds.push_back(fd);
    sizes.push_back(static_cast<uint64_t>(st.st_size));
  }
  std::atomic<uint64_t> total{0};
  std::atomic<int> error{0};
  auto reader = [&](int t) {
    void* buffer = nullptr;
    if (posix_memalign(&buffer, 4096, kChunk) != 0) {
      error.store(ENOMEM);
      return;
    }
    for (size_t f = 0; f < fds.size(); ++f) {
      for (uint64_t offset = uint64_t(t) * kChunk; offset < sizes[f];
           offset += uint64_t(threads) * kChunk) {
        const ssize_t n = pread(fds[f], buffer, kChunk, static_cast<off_t>(offset));
        if (n < 0) {
          error.store(errno);
          free(buffer);
          return;
        }
        total.fetch_add(static_cast<uint64_t>(n));
      }
    }
    free(buffer);
  };
  const uint64_t start = NowNs();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(reader, t);
  for (std::thread& t : pool) t.join();
  const uint64_t ns = NowNs() - start;
  for (int f : fds) close(f);
  if (error.load() != 0) {
    return absl::DataLossError(absl::StrFormat("reading the model: %s", strerror(error.load())));
  }
  return static_cast<double>(total.load()) / static_cast<double>(std::max<uint64_t>(ns, 1));
}

absl::StatusOr<std::unique_ptr<ExpertStore>> MakeStore(const ModelManifest& manifest,
                                                       IoBackendKind kind) {
  IoBackendOptions io_options;
  io_options.kind = kind;
  absl::StatusOr<std::unique_ptr<IoBackend>> io = CreateIoBackend(io_options);
  if (!io.ok()) return io.status();
  ExpertStoreOptions options;
  options.segment.allow_unlocked_memory = true;
  options.progress_log_interval_ms = 1000000;
  return ExpertStore::Create(manifest, std::move(*io), options);
}

struct FillResult {
  double gbps = 0;
  uint64_t bytes = 0;
};

absl::StatusOr<FillResult> TimeFill(ExpertStore& store) {
  const uint64_t start = NowNs();
  store.Start();
  if (!store.WaitUntilReady(600000)) {
    return absl::DeadlineExceededError("the store did not finish its preload within 10 minutes");
  }
  const uint64_t ns = NowNs() - start;
  const store::StoreCounters c = store.counters();
  if (c.load_errors != 0) {
    return absl::DataLossError(absl::StrFormat("%d expert reads failed", c.load_errors));
  }
  return FillResult{static_cast<double>(c.bytes_read) / static_cast<double>(ns), c.bytes_read};
}

std::unique_ptr<store::StoreClient> Attach(ExpertStore& s, uint32_t worker) {
  s.AdmitWorker(worker, static_cast<int32_t>(getpid()), "bench");
  store::AttachOptions options;
  options.worker_index = worker;
  options.expected_fingerprint = s.manifest().fingerprint;
  absl::StatusOr<std::unique_ptr<store::StoreClient>> client =
      store::StoreClient::Attach(s.segment_fd(), options);
  if (!client.ok()) {
    std::fprintf(stderr, "attach failed: %s\n", client.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*client);
}

struct HitResult {
  double median_ns = 0;
  double p99_ns = 0;
  uint64_t failures = 0;
  uint64_t background_ops = 0;
};

// Acquire+release of random resident experts, each timed alone. With
// `background`, a second worker acquires and releases other experts of the
// same layers the whole time (shared cache lines of the tables, not the
// same entry).
HitResult TimeHits(store::StoreClient& client, store::StoreClient* background, uint32_t n_layer,
                   uint32_t n_expert, uint64_t iterations, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<uint32_t, uint32_t>> ids(iterations);
  for (auto& id : ids) id = {rng() % n_layer, rng() % n_expert};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> background_ops{0};
  std::thread writer;
  if (background != nullptr) {
    writer = std::thread([&] {
      std::mt19937 r(seed + 1);
      uint64_t ops = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t layer = r() % n_layer;
        const uint32_t expert = r() % n_expert;
        std::optional<store::ExpertPin> pin = background->TryAcquire(layer, expert);
        if (pin) pin->Release();
        ++ops;
      }
      background_ops.store(ops);
    });
  }
  HitResult result;
  std::vector<uint64_t> samples;
  samples.reserve(iterations);
  for (const auto& [layer, expert] : ids) {
    const uint64_t t0 = NowNs();
    std::optional<store::ExpertPin> pin = client.TryAcquire(layer, expert);
    if (pin) pin->Release();
    const uint64_t t1 = NowNs();
    if (!pin) ++result.failures;
    samples.push_back(t1 - t0);
  }
  stop.store(true);
  if (writer.joinable()) writer.join();
  result.background_ops = background_ops.load();
  result.p99_ns = Percentile(samples, 0.99);
  result.median_ns = Percentile(samples, 0.5);
  return result;
}

double TimerOverheadNs() {
  std::vector<uint64_t> v(100000);
  for (uint64_t& x : v) {
    const uint64_t t0 = NowNs();
    x = NowNs() - t0;
  }
  return Percentile(v, 0.5);
}

int Run(const Flags& flags) {
  absl::StatusOr<IoBackendKind> kind = ParseIoBackendKind(flags.io);
  if (!kind.ok()) {
    std::fprintf(stderr, "%s\n", kind.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<daemon_test::ScratchDir> scratch;
  std::string model_path = flags.model;
  if (flags.synthetic_mib > 0) {
    scratch = std::make_unique<daemon_test::ScratchDir>();
    daemon_test::TestModelOptions o;
    o.n_layer = 8;
    o.n_embd = 1024;
    o.n_ff = 512;
    o.odd_layer_down_type = o.expert_type;
    // Q8_0: 34 bytes per 32 weights, three matrices of n_embd x n_ff.
    const uint64_t expert_bytes = 3ull * 1024 * 512 / 32 * 34;
    o.n_expert = static_cast<uint32_t>(
        std::max<uint64_t>(2, (flags.synthetic_mib << 20) / (expert_bytes * o.n_layer)));
    std::printf("writing a synthetic model: %u layers x %u experts of %.2f MiB in %s\n", o.n_layer,
                o.n_expert, static_cast<double>(expert_bytes) / (1 << 20), scratch->path().c_str());
    absl::StatusOr<daemon_test::TestModel> m =
        daemon_test::WriteTestModel(scratch->path(), "synthetic", o);
    if (!m.ok()) {
      std::fprintf(stderr, "cannot write the synthetic model: %s\n", m.status().ToString().c_str());
      return 1;
    }
    model_path = m->path;
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(model_path);
  if (!gguf.ok()) {
    std::fprintf(stderr, "%s\n", gguf.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<ModelManifest> manifest = BuildModelManifest(**gguf);
  if (!manifest.ok()) {
    std::fprintf(stderr, "%s\n", manifest.status().ToString().c_str());
    return 1;
  }
  gguf->reset();
  uint64_t file_bytes = 0;
  for (uint64_t size : manifest->shard_sizes) file_bytes += size;
  std::printf("model: %s (%.2f GiB in %zu file(s), %.2f GiB of experts, %u layers x %u experts)\n",
              model_path.c_str(), static_cast<double>(file_bytes) / (1ull << 30),
              manifest->shard_paths.size(),
              static_cast<double>(manifest->total_expert_bytes) / (1ull << 30),
              manifest->hparams.n_layer, manifest->hparams.n_expert);

  // (a) fill rate vs sequential O_DIRECT read, alternating, cache dropped before each.
  std::vector<double> fill_gbps;
  std::vector<double> read_gbps;
  std::vector<double> deep_gbps;
  bool dropped_all = true;
  std::unique_ptr<ExpertStore> last_store;
  std::string backend;
  for (int run = 0; run < flags.runs; ++run) {
    dropped_all = DropPageCache() && dropped_all;
    absl::StatusOr<double> read = SequentialDirectRead(manifest->shard_paths, 1);
    if (!read.ok()) {
      std::fprintf(stderr, "%s\n", read.status().ToString().c_str());
      return 1;
    }
    read_gbps.push_back(*read);
    dropped_all = DropPageCache() && dropped_all;
    absl::StatusOr<double> deep = SequentialDirectRead(manifest->shard_paths, kDeepReaders);
    if (!deep.ok()) {
      std::fprintf(stderr, "%s\n", deep.status().ToString().c_str());
      return 1;
    }
    deep_gbps.push_back(*deep);
    last_store.reset();  // the previous segment goes before the next is locked
    absl::StatusOr<std::unique_ptr<ExpertStore>> s = MakeStore(*manifest, *kind);
    if (!s.ok()) {
      std::fprintf(stderr, "cannot create the store: %s\n", s.status().ToString().c_str());
      return 1;
    }
    backend = std::string((*s)->io_backend_name());
    dropped_all = DropPageCache() && dropped_all;
    absl::StatusOr<FillResult> fill = TimeFill(**s);
    if (!fill.ok()) {
      std::fprintf(stderr, "%s\n", fill.status().ToString().c_str());
      return 1;
    }
    fill_gbps.push_back(fill->gbps);
    std::printf("run %d: sequential O_DIRECT read %.3f GB/s (1 in flight), %.3f GB/s (%d in "
                "flight), store fill %.3f GB/s (%s, %.2f GiB, "
                "memory %s)\n",
                run + 1, *read, *deep, kDeepReaders, fill->gbps, backend.c_str(),
                static_cast<double>(fill->bytes) / (1ull << 30),
                (*s)->memory_locked() ? "locked" : "NOT locked");
    std::fflush(stdout);
    last_store = std::move(*s);
  }
  const double fill = Median(fill_gbps);
  const double read = Median(read_gbps);
  const double deep = Median(deep_gbps);
  std::printf("page cache dropped between runs: %s\n",
              dropped_all ? "yes" : "no (needs root; O_DIRECT bypasses it either way)");
  std::printf("fill rate (median of %d): store %.3f GB/s (%s), sequential O_DIRECT read %.3f GB/s, "
              "ratio %.1f%% (target >= 90%%)\n",
              flags.runs, fill, backend.c_str(), read, 100.0 * fill / read);
  std::printf("fill rate vs the same read with %d chunks in flight: %.3f GB/s, ratio %.1f%%\n",
              kDeepReaders, deep, 100.0 * fill / deep);

  // (b) hit path on the fully resident store of the last run.
  ExpertStore& store = *last_store;
  std::unique_ptr<store::StoreClient> client = Attach(store, 0);
  std::unique_ptr<store::StoreClient> other = Attach(store, 1);
  if (client == nullptr || other == nullptr) return 1;
  const uint32_t n_layer = manifest->hparams.n_layer;
  const uint32_t n_expert = manifest->hparams.n_expert;
  std::printf("timer overhead (steady_clock pair, included in the samples): %.0f ns\n",
              TimerOverheadNs());
  for (bool contended : {false, true}) {
    std::vector<double> medians;
    std::vector<double> p99s;
    uint64_t failures = 0;
    uint64_t background_ops = 0;
    for (int run = 0; run < flags.runs; ++run) {
      HitResult r = TimeHits(*client, contended ? other.get() : nullptr, n_layer, n_expert,
                             flags.hit_iterations, static_cast<uint32_t>(run + 1));
      medians.push_back(r.median_ns);
      p99s.push_back(r.p99_ns);
      failures += r.failures;
      background_ops += r.background_ops;
    }
    absl::PrintF("hit acquire+release%s: median %.0f ns, p99 %.0f ns (medians over %d runs of %d "
                "samples; %d not resident%s)\n",
                contended ? " with a concurrent worker thread" : "", Median(medians), Median(p99s),
                flags.runs, flags.hit_iterations, failures,
                contended ? absl::StrFormat("; the other thread did %d acquire+release", background_ops)
                          : std::string());
  }
  client.reset();
  other.reset();
  store.ReleaseWorker(0);
  store.ReleaseWorker(1);
  store.Stop();
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // interleave with the store's log lines on stderr
  moetier::Flags flags;
  moetier::FlagSet f;
  f.AddString({"--model"}, "FILE", "a GGUF model (first shard of a split set)", &flags.model);
  f.AddInt({"--synthetic-mib"}, "N",
           "write a synthetic qwen3moe model of about N MiB to a temporary folder instead",
           &flags.synthetic_mib, uint64_t{1}, uint64_t{1} << 30);
  f.AddInt({"--runs"}, "N", "repetitions; medians are printed (default 5)", &flags.runs, 1, 1000);
  f.AddString({"--io"}, "NAME", "auto, io_uring or pread (default auto)", &flags.io);
  f.AddInt({"--hit-iterations"}, "N", "acquire+release samples per run (default 200000)",
           &flags.hit_iterations, uint64_t{1}, uint64_t{1} << 40);
  moetier::ParseOnlyFlagsOrExit(f, "moetier-bench-store", moetier::kUsage, argc, argv);
  if (flags.model.empty() == (flags.synthetic_mib == 0)) {
    moetier::ExitWithUsageError(
        "moetier-bench-store",
        absl::InvalidArgumentError("give exactly one of --model and --synthetic-mib (see --help)"));
  }
  return moetier::Run(flags);
}
