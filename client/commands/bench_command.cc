#include "commands/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands/status_command.h"
#include "connection/finish_stream.h"
#include "connection/interrupt.h"
#include "moetier/v1/moetier.grpc.pb.h"
#include "render/format.h"
#include "render/json_writer.h"

namespace moetier::client {
namespace {

// Plain English prose: tokenizes like a real prompt, unlike repeated ids.
constexpr const char* kBenchText =
    "The river runs past the old mill, where the miller's daughter counts sacks of grain "
    "each morning before the carts come down from the hills. In winter the wheel stops and "
    "the village gathers in the warm room above the stones to trade news, mend nets and "
    "argue about the price of salt. ";

struct Counters {
  uint64_t ram_hits = 0;
  uint64_t ram_misses = 0;
  uint64_t vram_hits = 0;
  uint64_t vram_misses = 0;
  uint64_t disk_bytes = 0;
  uint64_t copied_bytes = 0;
  uint64_t evictions = 0;
};

Counters CountersOf(const v1::Status& s) {
  Counters c;
  c.ram_hits = s.ram().hits();
  c.ram_misses = s.ram().misses();
  c.vram_hits = s.vram().hits();
  c.vram_misses = s.vram().misses();
  c.disk_bytes = s.bytes_read_from_disk();
  for (const v1::WorkerStatus& w : s.workers()) c.copied_bytes += w.bytes_copied();
  c.evictions = s.evictions();
  return c;
}

// Counters can go back when a worker restarts; such a phase counts as 0.
uint64_t Delta(uint64_t after, uint64_t before) { return after >= before ? after - before : 0; }

Counters Between(const Counters& before, const Counters& after) {
  Counters d;
  d.ram_hits = Delta(after.ram_hits, before.ram_hits);
  d.ram_misses = Delta(after.ram_misses, before.ram_misses);
  d.vram_hits = Delta(after.vram_hits, before.vram_hits);
  d.vram_misses = Delta(after.vram_misses, before.vram_misses);
  d.disk_bytes = Delta(after.disk_bytes, before.disk_bytes);
  d.copied_bytes = Delta(after.copied_bytes, before.copied_bytes);
  d.evictions = Delta(after.evictions, before.evictions);
  return d;
}

void WriteCounters(JsonWriter& json, const Counters& c) {
  json.Key("ram_hit_rate");
  json.Double(HitRate(c.ram_hits, c.ram_misses));
  json.Key("ram_hits");
  json.Uint(c.ram_hits);
  json.Key("ram_misses");
  json.Uint(c.ram_misses);
  json.Key("vram_hit_rate");
  json.Double(HitRate(c.vram_hits, c.vram_misses));
  json.Key("vram_hits");
  json.Uint(c.vram_hits);
  json.Key("vram_misses");
  json.Uint(c.vram_misses);
  json.Key("bytes_read_from_disk");
  json.Uint(c.disk_bytes);
  json.Key("bytes_copied_to_vram");
  json.Uint(c.copied_bytes);
  json.Key("evictions");
  json.Uint(c.evictions);
}

void WriteArray(JsonWriter& json, const std::vector<double>& values) {
  json.BeginArray();
  for (double v : values) json.Double(v);
  json.EndArray();
}

struct RunResult {
  v1::GenerationStats stats;
  double wall_s = 0;
};

struct Phase {
  std::vector<double> prefill_tokens_per_s;
  std::vector<double> decode_tokens_per_s;
  std::vector<double> generated_tokens;
  std::vector<double> wall_s;
  Counters counters;
};

class Bench {
 public:
  Bench(const BenchOptions& options, const CommandContext& ctx)
      : options_(options), ctx_(ctx), stub_(v1::Moetier::NewStub(ctx.channel)) {}

  int Run();

 private:
  // Reports the failure and returns the exit status.
  int Fail(std::string_view rpc, const grpc::Status& status) {
    return ReportRpcError(ctx_, "bench", rpc, status);
  }
  grpc::Status PromptIds(size_t count, std::vector<int32_t>* ids);
  grpc::Status Generate(const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                        RunResult* result);

