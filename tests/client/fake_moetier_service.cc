#include "fake_moetier_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace moetier::client::testing {
namespace {

// Sleeps `ms`, waking early when the call is cancelled.
bool SleepUnlessCancelled(grpc::ServerContext* context, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (context->IsCancelled()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return !context->IsCancelled();
}

}  // namespace

v1::Status SampleStatus() {
  v1::Status s;
  s.set_model_path("/models/tiny.gguf");
  s.set_architecture("qwen3moe");
  s.set_n_layer(2);
  s.set_n_expert(20);
  s.set_n_expert_used(2);
  s.set_n_vocab(8);
  s.set_store_mode("cache");
  s.set_ram_budget_bytes(uint64_t{3} << 30);
  s.set_ram_used_bytes(uint64_t{1} << 30);
  s.set_expert_bytes_total(uint64_t{4} << 30);
  s.set_preload_fraction(1.0);
  s.set_bytes_read_from_disk(uint64_t{5} << 20);
  s.set_read_bytes_per_s(1024.0 * 1024.0);
  s.set_evictions(7);
  s.set_uptime_s(3725);
  // Layer 0: experts 0-3 VRAM, 4-11 RAM, 12-19 disk; heat falls from 1.0.
  // Layer 1: all RAM, expert 5 hot, the rest cold.
  const float heats[] = {1.0f, 0.8f, 0.6f, 0.3f, 0.1f, 0.0f};
  for (int l = 0; l < 2; ++l) {
    v1::LayerResidency* layer = s.add_layers();
    for (int e = 0; e < 20; ++e) {
      if (l == 0) {
        layer->add_tier(e < 4    ? v1::EXPERT_TIER_VRAM
                        : e < 12 ? v1::EXPERT_TIER_RAM
                                 : v1::EXPERT_TIER_DISK);
        layer->add_heat(heats[e % 6]);
      } else {
        layer->add_tier(v1::EXPERT_TIER_RAM);
        layer->add_heat(e == 5 ? 0.9f : 0.0f);
      }
    }
  }
  s.mutable_ram()->set_hits(900);
  s.mutable_ram()->set_misses(100);
  s.mutable_vram()->set_hits(0);
  s.mutable_vram()->set_misses(0);
  v1::WorkerStatus* w = s.add_workers();
  w->set_index(0);
  w->set_device("cpu");
  w->set_state("ready");
  w->set_pid(4242);
  w->set_heartbeat_age_ms(120);
  w->set_requests_served(5);
  w->set_tokens_per_s(12.5);
  v1::QueueStatus* q = s.mutable_queue();
  q->set_active_requests(1);
  q->set_max_active_sequences(16);
  q->set_max_queued_requests(64);
  q->set_requests_completed(12);
  q->set_requests_cancelled(2);
  return s;
}

v1::WorkerStatus* AddSampleGpuWorker(v1::Status& status) {
  v1::WorkerStatus* w = status.add_workers();
  w->set_index(1);
  w->set_device("cuda:0");
  w->set_state("ready");
  w->set_pid(4343);
  w->set_heartbeat_age_ms(80);
  w->set_requests_served(3);
  w->set_tokens_per_s(31.5);
  w->set_expert_cache_bytes(uint64_t{6} << 30);
  w->mutable_vram()->set_resident_experts(9);
  w->mutable_vram()->set_resident_bytes(uint64_t{9} << 29);
  w->mutable_vram()->set_hits(300);
  w->mutable_vram()->set_misses(100);
  w->set_misses_on_host(40);
  w->set_prefetch_hints(90);
  w->set_prefetch_issued(80);
  w->set_prefetch_used(56);
  w->set_prefetch_wasted(10);
  w->set_bytes_copied(uint64_t{3} << 30);
  w->set_copy_bytes_per_s(3.0 * (uint64_t{1} << 30) / 0.25);
  return w;
}

void FakeMoetier::SetScript(Script script) {
  std::lock_guard<std::mutex> lock(mutex_);
  script_ = std::move(script);
}

FakeMoetier::Script FakeMoetier::script() {
  std::lock_guard<std::mutex> lock(mutex_);
  return script_;
}

grpc::Status FakeMoetier::Stream(grpc::ServerContext* context, int prompt_tokens,
                                 const v1::SamplingParams& sampling,
                                 const std::vector<std::string>& pieces,
                                 grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const Script s = script();
  int call = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call = streams_started_++;
    ram_hits_ += 10;
    ram_misses_ += 2;
    vram_hits_ += 5;
    vram_misses_ += 5;
    bytes_read_ += 4096;
    bytes_copied_ += 1024;
  }
  changed_.notify_all();
  if (!s.fail_with.ok()) return s.fail_with;
  for (const std::string& piece : pieces) {
    if (!SleepUnlessCancelled(context, s.piece_delay_ms)) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++cancelled_;
      }
      changed_.notify_all();
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    v1::GenerateResponse r;
    r.set_text(piece);
    r.add_token_ids(static_cast<int32_t>(piece.size()));  // one token a piece
    writer->Write(r);
  }
  v1::GenerateResponse last;
  v1::GenerationStats* stats = last.mutable_final_stats();
  stats->set_prompt_tokens(prompt_tokens);
  stats->set_generated_tokens(static_cast<int32_t>(pieces.size()));
  // Distinct per call, so medians are checkable: 100/200/300 and 10/20/30.
  stats->set_prefill_tokens_per_s(100.0 * (call % 3 + 1));
  stats->set_decode_tokens_per_s(10.0 * (call % 3 + 1));
  stats->set_stop_reason(v1::STOP_REASON_MAX_TOKENS);
  stats->set_seed(sampling.has_seed() ? sampling.seed() : 42);
  stats->set_worker_device("cpu");
  stats->set_queue_wait_ms(0.5);
  writer->Write(last);
  return grpc::Status::OK;
}

