// moetier-bench-cuda: how close the CUDA engine comes to the device memory
// roofline.
//
// Decoding one token must read every dense weight, the top-k experts of every
// layer and the output matrix once, so tokens/s can never exceed
// (device memory bandwidth) / (weight bytes per token). The program measures
// that bandwidth in the same run (device-to-device copies of a buffer far
// larger than the L2 cache, timed with CUDA events), computes the bytes per
// token from the model, and prints the achieved decode rate as a fraction of
// the roofline, with prompt processing throughput alongside. Every figure is
// the median of several runs, printed with its spread; the runs must produce
// the same tokens and logits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/status_macros.h"
#include "bench_common.h"
#include "cuda_phase_report.h"
#include "engine/cuda_engine.h"
#include "gguf/gguf_reader.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "sampling/sampler.h"

namespace moetier {
namespace {

constexpr char kUsage[] = R"(moetier-bench-cuda: CUDA engine throughput against the memory roofline

usage: moetier-bench-cuda --model FILE [options]

Every weight of the model, experts included, must fit in device memory.)";

struct Options {
  std::string model;
  int device = 0;
  int runs = 5;
  int decode_tokens = 128;
  int prompt_tokens = 512;
  int batch = 512;
  int context = 16;
  bool skip_context = false;
  KvCacheTypes kv_types;
  int gemv_max_rows = cuda::kCudaGemvMaxBatch;
  bool no_cublas = false;
  bool host_routing = false;
  bool expert_at_a_time = false;
  bool no_graphs = false;
  bool chat_sampling = false;
  int64_t bandwidth_mib = 1024;
};

Options ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet f;
  bench::AddModelFlag(f, &o.model);
  f.AddInt({"--device"}, "N", "CUDA device ordinal (default 0)", &o.device, 0, 1023);
  bench::AddRunsFlag(f, &o.runs, 3, "One untimed warm-up run comes first");
  f.AddInt({"--decode-tokens"}, "N", "tokens generated per decode run (default 128)",
           &o.decode_tokens, 1, 1 << 20);
  f.AddInt({"--prompt-tokens"}, "N", "tokens per prompt-processing run (default 512)",
           &o.prompt_tokens, 1, 1 << 20);
  f.AddInt({"--batch"}, "N",
           "prompt tokens processed together, the engine's max_batch "
           "(default 512)",
           &o.batch, 1, 8192);
  f.AddInt({"--context"}, "N", "tokens already in the cache when decoding starts (default 16)",
           &o.context, 1, 1 << 20);
  f.AddSwitch({"--skip-context"},
              "the context's positions count as computed without computing them "
              "(CudaEngine::SkipPositionsForTiming: what the cache holds, zeros in a fresh "
              "engine): decode at depth without the prefill",
              &o.skip_context);
  bench::AddKvCacheTypeFlags(f, &o.kv_types);
  f.AddInt({"--gemv-max-rows"}, "N",
           "matrix inputs of up to N rows use the GEMV, more the fp16 GEMM (default 8; 0 sends "
           "everything through the GEMM)",
           &o.gemv_max_rows, 0, 8192);
  f.AddSwitch({"--no-cublas"}, "use the backend's tiled GEMM instead of cuBLAS", &o.no_cublas);
  f.AddSwitch({"--host-routing"},
              "every MoE layer waits for the router's choice on the host (one sync per layer) "
              "instead of grouping it on the device: the same logits, to measure what the "
              "device grouping gains",
              &o.host_routing);
  f.AddSwitch({"--expert-at-a-time"},
              "four launches per routed expert instead of grouped launches per layer (implies "
              "--host-routing): the same logits, to measure what grouping gains",
              &o.expert_at_a_time);
  f.Add({"--sampling"}, "S",
        "greedy (default: the argmax on the device) or chat (temperature 0.8, top-k 40, top-p "
        "0.95, min-p 0.05, seeded: the device selects the 40 best logits, the host draws from "
        "them): what sampling costs a decode step",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          if (value != "greedy" && value != "chat") {
            return FlagError(flag, absl::StrFormat("'%s' is neither greedy nor chat", value));
          }
          o.chat_sampling = value == "chat";
          return absl::OkStatus();
        });
  f.AddSwitch({"--no-graphs"},
              "launch every kernel of a decode step instead of replaying the step's captured "
              "CUDA graph: the same logits, to measure what the graph saves (--host-routing and "
              "--expert-at-a-time decode without graphs too)",
              &o.no_graphs);
  f.AddInt({"--bandwidth-mib"}, "N",
           "size of the bandwidth-test buffer (default 1024): the bandwidth is read + written "
           "bytes of a device-to-device copy, the median of --runs copies",
           &o.bandwidth_mib, int64_t{64}, int64_t{1} << 20);
  ParseOnlyFlagsOrExit(f, "moetier-bench-cuda", kUsage, argc, argv);
  if (o.model.empty()) {
    ExitWithUsageError("moetier-bench-cuda",
                       absl::InvalidArgumentError("--model is required (see --help)"));
  }
  return o;
}

