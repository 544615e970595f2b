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
#include "generation/generate_loop.h"
#include "model/architectures.h"
#include "sampling/sampler.h"
#include "setup/worker_engine.h"
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
absl::StatusOr<RoutingTraceHooks> OpenHooks(const WorkerOptions& options, const Model& model,
                                            std::FILE* err) {
  const ModelHparams& hp = model.hparams;
  absl::StatusOr<RoutingTraceHooks> hooks = OpenRoutingTraceHooks(
      options.routing_trace_out, options.routing_from_trace, hp.n_layer, hp.n_expert,
      hp.n_expert_used, options.prefetch_accuracy, RoutedLayers(model.weights));
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

// The engine the flags ask for over the model's own mapping, and what it
// reads through (declared first, so it outlives the engine).
struct StandaloneEngine {
  std::unique_ptr<MappedExpertSource> mapped;
  WorkerEngine worker;

  // After a run: the cache's counters on `err`.
  void ReportCache(std::FILE* err) const {
    if (worker.cache_report != nullptr) {
      std::fprintf(err, "%s\n", ExpertCacheSummary(*worker.cache_report).c_str());
    }
  }
};

absl::StatusOr<StandaloneEngine> MakeEngine(const WorkerOptions& options, const Model& model,
                                            int ctx, const RoutingTraceHooks& hooks,
                                            std::FILE* err) {
  StandaloneEngine out;
  out.mapped = std::make_unique<MappedExpertSource>(model.weights);
  ExpertOrigin experts;
  experts.source = out.mapped.get();
  experts.source_is_mapping = true;
  absl::StatusOr<WorkerEngine> worker = MakeWorkerEngine(options, model, ctx, experts, hooks, err);
  if (!worker.ok()) return worker.status();
  out.worker = *std::move(worker);
  return out;
}

absl::Status RunLogits(const WorkerOptions& options, const Model& model, std::FILE* err) {
  const ModelHparams& hp = model.hparams;
  for (int32_t id : options.tokens) {
    if (id >= hp.n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d in --tokens is outside the vocabulary 0..%d", id, hp.n_vocab - 1));
    }
  }
  absl::StatusOr<int> ctx = ResolveContextLength(options, hp.n_ctx_train, options.tokens.size());
  if (!ctx.ok()) return ctx.status();
  if (options.tokens.size() > static_cast<size_t>(*ctx)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d tokens do not fit the context of %d tokens (see --ctx)", options.tokens.size(), *ctx));
  }
  absl::StatusOr<RoutingTraceHooks> hooks = OpenHooks(options, model, err);
  if (!hooks.ok()) return hooks.status();
  absl::StatusOr<StandaloneEngine> engine = MakeEngine(options, model, *ctx, *hooks, err);
  if (!engine.ok()) return engine.status();

  std::FILE* file = std::fopen(options.logits_out.c_str(), "wb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot create --logits-out file '%s': %s",
                                                      options.logits_out, std::strerror(errno)));
  }
  const size_t n_vocab = static_cast<size_t>(hp.n_vocab);
  const size_t chunk_tokens =
      options.ubatch_size > 0 ? std::min(kScoreChunk, static_cast<size_t>(options.ubatch_size))
                              : kScoreChunk;
  std::vector<float> logits(chunk_tokens * n_vocab);
  const std::span<const int32_t> tokens(options.tokens);
  ForwardEngine& e = *engine->worker.engine;
  absl::StatusOr<std::unique_ptr<Sequence>> seq = e.NewSequence();
  absl::Status status = seq.status();
  for (size_t start = 0; start < tokens.size() && status.ok(); start += chunk_tokens) {
    const std::span<const int32_t> chunk =
        tokens.subspan(start, std::min(chunk_tokens, tokens.size() - start));
    status = e.Forward(**seq, chunk, LogitRows::kAll, logits.data());
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
// by the assistant's generation prompt, as the daemon renders it (the
// vocabulary's bos and eos text, Qwen3.5 told apart by its pre-tokenizer). A
// model without a template gets plain ChatML, as llama.cpp does.
absl::StatusOr<std::string> RenderChatPrompt(const Tokenizer& tokenizer,
                                             std::string_view user_text) {
  ChatTemplate chat_template(ChatTemplateStyle::kChatMl);
  if (!tokenizer.chat_template().empty()) {
    absl::StatusOr<ChatTemplate> detected = ChatTemplate::ForTokenizer(tokenizer);
    if (!detected.ok()) return detected.status();
    chat_template = *detected;
  }
  const ChatMessage message[1] = {{"user", std::string(user_text)}};
  return chat_template.Render(message, ChatRenderOptions{});
}

// Streams the generated text to `out`; a stop token ends the text unprinted.
class TextSink final : public TokenSink {
 public:
  TextSink(const Tokenizer& tokenizer, std::FILE* out)
      : decoder_(tokenizer, /*render_special=*/false), out_(out) {}

  absl::Status OnToken(int32_t token, bool is_stop, double, const TokenLogprobs*) override {
    if (is_stop) return absl::OkStatus();
    text_.clear();
    if (absl::Status s = decoder_.Push(token, &text_); !s.ok()) return s;
    std::fwrite(text_.data(), 1, text_.size(), out_);
    std::fflush(out_);
    return absl::OkStatus();
  }
  void Finish() {
    text_.clear();
    decoder_.Flush(&text_);
    text_.push_back('\n');
    std::fwrite(text_.data(), 1, text_.size(), out_);
    std::fflush(out_);
  }

 private:
  StreamingDecoder decoder_;
  std::FILE* out_;
  std::string text_;
};

const char* StopName(StopReason stop) {
  switch (stop) {
    case StopReason::kEndOfGeneration:
      return "end of generation";
    case StopReason::kMaxTokens:
      return "length";
    case StopReason::kContextFull:
      return "context full";
    case StopReason::kCancelled:
      return "stopped";
    case StopReason::kError:
    case StopReason::kComplete:
      break;  // not a generation's end
  }
  return "unknown";
}

absl::Status RunGenerate(const WorkerOptions& options, const Model& model,
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
  const ModelHparams& hp = model.hparams;
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
  absl::StatusOr<int> ctx = ResolveContextLength(options, hp.n_ctx_train, wanted);
  if (!ctx.ok()) return ctx.status();
  if (prompt_ids->size() >= static_cast<size_t>(*ctx)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt's %d tokens leave no room in the context of %d tokens (see --ctx)",
        prompt_ids->size(), *ctx));
  }

  SamplingParams sampling = options.sampling;  // checked by ParseWorkerArgs
  if (!options.seed_given) {
    sampling.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::fprintf(err, "seed: %llu\n", static_cast<unsigned long long>(sampling.seed));
  }
  Sampler sampler(hp.n_vocab, sampling);
  absl::StatusOr<RoutingTraceHooks> hooks = OpenHooks(options, model, err);
  if (!hooks.ok()) return hooks.status();
  absl::StatusOr<StandaloneEngine> engine = MakeEngine(options, model, *ctx, *hooks, err);
  if (!engine.ok()) return engine.status();
  ForwardEngine& e = *engine->worker.engine;
  absl::StatusOr<std::unique_ptr<Sequence>> seq = e.NewSequence();
  if (!seq.ok()) return seq.status();

  TextSink sink(tokenizer, out);
  const GenerationRequest request{.prompt = *prompt_ids,
                                  .max_new_tokens = options.n_predict,
                                  .stop_ids = tokenizer.end_of_generation_ids(),
                                  .ubatch_size = options.ubatch_size};
  absl::StatusOr<GenerationResult> result = RunGeneration(e, **seq, sampler, request, sink);
  if (!result.ok()) return result.status();
  if (!result->engine_error.ok()) return result->engine_error;
  sink.Finish();

  // The stop token is not part of the text.
  const int generated =
      result->generated - (result->stop == StopReason::kEndOfGeneration ? 1 : 0);
  const double prefill_s = result->prefill_s;
  const double decode_s = result->decode_s;
  const std::string replayed = hooks->replayer != nullptr ? "; " + hooks->ReplayLabel() : "";
  std::fprintf(err,
               "prompt: %zu tokens in %.2f s (%.1f tok/s); generated: %d tokens in %.2f s "
               "(%.1f tok/s); stop: %s%s\n",
               prompt_ids->size(), prefill_s,
               prefill_s > 0 ? static_cast<double>(prompt_ids->size()) / prefill_s : 0.0, generated,
               decode_s, decode_s > 0 ? generated / decode_s : 0.0, StopName(result->stop),
               replayed.c_str());
  engine->ReportCache(err);
  return FinishHooks(*hooks, err);
}

}  // namespace

absl::Status RunStandalone(const WorkerOptions& options, std::FILE* out, std::FILE* err) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(options.model_path);
  if (!gguf.ok()) return gguf.status();
  absl::StatusOr<Model> model = LoadWorkerModel(**gguf, options);
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
