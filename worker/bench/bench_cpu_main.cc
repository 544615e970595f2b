// moetier-bench-cpu: how close the CPU engine comes to the memory roofline.
//
// Decoding one token must read every dense weight, the top-k experts of every
// layer and the output matrix once, so tokens/s can never exceed
// (RAM read bandwidth) / (weight bytes per token). The program measures that
// bandwidth in the same run (a multi-threaded streaming read of a buffer far
// larger than the caches), computes the bytes per token from the model, and
// prints the achieved decode rate as a fraction of the roofline, with prompt
// processing throughput alongside. Every figure is the median of several
// runs, printed with its spread; the runs must produce the same tokens. As
// the bandwidth of a shared machine drifts, each decode run is also compared
// with a bandwidth measured just before it.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "bench_common.h"
#include "cpu_phase_report.h"
#include "engine/cpu_engine.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/iq_grid_blocks.h"
#include "gguf/tensor/iq_grid_chunks.h"
#include "gguf/tensor/tensor_type.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"

namespace moetier {
namespace {

constexpr char kUsage[] = R"(moetier-bench-cpu: CPU engine throughput against the memory roofline

usage: moetier-bench-cpu --model FILE [options]
       moetier-bench-cpu --kernels [options])";

struct Options {
  std::string model;
  int threads = 0;
  int runs = 5;
  int decode_tokens = 32;
  int prompt_tokens = 256;
  int batch = 256;
  int context = 16;
  bool skip_context = false;
  KvCacheTypes kv_types;
  std::string simd;
  int64_t bandwidth_mib = 2048;
  bool kernels = false;
  bool huge_pages = false;
  std::string routing_from_trace;
};

Options ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet f;
  bench::AddModelFlag(f, &o.model);
  bench::AddThreadsFlag(f, &o.threads);
  bench::AddRunsFlag(f, &o.runs, 5);
  f.AddInt({"--decode-tokens"}, "N", "tokens generated per decode run (default 32)",
           &o.decode_tokens, 1, 1 << 20);
  f.AddInt({"--prompt-tokens"}, "N", "tokens per prompt-processing run (default 256)",
           &o.prompt_tokens, 1, 1 << 20);
  f.AddInt({"--batch"}, "N", "prompt tokens processed together (default 256)", &o.batch, 1, 8192);
  f.AddInt({"--context"}, "N", "tokens already in the cache when decoding starts (default 16)",
           &o.context, 1, 1 << 20);
  f.AddSwitch({"--skip-context"},
              "the context's positions count as computed without computing them "
              "(CpuEngine::SkipPositionsForTiming: zero keys and values, the same bytes to "
              "read): decode timing at a depth of --context without its prefill, for long "
              "contexts. The generated tokens mean nothing then; the runs still must agree",
              &o.skip_context);
  bench::AddKvCacheTypeFlags(f, &o.kv_types);
  f.AddString({"--simd"}, "LEVEL", "scalar, avx2 or avx512 (default: the best this CPU has)",
              &o.simd);
  f.AddInt({"--bandwidth-mib"}, "N", "size of the bandwidth-test buffer (default 2048)",
           &o.bandwidth_mib, int64_t{64}, int64_t{1} << 20);
  f.AddSwitch({"--huge-pages"},
              "copy the weights into transparent huge pages first (the engine's "
              "copy_weights_to_huge_pages); without it the engine reads the file mapping (4 KiB "
              "pages)",
              &o.huge_pages);
  f.AddString({"--routing-from-trace"}, "FILE",
              "benchmark mode: every token takes its experts from the routing trace FILE "
              "(recorded with moetier-worker --routing-trace-out, or moetier-tracegen), cycled, "
              "instead of from the router; the same compute, only the choice replaced "
              "(random-weight models route almost uniformly; a trace gives real routing). Each "
              "timed run starts at the trace's first token. Every result line says \"routing "
              "replayed from FILE\".",
              &o.routing_from_trace);
  f.AddSwitch({"--kernels"},
              "instead of a model: matrix-vector and batched throughput of each weight type, "
              "from RAM (a matrix of --bandwidth-mib / 4) and from cache (a 256 KiB matrix), "
              "against the bandwidth",
              &o.kernels);
  ParseOnlyFlagsOrExit(f, "moetier-bench-cpu", kUsage, argc, argv);
  if (o.model.empty() && !o.kernels) {
    ExitWithUsageError("moetier-bench-cpu",
                       absl::InvalidArgumentError("--model or --kernels is required (see --help)"));
  }
  return o;
}

