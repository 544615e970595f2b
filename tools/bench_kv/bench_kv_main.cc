// moetier-bench-kv: each KV cache type against a baseline type on the same
// tokens: the mean and worst KL of the logits over a long context, top-1
// agreement, the bytes per token, and prompt speed, all from one run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "backend/cpu/cpu_kernels.h"
#include "bench_common.h"
#include "engine/cpu_engine.h"
#include "gguf/gguf_reader.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "nlohmann/json.hpp"

namespace moetier {
namespace {

constexpr char kUsage[] = R"(moetier-bench-kv: what a KV cache type costs in logits and speed

usage: moetier-bench-kv --model FILE [--model FILE ...] [options]

For each model, runs the same --context tokens (seeded random ids) once per
KV cache type, keys and values in that type, and compares every position's
logits with the baseline type's: mean and worst KL(baseline || type), and how
often the top token agrees. Prints the KV bytes per token of context and the
prompt speed of each type.)";

struct Options {
  std::vector<std::string> models;
  int context = 2048;
  std::vector<TensorType> types = {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                                   TensorType::kQ4_0};
  TensorType baseline = TensorType::kF16;
  bool residual_activations = true;
  int threads = 0;
  int batch = 256;
  uint32_t seed = 1;
  bool json = false;
};

absl::Status ParseKvTypeList(std::string_view flag, std::string_view value,
                             std::vector<TensorType>* out) {
  std::vector<TensorType> parsed;
  for (absl::string_view name :
       absl::StrSplit(absl::string_view(value.data(), value.size()), ',')) {
    absl::StatusOr<TensorType> t = ParseKvCacheType(std::string_view(name.data(), name.size()));
    if (!t.ok()) return FlagError(flag, std::string(t.status().message()));
    parsed.push_back(*t);
  }
  *out = std::move(parsed);
  return absl::OkStatus();
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet f;
  f.Add({"--model"}, "FILE", "GGUF model (repeat for several)",
        [&o](std::string_view, std::string_view value) {
          o.models.emplace_back(value);
          return absl::OkStatus();
        });
  f.AddInt({"--context"}, "N",
           "positions compared (default 2048; at most the model's training context)", &o.context, 1,
           1 << 20);
  f.Add({"--types"}, "LIST", "types to compare, comma-separated (default f32,f16,q8_0,q4_0)",
        [&o](std::string_view flag, std::string_view value) {
          return ParseKvTypeList(flag, value, &o.types);
        });
  f.Add({"--baseline"}, "T", "the type the others are compared with (default f16)",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          std::vector<TensorType> one;
          if (absl::Status s = ParseKvTypeList(flag, value, &one); !s.ok()) return s;
          if (one.size() != 1) return FlagError(flag, "takes one type");
          o.baseline = one[0];
          return absl::OkStatus();
        });
  f.Add({"--activations"}, "A",
        "q8x2 (default) or q8: how the kernels quantize activations. With llama.cpp's q8, any "
        "change of the attention output re-rolls the activations' own rounding, which then "
        "dominates the KL of quantized models (about 1e-2 whatever the KV type); q8x2 leaves the "
        "KV rounding",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          if (value != "q8" && value != "q8x2") {
            return FlagError(flag, absl::StrFormat("'%s' is not q8 or q8x2", value));
          }
          o.residual_activations = value == "q8x2";
          return absl::OkStatus();
        });
  bench::AddThreadsFlag(f, &o.threads);
  f.AddInt({"--batch"}, "N", "positions per forward call (default 256)", &o.batch, 1, 8192);
  f.AddInt({"--seed"}, "N", "token seed (default 1)", &o.seed);
  f.AddSwitch({"--json"}, "one JSON object per model and type on stdout instead of the table",
              &o.json);
  ParseOnlyFlagsOrExit(f, "moetier-bench-kv", kUsage, argc, argv);
  if (o.models.empty()) {
    ExitWithUsageError("moetier-bench-kv",
                       absl::InvalidArgumentError("--model FILE is required (see --help)"));
  }
  return o;
}

using bench::Seconds;

struct RunResult {
  std::vector<float> logits;  // [context][n_vocab]
  uint64_t kv_bytes_per_token = 0;
  double prompt_tokens_per_s = 0;
};

absl::StatusOr<RunResult> RunType(const Model& model, const Options& o, TensorType type,
                                  const std::vector<int32_t>& tokens) {
  CpuEngineConfig config;
  config.max_ctx = o.context;
  config.n_threads = o.threads;
  config.max_batch = o.batch;
  config.kv_types = {type, type};
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model, config);
  if (!engine.ok()) return engine.status();
  absl::StatusOr<std::unique_ptr<Sequence>> seq = (*engine)->NewSequence();
  if (!seq.ok()) return seq.status();
  RunResult r;
  r.logits.resize(tokens.size() * static_cast<size_t>((*engine)->n_vocab()));
  const double t0 = Seconds();
  if (absl::Status s = (*engine)->Forward(**seq, tokens, LogitRows::kAll, r.logits.data());
      !s.ok()) {
    return s;
  }
  r.prompt_tokens_per_s = static_cast<double>(tokens.size()) / (Seconds() - t0);
  r.kv_bytes_per_token = SequenceStateSizeOf(model, config.kv_types).kv_bytes_per_token;
  return r;
}

