#include "standalone/standalone.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/forward_engine.h"
#include "engine/mapped_expert_source.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "model/qwen3moe_model.h"
#include "reference/reference_qwen3moe.h"
#include "sampling/sampler.h"
#include "standalone/expert_cache_setup.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {
namespace {

static_assert(std::endian::native == std::endian::little,
              "--logits-out writes the host's float32 bytes, which must be little-endian");

// Rows of logits computed per engine call when scoring: bounds the buffer to
// kScoreChunk × n_vocab floats however long the input is.
constexpr size_t kScoreChunk = 32;

// The routing trace hooks the flags ask for (none without the flags). They
// must outlive the engine given them.
absl::StatusOr<RoutingTraceHooks> OpenHooks(const WorkerOptions& options,
                                            const Qwen3MoeHparams& hp, std::FILE* err) {
  absl::StatusOr<RoutingTraceHooks> hooks =
      OpenRoutingTraceHooks(options.routing_trace_out, options.routing_from_trace, hp.n_layer,
                            hp.n_expert, hp.n_expert_used);
  if (hooks.ok() && hooks->replayer != nullptr) {
    std::fprintf(err, "%s (%zu tokens, cycled): the experts are the trace's, not the router's\n",
                 hooks->ReplayLabel().c_str(), hooks->replayer->n_token());
  }
  return hooks;
}

// Closes the recording, if any, and says what it holds.
absl::Status FinishHooks(RoutingTraceHooks& hooks, std::FILE* err) {
  if (hooks.recorder == nullptr) return absl::OkStatus();
  if (absl::Status s = hooks.recorder->Close(); !s.ok()) return s;
  std::fprintf(err, "routing trace: %llu tokens recorded to %s\n",
               static_cast<unsigned long long>(hooks.recorder->tokens_written()),
               hooks.recorder->path().c_str());
  return absl::OkStatus();
}

// An engine with what it reads from: with an expert cache, the cache and
// the mapping it copies from (declared first, so they outlive the engine).
struct StandaloneEngine {
  std::unique_ptr<MappedExpertSource> mapped;
  std::unique_ptr<SlotCachedExpertSource> cache;
  std::unique_ptr<ForwardEngine> engine;
  const ExpertCacheReport* report = nullptr;  // the cache in use, if any

  // After a run: the cache's counters on `err`.
  void ReportCache(std::FILE* err) const {
    if (report != nullptr) std::fprintf(err, "%s\n", ExpertCacheSummary(*report).c_str());
  }
};

absl::StatusOr<StandaloneEngine> MakeEngine(const WorkerOptions& options,
                                            const Qwen3MoeModel& model, int ctx,
                                            const RoutingTraceHooks& hooks, std::FILE* err) {
  StandaloneEngine out;
  switch (options.backend) {
    case BackendKind::kCuda: {
      out.mapped = std::make_unique<MappedExpertSource>(model.weights);
      absl::StatusOr<CudaWorkerEngine> cuda = MakeCudaWorkerEngine(
          options, model, ctx, *out.mapped, {}, hooks, /*cache_by_default=*/false, err);
      if (!cuda.ok()) return cuda.status();
      out.report = cuda->cache_report;
      out.engine = std::move(cuda->engine);
      return out;
    }
    case BackendKind::kReference: {
      if (hooks.recorder != nullptr || hooks.replayer != nullptr) {
        return absl::InvalidArgumentError(
            "routing traces need the cpu backend (the reference has no routing hook)");
      }
      absl::StatusOr<std::unique_ptr<ReferenceQwen3Moe>> ref =
          ReferenceQwen3Moe::Create(model, ctx);
      if (!ref.ok()) return ref.status();
      out.engine = *std::move(ref);
      return out;
    }
    case BackendKind::kCpu: {
      out.mapped = std::make_unique<MappedExpertSource>(model.weights);
      absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
          MakeWorkerExpertCache(options, model, *out.mapped, err);
      if (!cache.ok()) return cache.status();
      out.cache = *std::move(cache);
      out.report = out.cache.get();
      EngineOptions engine_options;
      engine_options.max_ctx = ctx;
      engine_options.n_threads =
          options.n_threads > 0
              ? options.n_threads
              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      engine_options.weight_pages = options.weight_pages;
      engine_options.routing_observer = hooks.recorder.get();
      engine_options.routing_override = hooks.replayer.get();
      engine_options.expert_source = out.cache.get();
      absl::StatusOr<std::unique_ptr<ForwardEngine>> engine = CreateCpuEngine(model, engine_options);
      if (!engine.ok()) return engine.status();
      out.engine = *std::move(engine);
      return out;
    }
  }
  return absl::InternalError("unknown backend");
}

// The KV cache length: --ctx, or the default raised to fit `needed` tokens,
// never beyond the model's training context.
absl::StatusOr<int> ResolveCtx(const WorkerOptions& options, const Qwen3MoeHparams& hp,
                               size_t needed) {
  if (options.ctx > 0) {
    if (options.ctx > hp.n_ctx_train) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--ctx %d exceeds the model's training context of %d tokens", options.ctx,
                          hp.n_ctx_train));
    }
    return options.ctx;
  }
  const size_t ctx = std::max<size_t>(kDefaultCtx, needed);
  return static_cast<int>(std::min<size_t>(ctx, hp.n_ctx_train));
}