using bench::PrintDecodeRoofline;
using bench::RunStats;
using bench::Seconds;
using bench::Summarize;

// Multi-threaded streaming read of a buffer much larger than the caches, in
// GB/s (1e9 bytes): each thread reads its own contiguous part with the
// active SIMD level's loads.
class BandwidthProbe {
 public:
  BandwidthProbe(cpu::ThreadPool& pool, int64_t mib)
      : pool_(pool),
        n_(mib * 1024 * 1024 / static_cast<int64_t>(sizeof(float))),
        per_thread_((n_ + pool.size() - 1) / pool.size()),
        buffer_(static_cast<size_t>(n_)),
        sums_(pool.size()) {
    // Touch every page from the thread that will read it (first-touch NUMA
    // placement), with values whose sum is known.
    pool_.ParallelFor(pool_.size(), [&](int64_t t, int) {
      const int64_t begin = t * per_thread_;
      const int64_t end = std::min(n_, begin + per_thread_);
      for (int64_t i = begin; i < end; ++i) buffer_[i] = 1.0f;
    });
    Pass();  // warm-up
  }

  // The best of `passes` reads of the whole buffer. Taking the best, as
  // STREAM does, gives what the machine can deliver, so a ratio against it
  // is not flattered by a slow pass.
  double Best(int passes) {
    double best = 0.0;
    for (int p = 0; p < passes; ++p) best = std::max(best, Pass());
    return best;
  }

  double Pass() {
    const double t0 = Seconds();
    pool_.ParallelFor(pool_.size(), [&](int64_t t, int) {
      const int64_t begin = t * per_thread_;
      const int64_t end = std::min(n_, begin + per_thread_);
      // In chunks summed in double: a float accumulator stops counting at
      // 2^24, which the scalar level's four reach past 256 MiB per thread.
      constexpr int64_t kChunk = int64_t{1} << 20;
      double sum = 0.0;
      for (int64_t c = begin; c < end; c += kChunk) {
        sum += cpu::SumF32(buffer_.data() + c, std::min(kChunk, end - c));
      }
      sums_[t] = sum;
    });
    const double dt = Seconds() - t0;
    double total = 0.0;
    for (double s : sums_) total += s;
    if (std::fabs(total - static_cast<double>(n_)) > 1e-3 * n_) {
      std::fprintf(stderr, "moetier-bench-cpu: bandwidth check failed: sum %.0f, expected %lld\n",
                   total, static_cast<long long>(n_));
      std::exit(1);
    }
    return static_cast<double>(n_) * sizeof(float) / dt / 1e9;
  }

 private:
  cpu::ThreadPool& pool_;
  const int64_t n_;
  const int64_t per_thread_;
  std::vector<float> buffer_;
  std::vector<double> sums_;
};

// Bandwidth passes per measurement.
constexpr int kBandwidthPasses = 3;

int32_t Argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

bool AllFinite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