// KL(softmax(p) || softmax(q)) of one row, in double.
double RowKl(const float* p, const float* q, int n) {
  const double mp = *std::max_element(p, p + n);
  const double mq = *std::max_element(q, q + n);
  double zp = 0, zq = 0;
  for (int i = 0; i < n; ++i) {
    zp += std::exp(p[i] - mp);
    zq += std::exp(q[i] - mq);
  }
  double kl = 0;
  for (int i = 0; i < n; ++i) {
    const double lp = p[i] - mp - std::log(zp);
    const double lq = q[i] - mq - std::log(zq);
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

int RunModel(const Options& o, const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  if (!gguf.ok()) {
    std::fprintf(stderr, "moetier-bench-kv: %s\n", std::string(gguf.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) {
    std::fprintf(stderr, "moetier-bench-kv: %s: %s\n", path.c_str(),
                 std::string(model.status().message()).c_str());
    return 1;
  }
  const ModelHparams& hp = model->hparams;
  if (o.context > hp.n_ctx_train) {
    std::fprintf(stderr, "moetier-bench-kv: %s: --context %d exceeds its training context %d\n",
                 path.c_str(), o.context, hp.n_ctx_train);
    return 2;
  }
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, hp.n_vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(o.context));
  for (int32_t& t : tokens) t = token(rng);

  absl::StatusOr<RunResult> base = RunType(*model, o, o.baseline, tokens);
  if (!base.ok()) {
    std::fprintf(stderr, "moetier-bench-kv: %s, baseline %s: %s\n", path.c_str(),
                 KvCacheTypeName(o.baseline).c_str(), std::string(base.status().message()).c_str());
    return 1;
  }
  if (!o.json) {
    std::printf("model: %s (%d layers, heads %d/%d x %d), %d positions of seeded random tokens, "
                "activations %s\n",
                path.c_str(), hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, o.context,
                cpu::ActivationsHaveResidualPlane() ? "q8x2" : "q8");
    std::printf("  %-6s %12s %12s %12s %8s %12s %14s\n", "type", "KV B/token", "mean KL",
                "worst KL", "top-1", "prompt tok/s", "x baseline");
  }
  for (TensorType type : o.types) {
    // The baseline's own row reads its run; it is not computed or copied again.
    absl::StatusOr<RunResult> other;
    const RunResult* run = &*base;
    if (type != o.baseline) {
      other = RunType(*model, o, type, tokens);
      if (!other.ok()) {
        std::fprintf(stderr, "moetier-bench-kv: %s, %s: %s\n", path.c_str(),
                     KvCacheTypeName(type).c_str(), std::string(other.status().message()).c_str());
        return 1;
      }
      run = &*other;
    }
    double sum = 0, worst = 0;
    int same = 0;
    for (int pos = 0; pos < o.context; ++pos) {
      const float* b = base->logits.data() + static_cast<size_t>(pos) * hp.n_vocab;
      const float* r = run->logits.data() + static_cast<size_t>(pos) * hp.n_vocab;
      const double kl = RowKl(b, r, hp.n_vocab);
      sum += kl;
      worst = std::max(worst, kl);
      same += std::max_element(b, b + hp.n_vocab) - b == std::max_element(r, r + hp.n_vocab) - r;
    }
    const double mean = sum / o.context;
    const double top1 = static_cast<double>(same) / o.context;
    const double speed = run->prompt_tokens_per_s / base->prompt_tokens_per_s;
    if (o.json) {
      const nlohmann::json row = {
          {"model", path},
          {"context", o.context},
          {"baseline", KvCacheTypeName(o.baseline)},
          {"type", KvCacheTypeName(type)},
          {"kv_bytes_per_token", run->kv_bytes_per_token},
          {"mean_kl", mean},
          {"worst_kl", worst},
          {"top1", top1},
          {"prompt_tokens_per_s", run->prompt_tokens_per_s},
          {"prompt_speed_ratio", speed},
          {"activations", cpu::ActivationsHaveResidualPlane() ? "q8x2" : "q8"}};
      std::printf("%s\n", row.dump().c_str());
    } else {
      std::printf("  %-6s %12llu %12.3g %12.3g %8.3f %12.1f %14.3f\n", KvCacheTypeName(type).c_str(),
                  static_cast<unsigned long long>(run->kv_bytes_per_token), mean, worst, top1,
                  run->prompt_tokens_per_s, speed);
    }
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) {
  const moetier::Options o = moetier::ParseOptions(argc, argv);
  if (absl::Status s = moetier::cpu::SetActivationsResidualPlane(o.residual_activations); !s.ok()) {
    std::fprintf(stderr, "moetier-bench-kv: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  for (const std::string& model : o.models) {
    if (int rc = moetier::RunModel(o, model); rc != 0) return rc;
  }
  return 0;
}
