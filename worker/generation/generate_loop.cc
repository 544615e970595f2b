#include "generation/generate_loop.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"

namespace moetier {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Forwards prompt[seq.length()..end) in calls of at most ubatch_size
// positions, saving the checkpoint where asked.
absl::Status Prefill(ForwardEngine& engine, Sequence& seq, const GenerationRequest& request) {
  const int n_prompt = static_cast<int>(request.prompt.size());
  const int ubatch = request.ubatch_size > 0 ? request.ubatch_size : n_prompt;
  auto forward_until = [&](int end) -> absl::Status {
    while (seq.length() < end) {
      const int count = std::min(ubatch, end - seq.length());
      const std::span<const int32_t> part =
          request.prompt.subspan(static_cast<size_t>(seq.length()), static_cast<size_t>(count));
      if (absl::Status s = engine.Forward(seq, part, LogitRows::kNone, nullptr); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  const int checkpoint = request.checkpoint_position;
  if (checkpoint > seq.length()) {
    if (absl::Status s = forward_until(checkpoint); !s.ok()) return s;
    if (absl::Status s = engine.SaveCheckpoint(seq); !s.ok()) return s;
  }
  return forward_until(n_prompt);
}

}  // namespace

absl::StatusOr<GenerationResult> RunGeneration(ForwardEngine& engine, Sequence& seq,
                                               Sampler& sampler, const GenerationRequest& request,
                                               TokenSink& sink) {
  GenerationResult result;
  const int n_prompt = static_cast<int>(request.prompt.size());
  MOETIER_CHECK(seq.length() < n_prompt);
  MOETIER_CHECK(request.ubatch_size >= 0);
  MOETIER_CHECK(request.checkpoint_position >= 0 && request.checkpoint_position <= n_prompt);
  MOETIER_CHECK(request.top_logprobs >= -1 && request.top_logprobs <= kMaxTopLogprobs);
  result.prompt_reused = seq.length();
  const auto start = Clock::now();
  if (n_prompt >= seq.capacity()) {
    result.stop = StopReason::kContextFull;
    return result;
  }
  if (absl::Status s = Prefill(engine, seq, request); !s.ok()) {
    result.prefill_s = Seconds(start, Clock::now());
    result.engine_error = s;
    return result;
  }
  for (int32_t token : request.prompt) sampler.Accept(token);
  const auto decode_start = Clock::now();
  result.prefill_s = Seconds(start, decode_start);
  auto finish = [&](StopReason stop) {
    result.stop = stop;
    result.decode_s = Seconds(decode_start, Clock::now());
    return result;
  };

  const bool want_logprobs = request.top_logprobs >= 0;
  TokenLogprobs logprobs;
  auto token_start = start;  // the first token's time includes the prefill
  while (true) {
    std::span<const float> row;
    if (want_logprobs) {
      absl::StatusOr<std::span<const float>> last = engine.LastLogitsRow();
      if (!last.ok()) {
        result.engine_error = last.status();
        return finish(StopReason::kMaxTokens);
      }
      row = *last;
    }
    absl::StatusOr<int32_t> token = engine.Sample(sampler);
    if (!token.ok()) {
      result.engine_error = token.status();
      return finish(StopReason::kMaxTokens);
    }
    if (want_logprobs) ComputeTokenLogprobs(row, *token, request.top_logprobs, &logprobs);
    sampler.Accept(*token);
    ++result.generated;
    const bool is_stop =
        std::binary_search(request.stop_ids.begin(), request.stop_ids.end(), *token);
    const double latency_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - token_start).count();
    if (absl::Status s = sink.OnToken(*token, is_stop, latency_ms,
                                      want_logprobs ? &logprobs : nullptr);
        !s.ok()) {
      return s;
    }
    if (is_stop) return finish(StopReason::kEndOfGeneration);
    if (request.max_new_tokens >= 0 && result.generated >= request.max_new_tokens) {
      return finish(StopReason::kMaxTokens);
    }
    if (n_prompt + result.generated >= seq.capacity()) return finish(StopReason::kContextFull);
    absl::StatusOr<bool> stop = sink.ShouldStop();
    if (!stop.ok()) return stop.status();
    if (*stop) return finish(StopReason::kCancelled);
    token_start = Clock::now();
    const int32_t one[1] = {*token};
    if (absl::Status s = engine.Forward(seq, one, LogitRows::kNone, nullptr); !s.ok()) {
      result.engine_error = s;
      return finish(StopReason::kMaxTokens);
    }
  }
}

}  // namespace moetier
