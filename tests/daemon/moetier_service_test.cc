// The front door as the edge where an API request's values are checked,
// once: the service on an in-process gRPC server, in front of a real
// scheduler whose one worker is the test holding the other end of its
// control channel. Bad sampling values and token ids are refused naming the
// field; what the worker receives is every setting, exact; a request longer
// than the worker's context never reaches it; the worker's stop reasons
// come out as the API's.
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/control_channel.h"
#include "frontdoor/moetier_service.h"
#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kWaitMs = 5000;
constexpr int32_t kVocab = 32;
constexpr int32_t kContext = 16;

// The worker end of a control channel, answered by hand.
class FakeWorker {
 public:
  FakeWorker(RequestScheduler& scheduler, int32_t max_ctx) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    fd_ = fds[1];
    scheduler.AddWorker(AdmittedWorker{0, "cpu", 4242, 1, fds[0]});
    control_v1::WorkerReply ready;
    ready.mutable_ready()->set_n_vocab(kVocab);
    ready.mutable_ready()->set_max_ctx(max_ctx);
    ready.mutable_ready()->set_backend("cpu");
    Send(ready);
  }
  ~FakeWorker() { close(fd_); }

  void Send(const control_v1::WorkerReply& reply) {
    ASSERT_TRUE(control::SendControlMessage(fd_, reply).ok());
  }
  control_v1::WorkerRequest Receive() {
    control_v1::WorkerRequest request;
    const absl::Status got = control::ReceiveControlMessage(fd_, &request, kWaitMs);
    EXPECT_TRUE(got.ok()) << got;
    return request;
  }
  bool NothingPending() {
    control_v1::WorkerRequest request;
    return control::ReceiveControlMessage(fd_, &request, 100).code() ==
           absl::StatusCode::kDeadlineExceeded;
  }
  void Finish(uint64_t id, control_v1::StopReason reason, int prompt_tokens) {
    control_v1::WorkerReply token;
    token.set_id(id);
    token.mutable_token()->set_token_id(7);
    Send(token);
    control_v1::WorkerReply done;
    done.set_id(id);
    done.mutable_done()->set_stop_reason(reason);
    done.mutable_done()->set_prompt_tokens(prompt_tokens);
    done.mutable_done()->set_generated_tokens(1);
    Send(done);
  }

 private:
  int fd_ = -1;
};

class FrontDoorEdgeTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(kVocab); }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    scheduler_.Shutdown();
  }

  // The service over `tokenizer_` (none unless a test loads one), for a
  // model of n_vocab logits.
  void Start(int32_t n_vocab) {
    service_ = std::make_unique<MoetierService>(
        &tokenizer_, absl::StatusOr<ChatTemplate>(absl::NotFoundError("no chat template")),
        n_vocab, &scheduler_, nullptr, std::vector<std::string>{"cpu"}, FrontDoorLimits{});
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Moetier::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void Restart(int32_t n_vocab) {
    server_->Shutdown();
    server_.reset();
    Start(n_vocab);
  }

  FakeWorker& Worker() {
    if (worker_ == nullptr) {
      worker_ = std::make_unique<FakeWorker>(scheduler_, kContext);
      EXPECT_TRUE(scheduler_.WaitForReadyWorker(kWaitMs));
    }
    return *worker_;
  }

  static v1::GenerateRequest Prompt(int n) {
    v1::GenerateRequest r;
    for (int i = 0; i < n; ++i) r.add_prompt_token_ids(i % kVocab);
    r.set_max_new_tokens(4);
    return r;
  }

  // Starts a Generate call; the handler runs on the server's threads.
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
    // Reads to the end: the final stats, and the call's status.
    grpc::Status Finish(v1::GenerationStats* stats = nullptr) {
      v1::GenerateResponse piece;
      while (reader->Read(&piece)) {
        if (piece.has_final_stats() && stats != nullptr) *stats = piece.final_stats();
      }
      return reader->Finish();
    }
  };
  std::unique_ptr<Call> StartGenerate(const v1::GenerateRequest& request) {
    auto call = std::make_unique<Call>();
    call->reader = stub_->Generate(&call->context, request);
    return call;
  }
  grpc::Status Generate(const v1::GenerateRequest& request) {
    return StartGenerate(request)->Finish();
  }
  grpc::Status Score(const std::vector<int32_t>& ids) {
    grpc::ClientContext context;
    v1::ScoreRequest request;
    request.mutable_token_ids()->Add(ids.begin(), ids.end());
    v1::ScoreResponse response;
    return stub_->Score(&context, request, &response);
  }

  absl::StatusOr<Tokenizer> tokenizer_ = absl::NotFoundError("the test model has no tokenizer");
  RequestScheduler scheduler_{SchedulerLimits{}};
  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<MoetierService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Moetier::Stub> stub_;
};

