#include "generation/generation_batch.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

#include "base/check.h"

namespace moetier {

struct GenerationBatch::Member {
  Member(BatchedGeneration r, std::unique_ptr<Sequence> s, int n_vocab)
      : request(std::move(r)),
        seq(std::move(s)),
        sampler(n_vocab, request.sampling),
        tokens(request.prompt),
        row(static_cast<size_t>(n_vocab)),
        start(Clock::now()),
        token_start(start) {}

  int n_prompt() const { return static_cast<int>(request.prompt.size()); }
  bool prefilled() const { return seq->length() >= n_prompt(); }

  BatchedGeneration request;
  std::unique_ptr<Sequence> seq;
  Sampler sampler;
  std::vector<int32_t> tokens;  // the prompt, then each sampled token
  std::vector<float> row;       // the logits row of the member's last token
  GenerationResult result;
  Clock::time_point start, decode_start, token_start;
  bool cancelled = false;
  bool wants_row = false;  // this step computes the member's row
  // The row stays in the engine, sampled there (SampleStep of step `step`),
  // unless the member wants logprobs, which need it here.
  bool sample_in_engine = false;
  size_t step = 0;
};

namespace {

double Seconds(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

GenerationBatch::GenerationBatch(ForwardEngine& engine, int prefill_chunk)
    : engine_(engine), prefill_chunk_(prefill_chunk) {
  MOETIER_CHECK(prefill_chunk >= 1);
}

GenerationBatch::~GenerationBatch() = default;

void GenerationBatch::Add(BatchedGeneration request, std::unique_ptr<Sequence> seq) {
  MOETIER_CHECK(!request.prompt.empty() && seq != nullptr &&
                seq->length() < static_cast<int>(request.prompt.size()));
  MOETIER_CHECK(request.checkpoint_position >= 0 &&
                request.checkpoint_position <= static_cast<int>(request.prompt.size()));
  MOETIER_CHECK(std::is_sorted(request.store_positions.begin(), request.store_positions.end()));
  auto m = std::make_unique<Member>(std::move(request), std::move(seq), engine_.n_vocab());
  m->result.prompt_reused = m->seq->length();
  members_.push_back(std::move(m));
}

bool GenerationBatch::Cancel(uint64_t id) {
  for (std::unique_ptr<Member>& m : members_) {
    if (m->request.id == id) {
      m->cancelled = true;
      return true;
    }
  }
  return false;
}

absl::Status GenerationBatch::Finish(size_t index, StopReason stop, GenerationEvents& events) {
  std::unique_ptr<Member> m = std::move(members_[index]);
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(index));
  const auto now = Clock::now();
  m->result.stop = stop;
  if (m->result.generated > 0) {
    m->result.decode_s = Seconds(m->decode_start, now);
  } else {
    m->result.prefill_s = Seconds(m->start, now);
  }
  return events.OnFinished(m->request.id, m->result, std::move(m->seq), std::move(m->tokens));
}

absl::StatusOr<bool> GenerationBatch::TakeToken(Member& m, GenerationEvents& events) {
  const bool want_logprobs = m.request.top_logprobs >= 0;
  int32_t token = 0;
  if (m.sample_in_engine) {
    absl::StatusOr<int32_t> sampled = engine_.SampleStep(m.step, m.sampler);
    if (!sampled.ok()) {
      m.result.engine_error = sampled.status();
      m.result.stop = StopReason::kError;
      return true;
    }
    token = *sampled;
  } else {
    token = m.sampler.Sample(m.row);
  }
  if (want_logprobs) ComputeTokenLogprobs(m.row, token, m.request.top_logprobs, &logprobs_);
  m.sampler.Accept(token);
  m.tokens.push_back(token);
  ++m.result.generated;
  const std::vector<int32_t>& stops = m.request.stop_ids;
  const bool is_stop = std::binary_search(stops.begin(), stops.end(), token);
  const double latency_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - m.token_start).count();
  if (absl::Status s = events.OnToken(m.request.id, token, is_stop, latency_ms,
                                      want_logprobs ? &logprobs_ : nullptr);
      !s.ok()) {
    return s;
  }
  if (is_stop) {
    m.result.stop = StopReason::kEndOfGeneration;
    return true;
  }
  if (m.result.generated >= m.request.max_new_tokens) {
    m.result.stop = StopReason::kMaxTokens;
    return true;
  }
  if (m.n_prompt() + m.result.generated >= m.seq->capacity()) {
    m.result.stop = StopReason::kContextFull;
    return true;
  }
  return false;
}

absl::Status GenerationBatch::Step(GenerationEvents& events) {
  // Who ends before computing: a cancel, or a prompt the context cannot
  // hold with a token after it.
  for (size_t i = 0; i < members_.size();) {
    const Member& m = *members_[i];
    std::optional<StopReason> stop;
    if (m.cancelled) {
      stop = StopReason::kCancelled;
    } else if (m.n_prompt() >= m.seq->capacity()) {
      stop = StopReason::kContextFull;
    }
    if (!stop.has_value()) {
      ++i;
      continue;
    }
    if (absl::Status s = Finish(i, *stop, events); !s.ok()) return s;
  }
  if (members_.empty()) return absl::OkStatus();

  steps_.clear();
  for (std::unique_ptr<Member>& m : members_) {
    const int length = m->seq->length();
    std::span<const int32_t> tokens;
    if (!m->prefilled()) {
      const int checkpoint = m->request.checkpoint_position;
      int end = checkpoint > length ? checkpoint : m->n_prompt();
      for (const int position : m->request.store_positions) {
        if (position > length) {
          end = std::min(end, position);
          break;
        }
      }
      const int take = std::min(prefill_chunk_, end - length);
      tokens = std::span<const int32_t>(m->request.prompt).subspan(static_cast<size_t>(length),
                                                                    static_cast<size_t>(take));
      m->wants_row = length + take == m->n_prompt();
    } else {
      // The last sampled token, fed back.
      tokens = std::span<const int32_t>(m->tokens).last(1);
      m->wants_row = true;
      m->token_start = Clock::now();
    }
    m->sample_in_engine =
        m->wants_row && m->request.top_logprobs < 0 && engine_.SamplesStepsInPlace();
    m->step = steps_.size();
    steps_.push_back({m->seq.get(), tokens,
                      m->wants_row && !m->sample_in_engine ? m->row.data() : nullptr,
                      m->sample_in_engine});
  }
  if (const absl::Status s = engine_.ForwardMany(steps_); !s.ok()) {
    while (!members_.empty()) {
      members_.back()->result.engine_error = s;
      if (absl::Status e = Finish(members_.size() - 1, StopReason::kError, events); !e.ok()) {
        return e;
      }
    }
    return absl::OkStatus();
  }

  for (size_t i = 0; i < members_.size();) {
    Member& m = *members_[i];
    const int length = m.seq->length();
    if (length == m.request.checkpoint_position && m.seq->checkpoint_length() != length &&
        m.result.generated == 0) {
      if (absl::Status s = engine_.SaveCheckpoint(*m.seq); !s.ok()) {
        m.result.engine_error = s;
        if (absl::Status e = Finish(i, StopReason::kError, events); !e.ok()) return e;
        continue;
      }
    }
    const std::vector<int>& stores = m.request.store_positions;
    if (m.result.generated == 0 && std::binary_search(stores.begin(), stores.end(), length)) {
      events.OnPrefixComputed(m.request.id, *m.seq,
                              std::span<const int32_t>(m.request.prompt).first(
                                  static_cast<size_t>(length)));
    }
    if (!m.wants_row) {
      ++i;
      continue;
    }
    if (m.result.generated == 0) {
      // The prompt is in: it joins the penalty window, and decoding starts.
      for (const int32_t token : m.request.prompt) m.sampler.Accept(token);
      m.decode_start = Clock::now();
      m.result.prefill_s = Seconds(m.start, m.decode_start);
    }
    absl::StatusOr<bool> ends = TakeToken(m, events);
    if (!ends.ok()) return ends.status();
    if (*ends) {
      if (absl::Status s = Finish(i, m.result.stop, events); !s.ok()) return s;
      continue;
    }
    ++i;
  }
  return absl::OkStatus();
}

}  // namespace moetier