grpc::Status FakeMoetier::Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                                   grpc::ServerWriter<v1::GenerateResponse>* writer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generate_requests_.push_back(*request);
  }
  const int prompt_tokens = request->prompt_token_ids_size() > 0
                                ? request->prompt_token_ids_size()
                                : static_cast<int>(request->prompt().size());
  return Stream(context, prompt_tokens, request->sampling(), script().pieces, writer);
}

grpc::Status FakeMoetier::Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                               grpc::ServerWriter<v1::GenerateResponse>* writer) {
  int users = 0;
  for (const v1::ChatMessage& m : request->messages()) users += m.role() == "user";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    chat_requests_.push_back(*request);
  }
  return Stream(context, request->messages_size(), request->sampling(),
                {"reply ", std::to_string(users)}, writer);
}

grpc::Status FakeMoetier::Score(grpc::ServerContext*, const v1::ScoreRequest* request,
                                v1::ScoreResponse* response) {
  const Script s = script();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    score_requests_.push_back(*request);
  }
  if (!s.fail_with.ok()) return s.fail_with;
  std::vector<float> logits;
  for (int i = 0; i < request->token_ids_size(); ++i) {
    for (int j = 0; j < s.n_vocab; ++j) logits.push_back(request->token_ids(i) * 1000.0f + j);
  }
  if (s.short_logits) logits.pop_back();
  response->set_n_vocab(s.n_vocab);
  // This test host is little-endian, like the wire layout.
  response->set_logits_f32le(
      std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
  return grpc::Status::OK;
}

grpc::Status FakeMoetier::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                   v1::TokenizeResponse* response) {
  const Script s = script();
  if (!s.fail_with.ok()) return s.fail_with;
  for (unsigned char c : request->text()) response->add_token_ids(c);
  return grpc::Status::OK;
}

grpc::Status FakeMoetier::Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest* request,
                                     v1::DetokenizeResponse* response) {
  const Script s = script();
  if (!s.fail_with.ok()) return s.fail_with;
  std::string text;
  for (int32_t id : request->token_ids()) text.push_back(static_cast<char>(id));
  if (request->render_special_tokens()) text = "<special>" + text;
  response->set_text(text);
  return grpc::Status::OK;
}

v1::Status FakeMoetier::CurrentStatus() {
  std::lock_guard<std::mutex> lock(mutex_);
  v1::Status s = script_.status;
  s.mutable_ram()->set_hits(s.ram().hits() + ram_hits_);
  s.mutable_ram()->set_misses(s.ram().misses() + ram_misses_);
  s.mutable_vram()->set_hits(s.vram().hits() + vram_hits_);
  s.mutable_vram()->set_misses(s.vram().misses() + vram_misses_);
  s.set_bytes_read_from_disk(s.bytes_read_from_disk() + bytes_read_);
  if (s.workers_size() > 0) {
    s.mutable_workers(0)->set_bytes_copied(s.workers(0).bytes_copied() + bytes_copied_);
  }
  return s;
}

grpc::Status FakeMoetier::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                    v1::Status* response) {
  const Script s = script();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++get_status_calls_;
  }
  if (!s.fail_with.ok()) return s.fail_with;
  *response = CurrentStatus();
  return grpc::Status::OK;
}

grpc::Status FakeMoetier::WatchStatus(grpc::ServerContext* context,
                                      const v1::WatchStatusRequest* request,
                                      grpc::ServerWriter<v1::Status>* writer) {
  const Script s = script();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_watch_interval_ms_ = request->interval_ms();
  }
  if (!s.fail_with.ok()) return s.fail_with;
  if (s.watch_unimplemented) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
  for (int i = 0; i < s.watch_updates; ++i) {
    if (i > 0 && !SleepUnlessCancelled(context, static_cast<int>(request->interval_ms()))) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    v1::Status status = CurrentStatus();
    status.set_uptime_s(i);
    if (!writer->Write(status)) break;
  }
  return grpc::Status::OK;
}

grpc::Status FakeMoetier::SetBudget(grpc::ServerContext*, const v1::SetBudgetRequest* request,
                                    v1::SetBudgetResponse* response) {
  if (request->device() == "cpu") {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "device 'cpu': this worker was started without an expert cache");
  }
  // Whole slots of 3 MiB, at most 8190 MiB (every expert).
  const uint64_t mib = std::min<uint64_t>(request->expert_cache_mib(), 8190) / 3 * 3;
  response->set_expert_cache_mib(mib);
  response->set_expert_cache_bytes(mib << 20);
  return grpc::Status::OK;
}

std::vector<v1::GenerateRequest> FakeMoetier::generate_requests() {
  std::lock_guard<std::mutex> lock(mutex_);
  return generate_requests_;
}

std::vector<v1::ChatRequest> FakeMoetier::chat_requests() {
  std::lock_guard<std::mutex> lock(mutex_);
  return chat_requests_;
}

std::vector<v1::ScoreRequest> FakeMoetier::score_requests() {
  std::lock_guard<std::mutex> lock(mutex_);
  return score_requests_;
}

uint32_t FakeMoetier::last_watch_interval_ms() {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_watch_interval_ms_;
}

int FakeMoetier::get_status_calls() {
  std::lock_guard<std::mutex> lock(mutex_);
  return get_status_calls_;
}

bool FakeMoetier::WaitForStreams(int n, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return streams_started_ >= n; });
}

bool FakeMoetier::WaitForCancelled(int n, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return cancelled_.load() >= n; });
}

FakeServer::FakeServer(const std::string& socket_path) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  MOETIER_CHECK(server_ != nullptr);
}

FakeServer::~FakeServer() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

void FakeServer::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

}  // namespace moetier::client::testing
