// The hybrid architecture (qwen35moe: Gated DeltaNet layers with recurrent
// state, gated attention, routed and shared experts) through the real
// daemon, its store and a CPU worker: every expert cache size, miss policy
// and prefetch setting gives the same greedy tokens and Score logits as no
// cache; a chat's next turn computes only its new tokens (the stats say
// how many were cached), and conversations sharing a system prompt reuse
// its state from the prefix cache; the status names what a sequence's state takes;
// a restarted worker finds the store as it was; and qwen3next's file layout
// serves the float64 logits.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon_harness.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier::e2e {
namespace {

constexpr int kNewTokens = 10;

std::unique_ptr<RunningDaemon> StartDaemon(const std::string& model,
                                           const std::vector<std::string>& worker_flags) {
  DaemonSetup setup;
  setup.model_path = model;
  setup.worker_flags = worker_flags;
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  EXPECT_NE(daemon, nullptr) << error;
  return daemon;
}

v1::GenerateRequest Greedy(const std::vector<int32_t>& prompt, int n) {
  v1::GenerateRequest request;
  request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_new_tokens(n);
  request.set_ignore_end_of_generation(true);
  request.mutable_sampling()->set_temperature(0.0f);
  return request;
}

struct Outcome {
  std::vector<int32_t> generated;
  std::string logits;  // Score of prompt + generated
};

Outcome GenerateAndScore(RunningDaemon& daemon, const std::vector<int32_t>& prompt) {
  Outcome out;
  const Generation g = Generate(daemon.stub(), Greedy(prompt, kNewTokens));
  EXPECT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon.Log();
  out.generated = g.token_ids;
  v1::ScoreRequest score;
  score.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  score.mutable_token_ids()->Add(g.token_ids.begin(), g.token_ids.end());
  grpc::ClientContext context;
  v1::ScoreResponse response;
  const grpc::Status s = daemon.stub().Score(&context, score, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  out.logits = response.logits_f32le();
  return out;
}

TEST(HybridE2eTest, EveryCacheSettingGivesTheSameTokensAndLogits) {
  const std::string model = VectorPath("qwen35moe-tiny-f32.gguf");
  const std::vector<int32_t> prompt = VectorPromptIds("qwen35moe-tiny-f32");
  Outcome plain;
  {
    std::unique_ptr<RunningDaemon> daemon = StartDaemon(model, {});
    ASSERT_NE(daemon, nullptr);
    plain = GenerateAndScore(*daemon, prompt);
  }
  ASSERT_EQ(plain.generated.size(), static_cast<size_t>(kNewTokens));
  ASSERT_FALSE(plain.logits.empty());
  std::vector<std::vector<std::string>> settings;
  for (const char* size : {"25%", "50%", "100%"}) {
    for (const char* miss : {"copy", "cpu", "auto"}) {
      settings.push_back({absl::StrFormat("--expert-cache-mib=%s", size),
                          absl::StrFormat("--miss-policy=%s", miss), "--prefetch=on"});
    }
    settings.push_back({absl::StrFormat("--expert-cache-mib=%s", size), "--miss-policy=copy",
                        "--prefetch=off"});
  }
  settings.push_back({"--n-cpu-moe=2"});
  for (const std::vector<std::string>& flags : settings) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    std::unique_ptr<RunningDaemon> daemon = StartDaemon(model, flags);
    ASSERT_NE(daemon, nullptr);
    const Outcome cached = GenerateAndScore(*daemon, prompt);
    EXPECT_EQ(cached.generated, plain.generated);
    EXPECT_TRUE(cached.logits == plain.logits) << "the expert cache changed the logits";
    const v1::Status status = daemon->GetStatus();
    ASSERT_EQ(status.workers_size(), 1);
    EXPECT_GT(status.workers(0).expert_cache_bytes(), 0u);
    EXPECT_GT(status.workers(0).vram().hits() + status.workers(0).vram().misses(), 0u)
        << "the cache was never asked";
  }
}

// Qwen3-Next's file layout (value heads grouped by key head, ssm_ba split
// at load) served whole and through a half-size expert cache: the Score
// logits of the vector's prompt are the float64 pass's, within fp32
// rounding.
TEST(HybridE2eTest, Qwen3NextServesTheFloat64Logits) {
  const std::string stem = "qwen3next-tiny-f32";
  const std::vector<int32_t> prompt = VectorPromptIds(stem);
  std::string exact_bytes;
  {
    std::ifstream in(VectorPath(stem + ".exact.f32"), std::ios::binary);
    exact_bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_FALSE(exact_bytes.empty());
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{},
        std::vector<std::string>{"--expert-cache-mib=50%", "--miss-policy=copy", "--prefetch=on"}}) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    std::unique_ptr<RunningDaemon> daemon = StartDaemon(VectorPath(stem + ".gguf"), flags);
    ASSERT_NE(daemon, nullptr);
    v1::ScoreRequest score;
    score.mutable_token_ids()->Add(prompt.begin(), prompt.end());
    grpc::ClientContext context;
    v1::ScoreResponse response;
    const grpc::Status s = daemon->stub().Score(&context, score, &response);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << daemon->Log();
    const size_t n_vocab = static_cast<size_t>(response.n_vocab());
    ASSERT_EQ(response.logits_f32le().size(), prompt.size() * n_vocab * sizeof(float));
    ASSERT_EQ(exact_bytes.size(), response.logits_f32le().size());
    std::vector<float> got(prompt.size() * n_vocab);
    std::vector<float> want(got.size());
    std::memcpy(got.data(), response.logits_f32le().data(), got.size() * sizeof(float));
    std::memcpy(want.data(), exact_bytes.data(), want.size() * sizeof(float));
    for (size_t pos = 0; pos < prompt.size(); ++pos) {
      const float* g = &got[pos * n_vocab];
      const float* w = &want[pos * n_vocab];
      const auto [lo, hi] = std::minmax_element(w, w + n_vocab);
      float worst = 0.0f;
      for (size_t i = 0; i < n_vocab; ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
      EXPECT_LE(worst, 1e-4f * (*hi - *lo)) << "position " << pos;
    }
  }
}