using bench::PrintDecodeRoofline;
using bench::RunStats;
using bench::Seconds;
using bench::Summarize;

absl::Status Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s failed: %s", what, cudaGetErrorString(err)));
}

// Device memory bandwidth in GB/s (1e9 bytes): bytes read plus bytes written
// by device-to-device copies of `mib` MiB, timed with events; the median of
// `passes` copies after one warm-up copy.
absl::StatusOr<RunStats> MeasureBandwidth(int64_t mib, int passes) {
  const size_t bytes = static_cast<size_t>(mib) * 1024 * 1024;
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  absl::Status s = Check(cudaMalloc(&src, bytes), "cudaMalloc of the bandwidth buffer");
  if (s.ok()) s = Check(cudaMalloc(&dst, bytes), "cudaMalloc of the bandwidth buffer");
  if (s.ok()) s = Check(cudaMemset(src, 1, bytes), "cudaMemset");
  if (s.ok()) s = Check(cudaEventCreate(&start), "cudaEventCreate");
  if (s.ok()) s = Check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> rates;
  for (int p = 0; s.ok() && p < passes + 1; ++p) {
    s = Check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    if (s.ok()) s = Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr),
                          "cudaMemcpyAsync (device to device)");
    if (s.ok()) s = Check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    if (s.ok()) s = Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    if (s.ok()) s = Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && p > 0) rates.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (src != nullptr) cudaFree(src);
  if (dst != nullptr) cudaFree(dst);
  if (!s.ok()) return s;
  return Summarize(rates);
}

int32_t Argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