// A weight matrix of `type` with `rows` rows of k values: random block bytes
// with small finite scales (the kernels' speed does not depend on values).
std::vector<uint8_t> RandomMatrix(TensorType type, int64_t k, int64_t rows, std::mt19937& rng) {
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  const int64_t row_bytes = TensorRowBytes(type, k);
  std::vector<uint8_t> m(static_cast<size_t>(row_bytes * rows));
  for (size_t i = 0; i < m.size(); i += 4) {
    const uint32_t v = rng();
    std::memcpy(m.data() + i, &v, std::min<size_t>(4, m.size() - i));
  }
  // Scales: 0x2000 is a small positive half; float types keep random
  // mantissas with sane exponents.
  const uint16_t small_half = 0x2000;
  const int64_t n_blocks = rows * (k / info.block_elems);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = m.data() + b * info.block_bytes;
    switch (type) {
      case TensorType::kQ8_0:
      case TensorType::kQ4_0:
      case TensorType::kQ5_0:
      case TensorType::kIQ4_NL:
      case TensorType::kIQ4_XS:
        std::memcpy(blk, &small_half, 2);
        break;
      case TensorType::kQ4_K:
      case TensorType::kQ5_K:
      case TensorType::kQ4_1:
      case TensorType::kQ5_1:
        std::memcpy(blk, &small_half, 2);
        std::memcpy(blk + 2, &small_half, 2);
        break;
      case TensorType::kQ6_K:
        std::memcpy(blk + 208, &small_half, 2);
        break;
      case TensorType::kQ2_K:
        std::memcpy(blk + 80, &small_half, 2);
        std::memcpy(blk + 82, &small_half, 2);
        break;
      case TensorType::kQ3_K:
        std::memcpy(blk + 108, &small_half, 2);
        break;
      case TensorType::kMXFP4:
        blk[0] = 120;  // 2^-8: no subnormal scales
        break;
      case TensorType::kF16:
        blk[1] &= 0x3F;  // exponent below 16: no infinities or NaNs
        break;
      // Exponents 120..127, values in [2^-7, 1): a zero exponent would make
      // one value in 128 subnormal, and every multiply-add on one a
      // microcode assist that the rates would measure instead of the kernel.
      case TensorType::kBF16:
        blk[1] = static_cast<uint8_t>(0x3C | (blk[1] & 0x03));
        break;
      case TensorType::kF32:
        blk[3] = static_cast<uint8_t>(0x3C | (blk[3] & 0x03));
        break;
      default:
        if (IsIqGridType(type)) iq_chunks::PutScaleBits(type, blk, small_half);
        break;
    }
  }
  return m;
}

// Weight bytes per second MatMul streams for `n_act` activation rows.
double MatMulRate(cpu::ThreadPool& pool, TensorType type, int64_t k, const std::vector<uint8_t>& w,
                  int64_t rows, int n_act, int runs, double min_seconds) {
  const size_t row_bytes = static_cast<size_t>(TensorRowBytes(type, k));
  const size_t act_bytes = cpu::ActRowBytes(type, k);
  AlignedBytes act(act_bytes * n_act);
  std::vector<float> x(static_cast<size_t>(k * n_act));
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (float& v : x) v = gauss(rng);
  cpu::QuantizeActRows(type, x.data(), k, k, n_act, act.data());
  std::vector<float> out(static_cast<size_t>(rows * n_act));
  const int64_t chunk = std::max<int64_t>(16, rows / (4 * pool.size()) / 16 * 16);
  const int64_t n_chunks = (rows + chunk - 1) / chunk;
  auto once = [&] {
    pool.ParallelFor(n_chunks, [&](int64_t c, int) {
      const int64_t r0 = c * chunk;
      cpu::MatMul(type, k, w.data(), row_bytes, r0, std::min(rows, r0 + chunk), act.data(),
                  act_bytes, n_act, out.data(), rows);
    });
  };
  once();
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    int reps = 0;
    const double t0 = Seconds();
    double dt = 0.0;
    do {
      once();
      ++reps;
      dt = Seconds() - t0;
    } while (dt < min_seconds);
    rates.push_back(static_cast<double>(w.size()) * n_act * reps / dt);
  }
  for (float v : out) {
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "moetier-bench-cpu: non-finite kernel output\n");
      std::exit(1);
    }
  }
  return Summarize(rates).median;
}

// MOETIER_CPU_ACTIVATIONS: the quantized activation rows the kernels read.
const char* ActivationsName() {
  return cpu::ActivationsHaveResidualPlane() ? "q8x2 (int8 + residual plane)" : "q8 (one plane)";
}