// A synthetic Qwen3.6-35B-A3B-style file with its real tokenizer layout and
// chat template, shrunk.
std::string WriteTinyHybrid(const std::string& dir) {
  absl::StatusOr<SynthShape> shape = SynthPreset(SynthArch::kQwen35Moe, "tiny");
  EXPECT_TRUE(shape.ok()) << shape.status();
  SynthOptions options;
  options.shape = *shape;
  options.quant = SynthQuant::kQ8_0;
  options.seed = 5;
  options.threads = 2;
  options.out_path = dir + "/qwen35moe-tiny.gguf";
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return "";
  const absl::Status written = WriteSynthModel(*plan, options);
  EXPECT_TRUE(written.ok()) << written;
  return options.out_path;
}

class HybridDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/moetier_hybrid_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    model_ = WriteTinyHybrid(dir_);
    ASSERT_FALSE(model_.empty());
    daemon_ = StartDaemon(model_, {});
    ASSERT_NE(daemon_, nullptr);
  }
  void TearDown() override {
    daemon_.reset();
    std::remove(model_.c_str());
    rmdir(dir_.c_str());
  }

  std::string dir_;
  std::string model_;
  std::unique_ptr<RunningDaemon> daemon_;
};

// A first turn, its next turn (computed from the kept sequence: all but
// the reply's last token, sampled and never fed back, and the new message),
// an unrelated prompt that takes the worker's only sequence, then the
// second turn again. That one comes from the prefix cache's copy of the
// second turn's prompt when the worker has one, or is computed from
// scratch; the tokens are the same either way.
void ExpectNextTurnsReuse(RunningDaemon& daemon, bool prefix_cache) {
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66, 77, 88, 99};
  const Generation first = Generate(daemon.stub(), Greedy(prompt, 8));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message() << daemon.Log();
  ASSERT_EQ(first.token_ids.size(), 8u);
  EXPECT_EQ(first.stats.cached_prompt_tokens(), 0);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.token_ids.begin(), first.token_ids.end());
  for (int32_t t : {101, 102, 103, 104}) next.push_back(t);
  const Generation second = Generate(daemon.stub(), Greedy(next, 8));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.stats.prompt_tokens(), static_cast<int>(next.size()));
  EXPECT_EQ(second.stats.cached_prompt_tokens(), static_cast<int>(prompt.size()) + 8 - 1);

  ASSERT_TRUE(Generate(daemon.stub(), Greedy({7, 8, 9}, 2)).status.ok());
  const Generation again = Generate(daemon.stub(), Greedy(next, 8));
  ASSERT_TRUE(again.status.ok());
  // The kept state is the second turn's checkpoint: all but its last token.
  EXPECT_EQ(again.stats.cached_prompt_tokens(),
            prefix_cache ? static_cast<int>(next.size()) - 1 : 0);
  EXPECT_EQ(again.token_ids, second.token_ids);

  // The worker's status adds up what its requests reused, and shows its
  // prefix cache only when it has one.
  const v1::Status status = daemon.GetStatus();
  ASSERT_EQ(status.workers_size(), 1);
  const v1::WorkerStatus& worker = status.workers(0);
  EXPECT_EQ(worker.prompt_tokens_reused(),
            static_cast<uint64_t>(second.stats.cached_prompt_tokens() +
                                  again.stats.cached_prompt_tokens()));
  EXPECT_EQ(worker.prefix_cache_budget_bytes() > 0, prefix_cache);
  if (prefix_cache) {
    EXPECT_GE(worker.prefix_cache_states(), 1u);
    EXPECT_GT(worker.prefix_cache_bytes(), 0u);
    EXPECT_LE(worker.prefix_cache_bytes(), worker.prefix_cache_budget_bytes());
  } else {
    EXPECT_EQ(worker.prefix_cache_states(), 0u);
  }
}