TEST_F(FrontDoorEdgeTest, ABadSamplingValueIsRefusedNamingTheFieldAndItsRange) {
  FakeWorker& worker = Worker();
  struct Case {
    void (*set)(v1::SamplingParams*);
    const char* message;
  };
  const Case cases[] = {
      {[](v1::SamplingParams* s) { s->set_temperature(-1.0f); },
       "sampling.temperature is -1; it must be finite and >= 0"},
      {[](v1::SamplingParams* s) { s->set_top_k(-5); }, "sampling.top_k is -5; it must be >= 0"},
      {[](v1::SamplingParams* s) { s->set_top_p(1.5f); },
       "sampling.top_p is 1.5; it must be in [0, 1]"},
      {[](v1::SamplingParams* s) { s->set_min_p(2.0f); },
       "sampling.min_p is 2; it must be in [0, 1]"},
      {[](v1::SamplingParams* s) { s->set_repetition_penalty(-0.5f); },
       "sampling.repetition_penalty is -0.5; it must be finite and > 0"},
      {[](v1::SamplingParams* s) { s->set_repeat_last_n(-3); },
       "sampling.repeat_last_n is -3; it must be in 0..1048576"},
      {[](v1::SamplingParams* s) { s->set_repeat_last_n(1 << 21); },
       "sampling.repeat_last_n is 2097152; it must be in 0..1048576"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest request = Prompt(3);
    c.set(request.mutable_sampling());
    const grpc::Status s = Generate(request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message(), c.message);
  }
  EXPECT_TRUE(worker.NothingPending()) << "a refused request reached the worker";
}

TEST_F(FrontDoorEdgeTest, TheWorkerGetsEverySettingExactly) {
  FakeWorker& worker = Worker();
  v1::GenerateRequest request = Prompt(5);
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(20);
  s->set_top_p(0.5f);
  s->set_min_p(0.1f);
  s->set_repetition_penalty(1.3f);
  s->set_repeat_last_n(32);
  s->set_seed(99);
  std::unique_ptr<Call> call = StartGenerate(request);
  const control_v1::WorkerRequest got = worker.Receive();
  ASSERT_TRUE(got.has_generate());
  const control_v1::Sampling& sent = got.generate().sampling();
  EXPECT_TRUE(sent.has_temperature() && sent.has_top_k() && sent.has_top_p() &&
              sent.has_min_p() && sent.has_repeat_penalty() && sent.has_repeat_last_n() &&
              sent.has_seed());
  EXPECT_EQ(sent.temperature(), 0.7f);
  EXPECT_EQ(sent.top_k(), 20);
  EXPECT_EQ(sent.top_p(), 0.5f);
  EXPECT_EQ(sent.min_p(), 0.1f);
  EXPECT_EQ(sent.repeat_penalty(), 1.3f);
  EXPECT_EQ(sent.repeat_last_n(), 32);
  EXPECT_EQ(sent.seed(), 99u);
  EXPECT_EQ(got.generate().prompt_token_ids_size(), 5);
  EXPECT_EQ(got.generate().max_new_tokens(), 4);
  worker.Finish(got.id(), control_v1::STOP_MAX_TOKENS, 5);
  v1::GenerationStats stats;
  const grpc::Status status = call->Finish(&stats);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(stats.stop_reason(), v1::STOP_REASON_MAX_TOKENS);
  EXPECT_EQ(stats.seed(), 99u);
}

TEST_F(FrontDoorEdgeTest, UnsetFieldsArriveAsWhatTheyStandFor) {
  FakeWorker& worker = Worker();
  v1::GenerateRequest request = Prompt(2);  // no sampling at all: greedy
  request.set_max_new_tokens(0);
  std::unique_ptr<Call> call = StartGenerate(request);
  const control_v1::WorkerRequest got = worker.Receive();
  const control_v1::Sampling& sent = got.generate().sampling();
  EXPECT_TRUE(sent.has_temperature() && sent.has_top_p() && sent.has_repeat_penalty() &&
              sent.has_seed());
  EXPECT_EQ(sent.temperature(), 0.0f);
  EXPECT_EQ(sent.top_k(), 0);
  EXPECT_EQ(sent.top_p(), 1.0f);
  EXPECT_EQ(sent.min_p(), 0.0f);
  EXPECT_EQ(sent.repeat_penalty(), 1.0f);
  EXPECT_EQ(sent.repeat_last_n(), 64);
  // The daemon's default max_new_tokens, for the API's 0.
  EXPECT_EQ(got.generate().max_new_tokens(),
            static_cast<int32_t>(FrontDoorLimits{}.default_max_new_tokens));
  worker.Finish(got.id(), control_v1::STOP_CONTEXT_FULL, 2);
  v1::GenerationStats stats;
  ASSERT_TRUE(call->Finish(&stats).ok());
  EXPECT_EQ(stats.stop_reason(), v1::STOP_REASON_CONTEXT_FULL);
  // The seed drawn for the request is the one reported.
  EXPECT_EQ(stats.seed(), sent.seed());
}

TEST_F(FrontDoorEdgeTest, AnEndOfGenerationStopComesOutAsTheApis) {
  FakeWorker& worker = Worker();
  std::unique_ptr<Call> call = StartGenerate(Prompt(2));
  const control_v1::WorkerRequest got = worker.Receive();
  worker.Finish(got.id(), control_v1::STOP_END_OF_GENERATION, 2);
  v1::GenerationStats stats;
  ASSERT_TRUE(call->Finish(&stats).ok());
  EXPECT_EQ(stats.stop_reason(), v1::STOP_REASON_END_OF_GENERATION);
  EXPECT_EQ(stats.prompt_tokens(), 2);
}

TEST_F(FrontDoorEdgeTest, AWorkerErrorKeepsItsCodeAndMessage) {
  FakeWorker& worker = Worker();
  std::unique_ptr<Call> call = StartGenerate(Prompt(2));
  const control_v1::WorkerRequest got = worker.Receive();
  control_v1::WorkerReply done;
  done.set_id(got.id());
  done.mutable_done()->set_stop_reason(control_v1::STOP_ERROR);
  done.mutable_done()->set_error_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  done.mutable_done()->set_error_message("out of expert slots");
  worker.Send(done);
  const grpc::Status status = call->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "out of expert slots");
}