bool AllFinite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "moetier-bench-cuda: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run(const Options& o) {
  const int n_devices = CudaDeviceCount();
  if (n_devices == 0) {
    absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
    std::fprintf(stderr,
                 "moetier-bench-cuda: no CUDA device on this machine (%s); it measures the CUDA "
                 "engine and needs an NVIDIA GPU and driver (moetier-bench-cpu measures the CPU "
                 "engine)\n",
                 devices.ok() ? "none found" : std::string(devices.status().message()).c_str());
    return 1;
  }
  if (o.device >= n_devices) {
    std::fprintf(stderr, "moetier-bench-cuda: --device %d: this machine has cuda:0..cuda:%d\n",
                 o.device, n_devices - 1);
    return 2;
  }
  cudaDeviceProp prop{};
  if (absl::Status s = Check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
      !s.ok()) {
    return Fail(s);
  }
  // The bandwidth copies run on the current device.
  if (absl::Status s = Check(cudaSetDevice(o.device), "cudaSetDevice"); !s.ok()) return Fail(s);
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(o.model);
  if (!gguf.ok()) return Fail(gguf.status());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) return Fail(model.status());
  const ModelHparams& hp = model->hparams;
  const int ctx =
      std::min(hp.n_ctx_train, std::max(o.context + o.decode_tokens, o.prompt_tokens) + 1);
  CudaEngineConfig config;
  config.device = o.device;
  config.max_ctx = ctx;
  config.max_batch = o.batch;
  config.gemv_max_rows = o.gemv_max_rows;
  config.kv_types = o.kv_types;
  config.use_cublas = !o.no_cublas && cuda::CudaBlasAvailable();
  config.route_on_device = !o.host_routing && !o.expert_at_a_time;
  config.group_expert_launches = !o.expert_at_a_time;
  config.use_cuda_graphs = !o.no_graphs;
  const double t_create = Seconds();
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(*model, config);
  if (!engine.ok()) return Fail(engine.status());
  const double t_created = Seconds();
  CudaEngine& e = **engine;
  const int n_vocab = e.n_vocab();
  if (o.context + o.decode_tokens > e.max_ctx() || o.prompt_tokens > e.max_ctx()) {
    std::fprintf(stderr, "moetier-bench-cuda: the runs need more than the model's %d positions\n",
                 e.max_ctx());
    return 2;
  }

  std::printf("model: %s\n", o.model.c_str());
  std::printf(
      "  %d layers, embd %d, %d experts (top %d), expert ffn %d, heads %d/%d x %d, vocab %d\n",
      hp.n_layer, hp.n_embd, hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_head, hp.n_head_kv,
      hp.head_dim, hp.n_vocab);
  std::printf("device: cuda:%d %s (sm_%d%d, %d SMs, %.1f GiB)\n", o.device, prop.name,
              prop.major, prop.minor, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0);
  std::printf("batch %d, GEMV up to %d rows, GEMM via %s\n", o.batch, o.gemv_max_rows,
              config.use_cublas ? "cuBLAS" : "the tiled kernel");
  std::printf("sampling: %s\n", o.chat_sampling
                                    ? "chat (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)"
                                    : "greedy");
  std::printf("experts: %s, MoE routing %s\n",
              config.group_expert_launches ? "grouped launches" : "four launches each",
              config.route_on_device ? "grouped on the device in decode" : "on the host");
  std::printf("weights uploaded: %.2f GiB in %.1f s; buffers and KV cache (%d tokens): %.2f GiB\n",
              e.weight_bytes() / 1073741824.0, t_created - t_create, ctx,
              e.buffer_bytes() / 1073741824.0);

  absl::StatusOr<RunStats> bw = MeasureBandwidth(o.bandwidth_mib, o.runs);
  if (!bw.ok()) return Fail(bw.status());
  const uint64_t bytes_per_token = DecodeWeightBytesPerToken(*model);
  std::printf(
      "device memory bandwidth: %.1f GB/s median (%.1f..%.1f) of %d device-to-device copies of "
      "%lld MiB (read + write)\n",
      bw->median, bw->min, bw->max, o.runs, static_cast<long long>(o.bandwidth_mib));
  const double roofline =
      PrintDecodeRoofline(*model, o.kv_types, o.context, o.decode_tokens, bw->median);

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, n_vocab - 1);
  std::vector<int32_t> context(static_cast<size_t>(o.context));
  for (int32_t& t : context) t = token(rng);
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (int32_t& t : prompt) t = token(rng);
  std::vector<float> logits(static_cast<size_t>(n_vocab));

  // Every run is a new sequence.
  std::unique_ptr<Sequence> seq;
  auto new_sequence = [&]() -> absl::Status {
    seq.reset();
    absl::StatusOr<std::unique_ptr<Sequence>> fresh = e.NewSequence();
    if (!fresh.ok()) return fresh.status();
    seq = *std::move(fresh);
    return absl::OkStatus();
  };
  SamplingParams sampling{.temperature = 0};
  if (o.chat_sampling) {
    sampling = kCommandLineSamplingDefaults;
    sampling.seed = 1234;
  }
  if (absl::Status s = ValidateSamplingParams(sampling); !s.ok()) return Fail(s);

  // One decode run: a new sequence, its context, then tokens sampled from
  // the device's row (greedy: its argmax; chat: its 40 best), no row coming
  // to the host per token. A fresh sampler per run draws the same tokens.
  auto decode_run = [&](std::vector<int32_t>& generated, double& seconds) -> absl::Status {
    MOETIER_RETURN_IF_ERROR(new_sequence());
    if (o.skip_context) {
      MOETIER_RETURN_IF_ERROR(e.SkipPositionsForTiming(*seq, o.context));
    } else {
      MOETIER_RETURN_IF_ERROR(e.Forward(*seq, context, LogitRows::kLast, logits.data()));
      if (!AllFinite(logits.data(), logits.size())) {
        return absl::InternalError("non-finite logits after the context");
      }
    }
    generated.clear();
    Sampler sampler(n_vocab, sampling);
    int32_t next = o.skip_context ? context.back() : Argmax(logits.data(), n_vocab);
    const double t0 = Seconds();
    for (int i = 0; i < o.decode_tokens; ++i) {
      const int32_t in[1] = {next};
      MOETIER_RETURN_IF_ERROR(e.Forward(*seq, in, LogitRows::kNone, nullptr));
      absl::StatusOr<int32_t> sampled = e.Sample(sampler);
      if (!sampled.ok()) return sampled.status();
      next = *sampled;
      generated.push_back(next);
    }
    seconds = Seconds() - t0;
    return absl::OkStatus();
  };
  // One prompt-processing run: the whole prompt, logits of the last token.
  auto prompt_run = [&](double& seconds) -> absl::Status {
    MOETIER_RETURN_IF_ERROR(new_sequence());
    const double t0 = Seconds();
    MOETIER_RETURN_IF_ERROR(e.Forward(*seq, prompt, LogitRows::kLast, logits.data()));
    seconds = Seconds() - t0;
    if (!AllFinite(logits.data(), logits.size())) {
      return absl::InternalError("non-finite prompt logits");
    }
    return absl::OkStatus();
  };

  // Decode: every run must produce the same tokens. Run 0 is the warm-up.
  std::vector<double> decode_rates;
  std::vector<int32_t> first_tokens;
  std::vector<int32_t> generated;
  for (int r = 0; r < o.runs + 1; ++r) {
    double dt = 0.0;
    if (absl::Status s = decode_run(generated, dt); !s.ok()) return Fail(s);
    if (r == 0) {
      first_tokens = generated;
      continue;
    }
    if (generated != first_tokens) {
      std::fprintf(stderr, "moetier-bench-cuda: decode run %d generated different tokens\n", r);
      return 1;
    }
    decode_rates.push_back(o.decode_tokens / dt);
  }
  const RunStats decode = Summarize(decode_rates);

  // Prompt processing: every run must give the same logits.
  std::vector<double> prompt_rates;
  std::vector<float> first_logits;
  for (int r = 0; r < o.runs + 1; ++r) {
    double dt = 0.0;
    if (absl::Status s = prompt_run(dt); !s.ok()) return Fail(s);
    if (r == 0) {
      first_logits = logits;
      continue;
    }
    if (logits != first_logits) {
      std::fprintf(stderr, "moetier-bench-cuda: prompt run %d gave different logits\n", r);
      return 1;
    }
    prompt_rates.push_back(o.prompt_tokens / dt);
  }
  const RunStats pp = Summarize(prompt_rates);

  std::printf(
      "decode:  %.2f tok/s median (%.2f..%.2f), %d tokens after %d of context%s, %d runs\n",
      decode.median, decode.min, decode.max, o.decode_tokens, o.context,
      o.skip_context ? " (skipped, not computed)" : "", o.runs);
  std::printf("prompt:  %.1f tok/s median (%.1f..%.1f), %d tokens, %d runs\n", pp.median, pp.min,
              pp.max, o.prompt_tokens, o.runs);
  std::printf(
      "roofline ratio (decode tok/s / (bandwidth / bytes per token)): %.1f%% "
      "(median decode / median bandwidth)\n",
      100.0 * decode.median / roofline);
  std::printf("effective decode read rate: %.1f GB/s\n",
              decode.median * static_cast<double>(bytes_per_token) / 1e9);
  if (!config.use_cuda_graphs || !config.route_on_device) {
    std::printf("decode graphs: off (%s)\n", config.use_cuda_graphs
                                                   ? "they need the MoE routed on the device"
                                                   : "--no-graphs");
  } else if (!e.graphs_failed().ok()) {
    std::printf("decode graphs: failed, decoded without them: %s\n",
                std::string(e.graphs_failed().message()).c_str());
  } else {
    std::printf("decode graphs: %s\n", e.captured_decode_graphs() > 0
                                            ? "on (one replay per decode step)"
                                            : "on, but no step qualified");
  }

  // Where the time goes: one more run of each with the engine's phase timers
  // (kernels launched one by one, so decode runs without its graph); they
  // must reproduce the timed runs' tokens and logits.
  if (absl::Status s = e.EnablePhaseTiming(true); !s.ok()) return Fail(s);
  double timed_decode_s = 0.0, timed_prompt_s = 0.0;
  if (absl::Status s = decode_run(generated, timed_decode_s); !s.ok()) return Fail(s);
  const CudaPhaseSeconds decode_phases = e.phase_seconds();
  e.ResetPhaseTimes();
  if (absl::Status s = prompt_run(timed_prompt_s); !s.ok()) return Fail(s);
  const CudaPhaseSeconds prompt_phases = e.phase_seconds();
  if (!e.phase_timing_error().ok()) {
    std::printf("phase timers failed, figures incomplete: %s\n",
                std::string(e.phase_timing_error().message()).c_str());
  }
  if (generated != first_tokens || logits != first_logits) {
    std::fprintf(stderr, "moetier-bench-cuda: the phase-timed runs changed the results\n");
    return 1;
  }
  std::printf("%s\n", CudaPhaseLine("decode", decode_phases, timed_decode_s, o.decode_tokens)
                          .c_str());
  std::printf("%s\n", CudaPhaseLine("prompt", prompt_phases, timed_prompt_s, o.prompt_tokens)
                          .c_str());
  std::printf("check: ok (runs reproduced the same tokens and logits)\n");
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(moetier::ParseOptions(argc, argv)); }
