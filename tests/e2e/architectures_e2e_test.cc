// Every architecture through the real daemon, the store and a CPU worker:
// for the independent writer's llama-with-experts (Mixtral layout) and olmoe
// files, and qwen2moe (attention biases, a shared expert in every layer) and
// qwen3vlmoe (multi-section rope) files, Score through moetierd gives the standalone CPU worker's
// logits bit for bit, and the worker's expert cache at its smallest size with prefetch gives the
// same greedy tokens and logits as no cache.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon_harness.h"
#include "gtest/gtest.h"

namespace moetier::e2e {
namespace {

constexpr int kNewTokens = 12;

std::vector<int32_t> PromptIds(const std::string& name) { return VectorPromptIds(name, 8); }

// The standalone CPU worker's logits for `ids`, raw float32 bytes.
std::string StandaloneLogits(const std::string& model, const std::vector<int32_t>& ids) {
  const std::string out = ::testing::TempDir() + "/standalone-" + std::to_string(getpid()) + ".f32";
  const std::string command = absl::StrFormat(
      "%s --standalone --model %s --backend cpu --threads 2 --tokens %s --logits-out %s 2>/dev/null",
      MOETIER_WORKER, model, absl::StrJoin(ids, ","), out);
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(out.c_str());
  return bytes;
}

struct Outcome {
  std::vector<int32_t> generated;
  std::string logits;  // Score of prompt + generated
};

Outcome RunThroughDaemon(const std::string& name, const std::vector<std::string>& worker_flags) {
  DaemonSetup setup;
  setup.model_path = VectorPath(name + ".gguf");
  setup.worker_flags = worker_flags;
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  Outcome out;
  EXPECT_NE(daemon, nullptr) << error;
  if (daemon == nullptr) return out;
  const std::vector<int32_t> prompt = PromptIds(name);
  v1::GenerateRequest request;
  request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_new_tokens(kNewTokens);
  request.set_ignore_end_of_generation(true);
  const Generation g = Generate(daemon->stub(), request);
  EXPECT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon->Log();
  out.generated = g.token_ids;
  v1::ScoreRequest score;
  score.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  score.mutable_token_ids()->Add(g.token_ids.begin(), g.token_ids.end());
  grpc::ClientContext context;
  v1::ScoreResponse response;
  const grpc::Status s = daemon->stub().Score(&context, score, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  out.logits = response.logits_f32le();
  const v1::Status status = daemon->GetStatus();
  EXPECT_FALSE(status.architecture().empty());
  return out;
}

class ArchitectureE2eTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchitectureE2eTest, DaemonEqualsStandaloneAndTheCacheChangesNothing) {
  const std::string name = GetParam();
  const Outcome plain = RunThroughDaemon(name, {});
  ASSERT_EQ(plain.generated.size(), static_cast<size_t>(kNewTokens));
  std::vector<int32_t> all = PromptIds(name);
  all.insert(all.end(), plain.generated.begin(), plain.generated.end());
  EXPECT_TRUE(plain.logits == StandaloneLogits(VectorPath(name + ".gguf"), all))
      << "Score through moetierd differs from the standalone worker";
  const Outcome cached =
      RunThroughDaemon(name, {"--expert-cache-mib=25%", "--miss-policy=copy", "--prefetch=on"});
  EXPECT_EQ(cached.generated, plain.generated);
  EXPECT_TRUE(cached.logits == plain.logits) << "the expert cache changed the logits";
}

INSTANTIATE_TEST_SUITE_P(Vectors, ArchitectureE2eTest,
                         ::testing::Values("mixtral-small-q4_k_m", "olmoe-tiny-f32",
                                           "qwen2moe-small-q4_k_m", "qwen3vlmoe-tiny-f32",
                                           "glm4moe-small-q4_k_m", "ernie45moe-tiny-f32",
                                           "gpt-oss-small-mxfp4"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace moetier::e2e