TEST_F(FrontDoorEdgeTest, ARequestLongerThanTheContextNeverReachesTheWorker) {
  FakeWorker& worker = Worker();
  grpc::Status s = Generate(Prompt(kContext));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(),
              AllOf(HasSubstr("the prompt is 16 tokens"), HasSubstr("holds 16 tokens")));
  s = Score(std::vector<int32_t>(kContext + 1, 3));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(),
              AllOf(HasSubstr("17 token ids to score"), HasSubstr("holds 16 tokens")));
  EXPECT_TRUE(worker.NothingPending()) << "a request longer than the context reached the worker";
  // One token shorter fits: prompt and one generated token fill the context.
  std::unique_ptr<Call> call = StartGenerate(Prompt(kContext - 1));
  const control_v1::WorkerRequest got = worker.Receive();
  EXPECT_EQ(got.generate().prompt_token_ids_size(), kContext - 1);
  worker.Finish(got.id(), control_v1::STOP_CONTEXT_FULL, kContext - 1);
  EXPECT_TRUE(call->Finish().ok());
}

TEST_F(FrontDoorEdgeTest, TokenIdsAreCheckedWhereTheyEnter) {
  FakeWorker& worker = Worker();
  v1::GenerateRequest request = Prompt(3);
  request.set_prompt_token_ids(1, kVocab);
  grpc::Status s = Generate(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "prompt_token_ids[1] = 32 is not a token id of this model (0..31)");
  s = Score({1, 2, -4});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "token_ids[2] = -4 is not a token id of this model (0..31)");
  EXPECT_TRUE(worker.NothingPending());
}

TEST_F(FrontDoorEdgeTest, ATokenizerWithMoreIdsThanTheModelIsNotUsed) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf =
      GgufModel::Open(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  tokenizer_ = Tokenizer::FromGgufMetadata((*gguf)->metadata());
  ASSERT_TRUE(tokenizer_.ok()) << tokenizer_.status();
  ASSERT_GT(tokenizer_->vocab_size(), kVocab);
  // The tokenizer's ids against a model of 32: text would produce ids
  // (and stop ids) the model has no logits for.
  Restart(kVocab);
  v1::GenerateRequest request;
  request.set_prompt("hello");
  const grpc::Status s = Generate(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr(std::to_string(tokenizer_->vocab_size()) +
                                           " tokens, more than the 32"));
  // With a model as large as the tokenizer, text works again up to the
  // worker (which is not needed to see the prompt tokenized and queued).
  Restart(tokenizer_->vocab_size());
  grpc::ClientContext context;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hello");
  v1::TokenizeResponse ids;
  EXPECT_TRUE(stub_->Tokenize(&context, tokenize, &ids).ok());
  EXPECT_GT(ids.token_ids_size(), 0);
}

}  // namespace
}  // namespace moetier
