// moetierd refuses a model its workers cannot serve at start-up, before it
// builds its store, with exit status 2 (a configuration error systemd does
// not restart) and the workers' own reason.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>

#include "daemon_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier::e2e {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// tiny-q8_0.gguf with every "qwen3moe" (the architecture and its key
// prefix) spelt "qwen9moe": a well-formed file of an architecture no
// worker knows.
std::string WriteUnknownArchitectureCopy(const std::string& path) {
  std::ifstream in(VectorPath("tiny-q8_0.gguf"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "qwen3moe";
  size_t replaced = 0;
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at)) {
    bytes[at + 4] = '9';
    ++replaced;
  }
  std::ofstream(path, std::ios::binary) << bytes;
  return replaced > 0 ? path : std::string();
}

TEST(ModelCheckE2eTest, AnUnknownArchitectureStopsTheDaemonBeforeTheStore) {
  char tmpl[] = "/tmp/moetier_unknown_arch_XXXXXX.gguf";
  const int fd = mkstemps(tmpl, 5);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string model = WriteUnknownArchitectureCopy(tmpl);
  ASSERT_FALSE(model.empty()) << "tiny-q8_0.gguf does not name qwen3moe";

  std::string error;
  DaemonSetup setup;
  setup.model_path = model;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Launch(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  const auto start = std::chrono::steady_clock::now();
  const int status = daemon->WaitForExit(20000);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = daemon->Log();
  std::remove(model.c_str());
  ASSERT_NE(status, -1) << "moetierd still runs after 20 s; log:\n" << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 2) << log;
  EXPECT_LT(seconds, 10.0) << log;
  EXPECT_THAT(log, AllOf(HasSubstr("model " + model + " cannot be served"),
                         HasSubstr("unsupported model architecture 'qwen9moe'"),
                         HasSubstr("qwen3moe ("), HasSubstr("qwen35moe ("), HasSubstr("llama ("),
                         HasSubstr("olmoe (")));
  // The check ran before the store and the workers.
  EXPECT_THAT(log, AllOf(Not(HasSubstr("preloading")), Not(HasSubstr("started worker"))));
}

// A tiny qwen3moe whose matrices are all Q4_1: the cpu engine computes it,
// the CUDA engine does not.
std::string WriteQ4_1Model(const std::string& path) {
  absl::StatusOr<SynthShape> shape = SynthPreset(SynthArch::kQwen3Moe, "tiny");
  EXPECT_TRUE(shape.ok()) << shape.status();
  if (!shape.ok()) return "";
  SynthOptions options;
  options.shape = *shape;
  options.quant = SynthQuant::kQ8_0;
  options.matrix_type = TensorType::kQ4_1;
  options.threads = 2;
  options.out_path = path;
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok() || !WriteSynthModel(*plan, options).ok()) return "";
  return path;
}

// The check asks each kind of engine configured: here the cpu one accepts the
// file and a CUDA worker would not, so the daemon stops, naming the device
// and the tensor (or, in a build without CUDA, saying so).
TEST(ModelCheckE2eTest, AModelOneDeviceCannotComputeStopsTheDaemonNamingIt) {
  char tmpl[] = "/tmp/moetier_q4_1_XXXXXX.gguf";
  const int fd = mkstemps(tmpl, 5);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string model = WriteQ4_1Model(tmpl);
  ASSERT_FALSE(model.empty());

  std::string error;
  DaemonSetup setup;
  setup.model_path = model;
  setup.extra_config = {"devices: \"cuda:0\""};
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Launch(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  const int status = daemon->WaitForExit(20000);
  const std::string log = daemon->Log();
  std::remove(model.c_str());
  ASSERT_NE(status, -1) << "moetierd still runs after 20 s; log:\n" << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 2) << log;
  EXPECT_THAT(log, AllOf(HasSubstr("model " + model + " cannot be served"),
                         HasSubstr(model + " on cuda:0: ")));
  EXPECT_THAT(log, ::testing::AnyOf(HasSubstr("is Q4_1, which the CUDA backend cannot compute"),
                                    HasSubstr("built without CUDA")));
  EXPECT_THAT(log, AllOf(Not(HasSubstr("preloading")), Not(HasSubstr("started worker"))));
}

}  // namespace
}  // namespace moetier::e2e