  const BenchOptions& options_;
  const CommandContext& ctx_;
  std::unique_ptr<v1::Moetier::Stub> stub_;
};

grpc::Status Bench::PromptIds(size_t count, std::vector<int32_t>* ids) {
  const auto tokenize = [this](const std::string& text, v1::TokenizeResponse* response) {
    grpc::ClientContext call;
    ApplyDeadline(&call, ctx_.timeout_ms);
    CancelOnInterrupt cancel(&call);
    v1::TokenizeRequest request;
    request.set_text(text);
    return stub_->Tokenize(&call, request, response);
  };
  v1::TokenizeResponse once;
  if (grpc::Status s = tokenize(kBenchText, &once); !s.ok()) return s;
  if (once.token_ids_size() == 0) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the daemon tokenized the prompt to nothing");
  }
  const size_t repeats = count / static_cast<size_t>(once.token_ids_size()) + 2;
  std::string text;
  for (size_t i = 0; i < repeats; ++i) text += kBenchText;
  v1::TokenizeResponse all;
  if (grpc::Status s = tokenize(text, &all); !s.ok()) return s;
  if (static_cast<size_t>(all.token_ids_size()) < count) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrFormat("the daemon tokenized %d copies of the prompt to only %d "
                                        "tokens, fewer than %d",
                                        repeats, all.token_ids_size(), count));
  }
  ids->assign(all.token_ids().begin(), all.token_ids().begin() + static_cast<ptrdiff_t>(count));
  return grpc::Status::OK;
}

grpc::Status Bench::Generate(const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                             RunResult* result) {
  v1::GenerateRequest request;
  request.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  request.set_max_new_tokens(max_new_tokens);
  // Every run computes the same number of tokens, end-of-generation or not.
  request.set_ignore_end_of_generation(true);
  request.mutable_sampling()->set_temperature(0.0f);  // greedy: the same work every run
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx_.timeout_ms);
  CancelOnInterrupt cancel(&call);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&call, request);
  v1::GenerateResponse response;
  bool have_stats = false;
  while (reader->Read(&response)) {
    if (response.has_final_stats()) {
      result->stats = response.final_stats();
      have_stats = true;
    }
  }
  grpc::Status status = FinishStream(&call, reader.get());
  result->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) return status;
  // A benchmark that measured nothing must not print numbers.
  if (!have_stats) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the daemon's reply had no final statistics to measure");
  }
  if (result->stats.generated_tokens() < 1) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the daemon generated no token");
  }
  return grpc::Status::OK;
}