absl::Status RunLogits(const WorkerOptions& options, const Qwen3MoeModel& model,
                       std::FILE* err) {
  const Qwen3MoeHparams& hp = model.hparams;
  for (int32_t id : options.tokens) {
    if (id >= hp.n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d in --tokens is outside the vocabulary 0..%d", id, hp.n_vocab - 1));
    }
  }
  absl::StatusOr<int> ctx = ResolveCtx(options, hp, options.tokens.size());
  if (!ctx.ok()) return ctx.status();
  if (options.tokens.size() > static_cast<size_t>(*ctx)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d tokens do not fit the context of %d tokens (see --ctx)", options.tokens.size(), *ctx));
  }
  absl::StatusOr<RoutingTraceHooks> hooks = OpenHooks(options, hp, err);
  if (!hooks.ok()) return hooks.status();
  absl::StatusOr<StandaloneEngine> engine = MakeEngine(options, model, *ctx, *hooks, err);
  if (!engine.ok()) return engine.status();

  std::FILE* file = std::fopen(options.logits_out.c_str(), "wb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot create --logits-out file '%s': %s",
                                                      options.logits_out, std::strerror(errno)));
  }
  const size_t n_vocab = static_cast<size_t>(hp.n_vocab);
  std::vector<float> logits(kScoreChunk * n_vocab);
  const std::span<const int32_t> tokens(options.tokens);
  absl::Status status;
  for (size_t start = 0; start < tokens.size() && status.ok(); start += kScoreChunk) {
    const std::span<const int32_t> chunk =
        tokens.subspan(start, std::min(kScoreChunk, tokens.size() - start));
    status = engine->engine->Forward(chunk, static_cast<int>(start), LogitRows::kAll,
                                     logits.data());
    if (status.ok() && std::fwrite(logits.data(), sizeof(float), chunk.size() * n_vocab, file) !=
                           chunk.size() * n_vocab) {
      status = absl::DataLossError(
          absl::StrFormat("writing '%s' failed: %s", options.logits_out, std::strerror(errno)));
    }
  }
  if (std::fclose(file) != 0 && status.ok()) {
    status = absl::DataLossError(
        absl::StrFormat("closing '%s' failed: %s", options.logits_out, std::strerror(errno)));
  }
  if (status.ok()) status = FinishHooks(*hooks, err);
  if (!status.ok()) std::remove(options.logits_out.c_str());
  if (status.ok()) engine->ReportCache(err);
  return status;
}

absl::Status RunTokenize(const WorkerOptions& options, const Tokenizer& tokenizer, std::FILE* out) {
  absl::StatusOr<std::vector<int32_t>> ids =
      tokenizer.Encode(options.text, /*parse_special=*/true, /*add_special=*/true);
  if (!ids.ok()) return ids.status();
  const std::string line = absl::StrCat(absl::StrJoin(*ids, ","), "\n");
  std::fwrite(line.data(), 1, line.size(), out);
  return absl::OkStatus();
}

// `user_text` as the one user message of the model's chat template, followed
// by the assistant's generation prompt. A model without a template gets
// plain ChatML, as llama.cpp does.
absl::StatusOr<std::string> RenderChatPrompt(const Tokenizer& tokenizer,
                                             std::string_view user_text) {
  ChatTemplate chat_template(ChatTemplateStyle::kChatMl);
  if (!tokenizer.chat_template().empty()) {
    absl::StatusOr<ChatTemplate> detected = ChatTemplate::Detect(tokenizer.chat_template());
    if (!detected.ok()) return detected.status();
    chat_template = *detected;
  }
  const ChatMessage message[1] = {{"user", std::string(user_text)}};
  return chat_template.Render(message, ChatRenderOptions{});
}