TEST_F(HybridDaemonTest, ANextTurnComputesOnlyItsNewTokens) {
  ExpectNextTurnsReuse(*daemon_, /*prefix_cache=*/true);
}

TEST(HybridE2eTest, WithoutAPrefixCacheATurnComesBackFromScratch) {
  const std::string model = VectorPath("qwen35moe-tiny-f32.gguf");
  std::unique_ptr<RunningDaemon> daemon = StartDaemon(model, {"--prefix-cache-mib=0"});
  ASSERT_NE(daemon, nullptr);
  ExpectNextTurnsReuse(*daemon, /*prefix_cache=*/false);
}

// The token ids of `request`'s messages in the model's chat template, with
// or without the generation prompt.
std::vector<int32_t> RenderedIds(const std::string& model, const v1::ChatRequest& request,
                                 bool add_generation_prompt) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(model);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return {};
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*gguf)->metadata());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return {};
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::ForTokenizer(*tokenizer);
  EXPECT_TRUE(chat_template.ok()) << chat_template.status();
  if (!chat_template.ok()) return {};
  std::vector<ChatMessage> messages;
  for (const v1::ChatMessage& m : request.messages()) messages.push_back({m.role(), m.content()});
  ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  absl::StatusOr<std::string> text = chat_template->Render(messages, options);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return {};
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(*text, true, true);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *std::move(ids) : std::vector<int32_t>{};
}

// How many tokens `messages` take in the model's chat template without the
// generation prompt: where the next turn departs from this one.
int HistoryTokens(const std::string& model, const v1::ChatRequest& request) {
  const std::vector<int32_t> ids = RenderedIds(model, request, false);
  return ids.empty() ? -1 : static_cast<int>(ids.size());
}

TEST_F(HybridDaemonTest, AChatsSecondTurnReusesTheFirstTurnsPrompt) {
  v1::ChatRequest turn1;
  v1::ChatMessage* m = turn1.add_messages();
  m->set_role("user");
  m->set_content("Tell me about the sea.");
  turn1.set_max_new_tokens(6);
  turn1.mutable_sampling()->set_temperature(0.0f);
  auto chat = [this](const v1::ChatRequest& request) { return Chat(daemon_->stub(), request); };
  const Generation first = chat(turn1);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message() << daemon_->Log();
  v1::ChatRequest turn2 = turn1;
  v1::ChatMessage* reply = turn2.add_messages();
  reply->set_role("assistant");
  reply->set_content(first.text);
  v1::ChatMessage* again = turn2.add_messages();
  again->set_role("user");
  again->set_content("And the mountains?");
  const Generation second = chat(turn2);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  // The template renders the reply in the history without the think block
  // the first turn's generation prompt opened, so the second turn departs
  // from the first where that generation prompt began: everything before it
  // is reused.
  const int first_history = HistoryTokens(model_, turn1);
  ASSERT_GT(first_history, 0);
  ASSERT_LT(first_history, first.stats.prompt_tokens());
  EXPECT_EQ(second.stats.cached_prompt_tokens(), first_history);
  // Asking again for the same reply computes only the generation prompt.
  const Generation regenerated = chat(turn2);
  ASSERT_TRUE(regenerated.status.ok());
  EXPECT_EQ(regenerated.stats.cached_prompt_tokens(), HistoryTokens(model_, turn2));
  EXPECT_EQ(regenerated.text, second.text);
}