int Bench::Run() {
  // First a cheap call, so a daemon that is not there is reported as such.
  v1::Status probe;
  if (grpc::Status s = FetchStatus(ctx_, &probe); !s.ok()) return Fail("GetStatus", s);
  std::vector<int32_t> ids;
  const size_t longest =
      static_cast<size_t>(std::max(options_.prefill_tokens, options_.decode_prompt_tokens));
  if (grpc::Status s = PromptIds(longest, &ids); !s.ok()) return Fail("Tokenize", s);
  const std::vector<int32_t> prefill_prompt(ids.begin(), ids.begin() + options_.prefill_tokens);
  const std::vector<int32_t> decode_prompt(ids.begin(),
                                           ids.begin() + options_.decode_prompt_tokens);
  const int32_t decode_tokens = static_cast<int32_t>(options_.decode_tokens);

  std::ostream& err = *ctx_.err;
  RunResult run;
  for (int64_t i = 0; i < options_.warmup; ++i) {
    err << absl::StrFormat("bench: warmup %d/%d", i + 1, options_.warmup) << std::endl;
    if (grpc::Status s = Generate(decode_prompt, decode_tokens, &run); !s.ok()) {
      return Fail("Generate", s);
    }
  }

  v1::Status mark;
  if (grpc::Status s = FetchStatus(ctx_, &mark); !s.ok()) return Fail("GetStatus", s);
  const Counters start = CountersOf(mark);

  Phase prefill;
  for (int64_t i = 0; i < options_.runs; ++i) {
    if (grpc::Status s = Generate(prefill_prompt, 1, &run); !s.ok()) return Fail("Generate", s);
    prefill.prefill_tokens_per_s.push_back(run.stats.prefill_tokens_per_s());
    prefill.wall_s.push_back(run.wall_s);
    err << absl::StrFormat("bench: prefill %d/%d: %d tokens, %.1f tok/s", i + 1, options_.runs,
                           run.stats.prompt_tokens(), run.stats.prefill_tokens_per_s())
        << std::endl;
  }
  if (grpc::Status s = FetchStatus(ctx_, &mark); !s.ok()) return Fail("GetStatus", s);
  const Counters middle = CountersOf(mark);
  prefill.counters = Between(start, middle);

  Phase decode;
  for (int64_t i = 0; i < options_.runs; ++i) {
    if (grpc::Status s = Generate(decode_prompt, decode_tokens, &run); !s.ok()) {
      return Fail("Generate", s);
    }
    decode.decode_tokens_per_s.push_back(run.stats.decode_tokens_per_s());
    decode.prefill_tokens_per_s.push_back(run.stats.prefill_tokens_per_s());
    decode.generated_tokens.push_back(run.stats.generated_tokens());
    decode.wall_s.push_back(run.wall_s);
    err << absl::StrFormat("bench: decode %d/%d: %d tokens, %.1f tok/s", i + 1, options_.runs,
                           run.stats.generated_tokens(), run.stats.decode_tokens_per_s())
        << std::endl;
  }
  v1::Status after;
  if (grpc::Status s = FetchStatus(ctx_, &after); !s.ok()) return Fail("GetStatus", s);
  const Counters end = CountersOf(after);
  decode.counters = Between(middle, end);

  JsonWriter json;
  json.BeginObject();
  json.Key("model");
  json.String(after.model_path());
  json.Key("architecture");
  json.String(after.architecture());
  json.Key("store_mode");
  json.String(after.store_mode());
  json.Key("workers");
  json.BeginArray();
  for (const v1::WorkerStatus& w : after.workers()) json.String(w.device());
  json.EndArray();
  json.Key("runs");
  json.Int(options_.runs);
  json.Key("warmup");
  json.Int(options_.warmup);

  json.Key("prefill");
  json.BeginObject();
  json.Key("prompt_tokens");
  json.Int(options_.prefill_tokens);
  json.Key("new_tokens");
  json.Int(1);
  json.Key("prefill_tokens_per_s");
  json.Double(Median(prefill.prefill_tokens_per_s));
  json.Key("prefill_tokens_per_s_runs");
  WriteArray(json, prefill.prefill_tokens_per_s);
  json.Key("wall_s");
  json.Double(Median(prefill.wall_s));
  WriteCounters(json, prefill.counters);
  json.EndObject();

  json.Key("decode");
  json.BeginObject();
  json.Key("prompt_tokens");
  json.Int(options_.decode_prompt_tokens);
  json.Key("max_new_tokens");
  json.Int(options_.decode_tokens);
  json.Key("generated_tokens");
  json.Double(Median(decode.generated_tokens));
  json.Key("decode_tokens_per_s");
  json.Double(Median(decode.decode_tokens_per_s));
  json.Key("decode_tokens_per_s_runs");
  WriteArray(json, decode.decode_tokens_per_s);
  json.Key("wall_s");
  json.Double(Median(decode.wall_s));
  WriteCounters(json, decode.counters);
  json.EndObject();

  json.Key("total");
  json.BeginObject();
  WriteCounters(json, Between(start, end));
  json.EndObject();
  json.EndObject();
  *ctx_.out << json.Finish();
  ctx_.out->flush();
  return kExitOk;
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

int RunBench(const BenchOptions& options, const CommandContext& ctx) {
  Bench bench(options, ctx);
  return bench.Run();
}

}  // namespace moetier::client