absl::Status RunGenerate(const WorkerOptions& options, const Qwen3MoeModel& model,
                         const Tokenizer& tokenizer, std::FILE* out, std::FILE* err) {
  std::string prompt = options.text;
  if (options.chat) {
    absl::StatusOr<std::string> rendered = RenderChatPrompt(tokenizer, options.text);
    if (!rendered.ok()) return rendered.status();
    prompt = *std::move(rendered);
  }
  absl::StatusOr<std::vector<int32_t>> prompt_ids =
      tokenizer.Encode(prompt, /*parse_special=*/true, /*add_special=*/true);
  if (!prompt_ids.ok()) return prompt_ids.status();
  if (prompt_ids->empty()) return absl::InvalidArgumentError("the prompt is empty");
  const Qwen3MoeHparams& hp = model.hparams;
  for (int32_t id : *prompt_ids) {
    if (id >= hp.n_vocab) {
      return absl::FailedPreconditionError(
          absl::StrFormat("the tokenizer produced id %d, outside the model's vocabulary 0..%d", id,
                          hp.n_vocab - 1));
    }
  }
  // Unbounded generation (-n -1) runs until the default or given context is
  // full rather than sizing the cache for the whole training context.
  const size_t wanted = options.n_predict < 0
                            ? prompt_ids->size() + 1
                            : prompt_ids->size() + static_cast<size_t>(options.n_predict);
  absl::StatusOr<int> ctx = ResolveCtx(options, hp, wanted);
  if (!ctx.ok()) return ctx.status();
  if (prompt_ids->size() >= static_cast<size_t>(*ctx)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt's %d tokens leave no room in the context of %d tokens (see --ctx)",
        prompt_ids->size(), *ctx));
  }

  SamplingParams sampling = options.sampling;
  if (!options.seed_given) {
    sampling.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::fprintf(err, "seed: %llu\n", static_cast<unsigned long long>(sampling.seed));
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(hp.n_vocab, sampling);
  if (!sampler.ok()) return sampler.status();
  absl::StatusOr<RoutingTraceHooks> hooks = OpenHooks(options, hp, err);
  if (!hooks.ok()) return hooks.status();
  absl::StatusOr<StandaloneEngine> engine = MakeEngine(options, model, *ctx, *hooks, err);
  if (!engine.ok()) return engine.status();
  ForwardEngine& e = *engine->engine;

  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = e.Forward(*prompt_ids, 0, LogitRows::kLast, logits.data()); !s.ok()) {
    return s;
  }
  for (int32_t id : *prompt_ids) sampler->Accept(id);
  const auto t1 = std::chrono::steady_clock::now();

  StreamingDecoder decoder(tokenizer, /*render_special=*/false);
  std::string text;
  int pos = static_cast<int>(prompt_ids->size());
  int generated = 0;
  const char* stop_reason = "length";
  while (options.n_predict < 0 || generated < options.n_predict) {
    const int32_t token = sampler->Sample(logits);
    if (tokenizer.IsEndOfGeneration(token)) {
      stop_reason = "end of generation";
      break;
    }
    sampler->Accept(token);
    ++generated;
    text.clear();
    if (absl::Status s = decoder.Push(token, &text); !s.ok()) return s;
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    if (options.n_predict >= 0 && generated == options.n_predict) break;
    if (pos >= e.max_ctx()) {
      stop_reason = "context full";
      break;
    }
    const int32_t one[1] = {token};
    if (absl::Status s = e.Forward(one, pos, LogitRows::kLast, logits.data()); !s.ok()) return s;
    ++pos;
  }
  text.clear();
  decoder.Flush(&text);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);

  const auto t2 = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const std::string replayed = hooks->replayer != nullptr ? "; " + hooks->ReplayLabel() : "";
  std::fprintf(err,
               "prompt: %zu tokens in %.2f s (%.1f tok/s); generated: %d tokens in %.2f s "
               "(%.1f tok/s); stop: %s%s\n",
               prompt_ids->size(), prefill_s,
               prefill_s > 0 ? static_cast<double>(prompt_ids->size()) / prefill_s : 0.0, generated,
               decode_s, decode_s > 0 ? generated / decode_s : 0.0, stop_reason, replayed.c_str());
  engine->ReportCache(err);
  return FinishHooks(*hooks, err);
}

}  // namespace

absl::Status RunStandalone(const WorkerOptions& options, std::FILE* out, std::FILE* err) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(options.model_path);
  if (!gguf.ok()) return gguf.status();
  absl::StatusOr<Qwen3MoeModel> model = LoadQwen3Moe(**gguf);
  if (!model.ok()) return model.status();

  if (options.mode == StandaloneMode::kLogits) return RunLogits(options, *model, err);

  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*gguf)->metadata());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(options.model_path, ": ", tokenizer.status().message()));
  }
  if (options.mode == StandaloneMode::kTokenize) return RunTokenize(options, *tokenizer, out);
  return RunGenerate(options, *model, *tokenizer, out, err);
}

}  // namespace moetier