int RunKernels(const Options& o) {
  cpu::ThreadPool pool(o.threads);
  std::printf("threads: %d, simd: %s\n", o.threads,
              std::string(cpu::SimdLevelName(cpu::ActiveSimdLevel())).c_str());
  std::printf("activations: %s\n", ActivationsName());
  BandwidthProbe probe(pool, o.bandwidth_mib);
  const double bw = probe.Best(o.runs);
  std::printf("RAM read bandwidth: %.2f GB/s (best of %d passes)\n", bw, o.runs);
  std::printf("%-7s %14s %9s %14s %14s %14s\n", "type", "matvec RAM", "of bw", "matvec cache",
              "batch4 cache", "batch16 cache");
  std::mt19937 rng(9);
  const int64_t k = 2048;
  for (TensorType type :
       {TensorType::kQ4_K,   TensorType::kQ5_K,    TensorType::kQ6_K,    TensorType::kQ8_0,
        TensorType::kQ4_0,   TensorType::kQ2_K,    TensorType::kQ3_K,    TensorType::kIQ4_XS,
        TensorType::kQ4_1,   TensorType::kQ5_0,    TensorType::kQ5_1,    TensorType::kIQ4_NL,
        TensorType::kMXFP4,  TensorType::kIQ3_S,   TensorType::kIQ3_XXS, TensorType::kIQ2_S,
        TensorType::kIQ2_XS, TensorType::kIQ2_XXS, TensorType::kIQ1_M,   TensorType::kIQ1_S,
        TensorType::kF16,    TensorType::kBF16,    TensorType::kF32}) {
    const int64_t row_bytes = TensorRowBytes(type, k);
    const int64_t big_rows = o.bandwidth_mib * 1024 * 1024 / 4 / row_bytes;
    const int64_t small_rows = std::max<int64_t>(16, 256 * 1024 / row_bytes / 16 * 16);
    const std::vector<uint8_t> big = RandomMatrix(type, k, big_rows, rng);
    const std::vector<uint8_t> small = RandomMatrix(type, k, small_rows, rng);
    const double ram = MatMulRate(pool, type, k, big, big_rows, 1, o.runs, 0.0) / 1e9;
    const double cache1 = MatMulRate(pool, type, k, small, small_rows, 1, o.runs, 0.05) / 1e9;
    const double cache4 = MatMulRate(pool, type, k, small, small_rows, 4, o.runs, 0.05) / 1e9;
    const double cache16 = MatMulRate(pool, type, k, small, small_rows, 16, o.runs, 0.05) / 1e9;
    std::printf("%-7s %9.2f GB/s %8.0f%% %9.2f GB/s %9.2f GB/s %9.2f GB/s\n",
                std::string(TensorTypeName(type)).c_str(), ram, 100.0 * ram / bw, cache1, cache4,
                cache16);
  }
  std::printf(
      "(rates are weight bytes x activation rows per second: in cache they measure\n"
      " compute; batches above the matvec rate mean the unpacked weights are reused)\n");
  return 0;
}

