// An in-process stand-in for moetierd's front door: moetier.v1.Moetier and
// grpc.health.v1 on a unix socket, with scripted replies and a record of
// what the client sent, so the client's commands can be tested without the
// daemon or a model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/server.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier::client::testing {

// Two layers of 20 experts, one cpu worker, with every tier and heat level.
v1::Status SampleStatus();

// Appends worker #1 on cuda:0 with a device expert cache: 6 GiB pool,
// 4.5 GiB resident, 300 hits and 100 misses (40 on host), 80 prefetches
// issued (56 used, 10 wasted), 3 GiB copied in 0.25 s, 31.5 tok/s.
v1::WorkerStatus* AddSampleGpuWorker(v1::Status& status);

class FakeMoetier final : public v1::Moetier::Service {
 public:
  struct Script {
    std::vector<std::string> pieces = {"Hello", ",", " world"};
    int piece_delay_ms = 0;
    grpc::Status fail_with = grpc::Status::OK;  // every call fails with it when not OK
    int32_t n_vocab = 8;
    bool short_logits = false;  // Score returns one float too few
    int watch_updates = 3;      // then the stream ends
    bool watch_unimplemented = false;
    v1::Status status = SampleStatus();
  };

  // Replaces the script; call before the client runs.
  void SetScript(Script script);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::Status* response) override;
  grpc::Status WatchStatus(grpc::ServerContext* context, const v1::WatchStatusRequest* request,
                           grpc::ServerWriter<v1::Status>* writer) override;
  // "cpu" has no VRAM cache (FAILED_PRECONDITION); other devices get at most 8192 MiB.
  grpc::Status SetBudget(grpc::ServerContext* context, const v1::SetBudgetRequest* request,
                         v1::SetBudgetResponse* response) override;

  // What the client sent.
  std::vector<v1::GenerateRequest> generate_requests();
  std::vector<v1::ChatRequest> chat_requests();
  std::vector<v1::ScoreRequest> score_requests();
  uint32_t last_watch_interval_ms();
  int get_status_calls();

  // Streams that saw the client cancel (or a deadline pass).
  int cancelled_streams() const { return cancelled_.load(); }
  // Waits until `n` Generate/Chat calls have started; false on timeout.
  bool WaitForStreams(int n, int timeout_ms);
  // Waits until `n` streams were cancelled; false on timeout.
  bool WaitForCancelled(int n, int timeout_ms);

 private:
  grpc::Status Stream(grpc::ServerContext* context, int prompt_tokens,
                      const v1::SamplingParams& sampling, const std::vector<std::string>& pieces,
                      grpc::ServerWriter<v1::GenerateResponse>* writer);
  Script script();
  v1::Status CurrentStatus();

  std::mutex mutex_;
  std::condition_variable changed_;
  Script script_;
  std::vector<v1::GenerateRequest> generate_requests_;
  std::vector<v1::ChatRequest> chat_requests_;
  std::vector<v1::ScoreRequest> score_requests_;
  uint32_t last_watch_interval_ms_ = 0;
  int get_status_calls_ = 0;
  int streams_started_ = 0;
  // Counters Generate advances, so bench sees traffic in the status.
  uint64_t ram_hits_ = 0, ram_misses_ = 0, vram_hits_ = 0, vram_misses_ = 0;
  uint64_t bytes_read_ = 0, bytes_copied_ = 0;
  std::atomic<int> cancelled_{0};  // written under mutex_, read without
};

// FakeMoetier and the standard health service on `socket_path`.
class FakeServer {
 public:
  explicit FakeServer(const std::string& socket_path);
  ~FakeServer();

  FakeMoetier& service() { return service_; }
  void SetServing(bool serving);

 private:
  FakeMoetier service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace moetier::client::testing