// Conversations that begin with the same system prompt: the second one
// computes everything (there was no state where the two fork) and keeps
// the state at the fork, and every later one starts from there.
TEST_F(HybridDaemonTest, ConversationsSharingASystemPromptReuseIt) {
  const std::string system =
      "You are a careful assistant for a shipping company. Answer in one short sentence, "
      "name the port you mean, and never invent a schedule you were not given.";
  auto request_for = [&](const std::string& question) {
    v1::ChatRequest request;
    v1::ChatMessage* s = request.add_messages();
    s->set_role("system");
    s->set_content(system);
    v1::ChatMessage* u = request.add_messages();
    u->set_role("user");
    u->set_content(question);
    request.set_max_new_tokens(4);
    request.mutable_sampling()->set_temperature(0.0f);
    return request;
  };
  const v1::ChatRequest ra = request_for("Where does the ferry leave?");
  const v1::ChatRequest rb = request_for("How heavy can a parcel be?");
  const v1::ChatRequest rc = request_for("Is Tuesday a holiday?");
  const Generation a = Chat(daemon_->stub(), ra);
  const Generation b = Chat(daemon_->stub(), rb);
  const Generation c = Chat(daemon_->stub(), rc);
  ASSERT_TRUE(a.status.ok() && b.status.ok() && c.status.ok()) << daemon_->Log();
  EXPECT_EQ(a.stats.cached_prompt_tokens(), 0);
  EXPECT_EQ(b.stats.cached_prompt_tokens(), 0);
  const std::vector<int32_t> ids_a = RenderedIds(model_, ra, true);
  const std::vector<int32_t> ids_b = RenderedIds(model_, rb, true);
  const int fork = static_cast<int>(
      std::mismatch(ids_a.begin(), ids_a.end(), ids_b.begin(), ids_b.end()).first -
      ids_a.begin());
  EXPECT_GT(fork, 30) << "the system prompt is shared";
  EXPECT_EQ(c.stats.cached_prompt_tokens(), fork);
  EXPECT_LT(c.stats.cached_prompt_tokens(), c.stats.prompt_tokens()) << "the question is new";
}

TEST_F(HybridDaemonTest, StatusShowsWhatASequencesStateTakes) {
  const v1::Status status = daemon_->GetStatus();
  ASSERT_EQ(status.workers_size(), 1);
  const v1::WorkerStatus& w = status.workers(0);
  // Tiny preset: one attention layer of 2 KV heads x 32 dims, K and V in
  // fp32; three DeltaNet layers of conv state (3 taps x (2*2*16 + 64)
  // channels) and delta-rule state (4 value heads x 16 x 16).
  EXPECT_EQ(w.kv_bytes_per_token(), 1u * 2 * 2 * 32 * 4);
  EXPECT_EQ(w.recurrent_state_bytes(), 3u * (3 * (2 * 2 * 16 + 64) + 4 * 16 * 16) * 4);
  EXPECT_GT(w.max_ctx(), 0);
}

TEST_F(HybridDaemonTest, ARestartedWorkerFindsTheStoreAsItWas) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  const Generation before = Generate(daemon_->stub(), Greedy(prompt, 6));
  ASSERT_TRUE(before.status.ok());
  const v1::Status s0 = daemon_->GetStatus();
  ASSERT_EQ(s0.workers_size(), 1);
  ASSERT_GT(s0.workers(0).pid(), 0);
  ASSERT_EQ(kill(s0.workers(0).pid(), SIGKILL), 0);
  // The daemon restarts it; the next request waits for the new process.
  for (int i = 0; i < 300; ++i) {
    const v1::Status s = daemon_->GetStatus();
    if (s.workers(0).pid() != s0.workers(0).pid() && s.workers(0).state() == "ready") break;
    usleep(100 * 1000);
  }
  const Generation after = Generate(daemon_->stub(), Greedy(prompt, 6));
  ASSERT_TRUE(after.status.ok()) << after.status.error_message() << daemon_->Log();
  EXPECT_EQ(after.token_ids, before.token_ids);
  EXPECT_EQ(after.stats.cached_prompt_tokens(), 0) << "a new worker process has no kept sequence";
  const v1::Status s1 = daemon_->GetStatus();
  EXPECT_NE(s1.workers(0).pid(), s0.workers(0).pid());
  EXPECT_EQ(s1.workers(0).restarts(), s0.workers(0).restarts() + 1);
  EXPECT_EQ(s1.bytes_read_from_disk(), s0.bytes_read_from_disk())
      << "the restarted worker made the daemon read experts again";
  EXPECT_EQ(s1.ram_used_bytes(), s0.ram_used_bytes());
}

}  // namespace
}  // namespace moetier::e2e