int Run(const Options& o) {
  if (!o.simd.empty()) {
    absl::StatusOr<cpu::SimdLevel> level = cpu::ParseSimdLevel(o.simd);
    absl::Status s = level.ok() ? cpu::SetSimdLevel(*level) : level.status();
    if (!s.ok()) {
      std::fprintf(stderr, "moetier-bench-cpu: --simd: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (o.kernels) return RunKernels(o);
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(o.model);
  if (!gguf.ok()) {
    std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(gguf.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) {
    std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const ModelHparams& hp = model->hparams;
  const int ctx =
      std::min(hp.n_ctx_train, std::max(o.context + o.decode_tokens, o.prompt_tokens) + 1);
  absl::StatusOr<RoutingTraceHooks> hooks = OpenRoutingTraceHooks(
      "", o.routing_from_trace, hp.n_layer, hp.n_expert, hp.n_expert_used);
  if (!hooks.ok()) {
    std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(hooks.status().message()).c_str());
    return 1;
  }
  RoutingTraceReplayer* replayer = hooks->replayer.get();
  // Appended to every result line of a replaying run.
  const std::string label = replayer != nullptr ? " [" + hooks->ReplayLabel() + "]" : "";
  CpuEngineConfig config;
  config.routing_override = replayer;
  config.max_ctx = ctx;
  config.n_threads = o.threads;
  config.max_batch = o.batch;
  config.kv_types = o.kv_types;
  config.copy_weights_to_huge_pages = o.huge_pages;
  const double t_create = Seconds();
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(*model, config);
  if (!engine.ok()) {
    std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  const double t_created = Seconds();
  CpuEngine& e = **engine;
  // Every run starts a new sequence.
  std::unique_ptr<Sequence> seq;
  auto new_sequence = [&]() -> bool {
    seq.reset();
    absl::StatusOr<std::unique_ptr<Sequence>> fresh = e.NewSequence();
    if (!fresh.ok()) {
      std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(fresh.status().message()).c_str());
      return false;
    }
    seq = *std::move(fresh);
    return true;
  };
  const int n_vocab = e.n_vocab();

  std::printf("model: %s\n", o.model.c_str());
  std::printf(
      "  %d layers, embd %d, %d experts (top %d), expert ffn %d, heads %d/%d x %d, vocab %d\n",
      hp.n_layer, hp.n_embd, hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_head, hp.n_head_kv,
      hp.head_dim, hp.n_vocab);
  std::printf("threads: %d, simd: %s, batch %d\n", o.threads,
              std::string(cpu::SimdLevelName(cpu::ActiveSimdLevel())).c_str(), o.batch);
  std::printf("activations: %s\n", ActivationsName());
  if (replayer != nullptr) {
    std::printf(
        "%s (%zu tokens, cycled from its first token in every run): the experts are the "
        "trace's, not the router's\n",
        hooks->ReplayLabel().c_str(), replayer->n_token());
  }
  if (o.huge_pages) {
    std::printf("weights copied into huge pages: %.1f GiB in %.1f s\n",
                e.allocated_bytes() / 1073741824.0, t_created - t_create);
  } else {
    const double t_fault = Seconds();
    const uint64_t touched = (*gguf)->TouchTensorPages();
    std::printf("prefaulted the model mapping in %.1f s (checksum %llu)\n", Seconds() - t_fault,
                static_cast<unsigned long long>(touched));
  }

  // Bandwidth first, on the same threads the engine will use.
  cpu::ThreadPool pool(o.threads);
  BandwidthProbe probe(pool, o.bandwidth_mib);
  const double bw = probe.Best(o.runs);
  const uint64_t bytes_per_token = DecodeWeightBytesPerToken(*model);
  std::printf("RAM read bandwidth: %.2f GB/s (best of %d passes over %lld MiB)\n", bw, o.runs,
              static_cast<long long>(o.bandwidth_mib));
  const double roofline = PrintDecodeRoofline(*model, o.kv_types, o.context, o.decode_tokens, bw);

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, n_vocab - 1);
  std::vector<int32_t> context(o.context);
  for (int32_t& t : context) t = token(rng);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (int32_t& t : prompt) t = token(rng);
  std::vector<float> logits(n_vocab);

  // Decode: greedy generation after a short context; every run must produce
  // the same tokens.
  // The machine's bandwidth can drift (other processes, other virtual
  // machines): each run is also compared with a bandwidth measured right
  // before it.
  std::vector<double> decode_rates;
  std::vector<double> run_ratios;
  std::vector<int32_t> first_tokens;
  CpuPhaseSeconds decode_phase_seconds{};
  for (int r = 0; r < o.runs + 1; ++r) {
    if (!new_sequence()) return 1;
    if (replayer != nullptr) replayer->Rewind();
    const absl::Status filled =
        o.skip_context ? e.SkipPositionsForTiming(*seq, o.context)
                       : e.Forward(*seq, context, LogitRows::kLast, logits.data());
    if (!filled.ok()) {
      std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(filled.message()).c_str());
      return 1;
    }
    std::vector<int32_t> generated;
    int32_t next = o.skip_context ? context.back() : Argmax(logits.data(), n_vocab);
    const double run_bw = r > 0 ? probe.Best(kBandwidthPasses) : 0.0;
    e.ResetPhaseTimes();
    const double t0 = Seconds();
    for (int i = 0; i < o.decode_tokens; ++i) {
      const int32_t in[1] = {next};
      if (absl::Status s = e.Forward(*seq, in, LogitRows::kLast, logits.data()); !s.ok()) {
        std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      if (!AllFinite(logits.data(), n_vocab)) {
        std::fprintf(stderr, "moetier-bench-cpu: non-finite logits at decode step %d\n", i);
        return 1;
      }
      next = Argmax(logits.data(), n_vocab);
      generated.push_back(next);
    }
    const double dt = Seconds() - t0;
    if (r == 0) {
      first_tokens = generated;  // the warm-up run
      continue;
    }
    for (int p = 0; p < static_cast<int>(CpuPhase::kCount); ++p) {
      decode_phase_seconds[p] += e.phase_seconds(static_cast<CpuPhase>(p));
    }
    if (generated != first_tokens) {
      std::fprintf(stderr, "moetier-bench-cpu: decode run %d generated different tokens\n", r);
      return 1;
    }
    decode_rates.push_back(o.decode_tokens / dt);
    run_ratios.push_back(o.decode_tokens / dt /
                         (run_bw * 1e9 / static_cast<double>(bytes_per_token)));
  }
  const RunStats decode = Summarize(decode_rates);

  // Prompt processing: the whole prompt, logits of the last token only.
  std::vector<double> prompt_rates;
  CpuPhaseSeconds prompt_phase_seconds{};
  std::vector<float> first_logits;
  for (int r = 0; r < o.runs + 1; ++r) {
    if (!new_sequence()) return 1;
    if (replayer != nullptr) replayer->Rewind();
    e.ResetPhaseTimes();
    const double t0 = Seconds();
    if (absl::Status s = e.Forward(*seq, prompt, LogitRows::kLast, logits.data()); !s.ok()) {
      std::fprintf(stderr, "moetier-bench-cpu: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    const double dt = Seconds() - t0;
    if (!AllFinite(logits.data(), n_vocab)) {
      std::fprintf(stderr, "moetier-bench-cpu: non-finite prompt logits\n");
      return 1;
    }
    if (r == 0) {
      first_logits = logits;
      continue;
    }
    if (logits != first_logits) {
      std::fprintf(stderr, "moetier-bench-cpu: prompt run %d gave different logits\n", r);
      return 1;
    }
    for (int p = 0; p < static_cast<int>(CpuPhase::kCount); ++p) {
      prompt_phase_seconds[p] += e.phase_seconds(static_cast<CpuPhase>(p));
    }
    prompt_rates.push_back(o.prompt_tokens / dt);
  }
  const RunStats pp = Summarize(prompt_rates);

  std::printf(
      "decode:  %.2f tok/s median (%.2f..%.2f), %d tokens after %d of context%s, %d runs%s\n",
      decode.median, decode.min, decode.max, o.decode_tokens, o.context,
      o.skip_context ? " (skipped, not computed)" : "", o.runs, label.c_str());
  std::printf("prompt:  %.1f tok/s median (%.1f..%.1f), %d tokens, %d runs%s\n", pp.median,
              pp.min, pp.max, o.prompt_tokens, o.runs, label.c_str());
  const RunStats ratio = Summarize(run_ratios);
  std::printf(
      "roofline ratio (decode tok/s / (bandwidth / bytes per token)): %.1f%% "
      "(median decode / best bandwidth)%s\n",
      100.0 * decode.median / roofline, label.c_str());
  std::printf(
      "  per run, against the bandwidth measured just before it: %.1f%% median "
      "(%.1f..%.1f)\n",
      100.0 * ratio.median, 100.0 * ratio.min, 100.0 * ratio.max);
  std::printf("effective decode read rate: %.2f GB/s%s\n",
              decode.median * static_cast<double>(bytes_per_token) / 1e9, label.c_str());
  PrintPhases("decode", decode_phase_seconds, label);
  PrintPhases("prompt", prompt_phase_seconds, label);
  std::printf("check: ok (runs reproduced the same tokens and logits)%s\n", label.c_str());
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(moetier::ParseOptions(argc, argv)); }
