// moetierd's configuration: text format, flags over it, sizes with units,
// and every invalid value refused with a message that names it.
#include "config/daemon_config.h"

#include <algorithm>

#include <sys/stat.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "config/auto_devices.h"
#include "test_model.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using daemon_test::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(DaemonByteSizeTest, ParsesUnits) {
  EXPECT_EQ(*ParseByteSize("1024"), 1024u);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("8GiB"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("8G"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("8gib"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("20GB"), 20'000'000'000ull);
  EXPECT_EQ(*ParseByteSize("64 KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("100B"), 100u);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1ull << 40);
}

TEST(DaemonByteSizeTest, RefusesNonsense) {
  for (const char* bad : {"", "GiB", "-1", "8 bits", "8b", "1.2.3GiB", "8XB", "ten",
                          "99999999999999999999"}) {
    absl::StatusOr<uint64_t> v = ParseByteSize(bad);
    EXPECT_FALSE(v.ok()) << bad;
  }
  EXPECT_THAT(Message(ParseByteSize("8XB").status()), HasSubstr("8GiB"));
  EXPECT_FALSE(ParseByteSize("100000000TiB").ok()) << "does not fit in 64 bits";
}

TEST(DaemonByteSizeTest, Formats) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(8 << 20), "8.00 MiB");
  EXPECT_EQ(FormatBytes(17ull << 30), "17.0 GiB");
}

TEST(DaemonConfigTest, ParsesTextFormat) {
  absl::StatusOr<DaemonConfig> c = ParseDaemonConfigText(R"(
      model_path: "/models/q.gguf"
      ram_budget_bytes: 25769803776
      devices: "cuda:0"
      devices: "cpu"
      io_queue_depth: 64
      allow_unlocked_memory: true
  )", "test.conf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_path(), "/models/q.gguf");
  EXPECT_EQ(c->ram_budget_bytes(), 24ull << 30);
  EXPECT_THAT(c->devices(), ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ(c->io_queue_depth(), 64u);
  EXPECT_TRUE(c->allow_unlocked_memory());
  EXPECT_EQ(c->io_backend(), "auto") << "defaults apply to absent fields";
  EXPECT_EQ(c->worker_heartbeat_timeout_ms(), 10000u);
}

TEST(DaemonConfigTest, SizesInTheFileTakeUnits) {
  absl::StatusOr<DaemonConfig> c = ParseDaemonConfigText(
      "model_path: \"/m.gguf\"\n"
      "ram_budget_bytes: 24GiB   # the store\n"
      "  max_prompt_bytes: \"512KiB\"\n",
      "test.conf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ram_budget_bytes(), 24ull << 30);
  EXPECT_EQ(c->max_prompt_bytes(), 512u << 10);
  EXPECT_EQ(c->model_path(), "/m.gguf");

  absl::StatusOr<DaemonConfig> bad =
      ParseDaemonConfigText("model_path: \"x\"\nram_budget_bytes: 24GiBs\n", "moetierd.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("moetierd.conf:2"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("ram_budget_bytes"));
  // Units belong to sizes only: a count with one stays an error.
  EXPECT_FALSE(ParseDaemonConfigText("io_queue_depth: 4K\n", "c").ok());
}

TEST(DaemonConfigTest, FlagsTakeDashesOrUnderscoresAndDashH) {
  absl::StatusOr<DaemonCommandLine> cl = ParseDaemonCommandLine(
      {"moetierd", "--model-path=/a.gguf", "--ram-budget-bytes", "2GiB", "--io-queue-depth=8",
       "--allow-unlocked-memory"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config.model_path(), "/a.gguf");
  EXPECT_EQ(cl->config.ram_budget_bytes(), 2ull << 30);
  EXPECT_EQ(cl->config.io_queue_depth(), 8u);
  EXPECT_TRUE(cl->config.allow_unlocked_memory());
  absl::StatusOr<DaemonCommandLine> help = ParseDaemonCommandLine({"moetierd", "-h"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->help);
}

TEST(DaemonAutoDevicesTest, GpusWhenPresentAndBuiltForElseCpu) {
  ScratchDir dir;
  const std::string gpus = dir.File("gpus");
  ASSERT_EQ(mkdir(gpus.c_str(), 0755), 0);
  GpuProbe probe{.driver_gpus_dir = gpus, .cuda_visible_devices = nullptr,
                 .workers_have_cuda = true};
  std::string why;
  EXPECT_THAT(AutoDevices(probe, &why), ElementsAre("cpu"));
  EXPECT_THAT(why, HasSubstr("no NVIDIA GPU"));
  for (const char* pci : {"0000:01:00.0", "0000:41:00.0"}) {
    ASSERT_EQ(mkdir((gpus + "/" + pci).c_str(), 0755), 0);
  }
  EXPECT_THAT(AutoDevices(probe, &why), ElementsAre("cuda:0", "cuda:1"));
  probe.cuda_visible_devices = "1";
  EXPECT_THAT(AutoDevices(probe, &why), ElementsAre("cuda:0"));
  probe.cuda_visible_devices = "";
  EXPECT_THAT(AutoDevices(probe, &why), ElementsAre("cpu"));
  probe.cuda_visible_devices = nullptr;
  probe.workers_have_cuda = false;
  EXPECT_THAT(AutoDevices(probe, &why), ElementsAre("cpu"));
  EXPECT_THAT(why, HasSubstr("no CUDA"));

  probe.workers_have_cuda = true;
  DaemonConfig unset;
  EXPECT_THAT(ResolveAutoDevices(unset, probe), HasSubstr("cuda:0, cuda:1"));
  EXPECT_THAT(unset.devices(), ElementsAre("cuda:0", "cuda:1"));
  DaemonConfig automatic;
  automatic.add_devices("auto");
  ResolveAutoDevices(automatic, probe);
  EXPECT_THAT(automatic.devices(), ElementsAre("cuda:0", "cuda:1"));
  DaemonConfig chosen;
  chosen.add_devices("cpu");
  EXPECT_EQ(ResolveAutoDevices(chosen, probe), "");
  EXPECT_THAT(chosen.devices(), ElementsAre("cpu"));
}

TEST(DaemonConfigTest, TextErrorsNameFileLineAndColumn) {
  absl::StatusOr<DaemonConfig> c =
      ParseDaemonConfigText("model_path: \"x\"\nram_budget: 5\n", "moetierd.conf");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(Message(c.status()), HasSubstr("moetierd.conf:2:"));
  EXPECT_THAT(Message(c.status()), HasSubstr("ram_budget"));
  EXPECT_FALSE(ParseDaemonConfigText("io_queue_depth: \"many\"", "c").ok());
  EXPECT_FALSE(ParseDaemonConfigText("io_queue_depth: -3", "c").ok());
}

TEST(DaemonConfigTest, FlagsOverrideTheFile) {
  ScratchDir dir;
  const std::string file = dir.File("moetierd.conf");
  std::ofstream(file) << "model_path: \"/a.gguf\"\nram_budget_bytes: 100\ndevices: \"cpu\"\n"
                         "worker_extra_args: \"--threads=4\"\n";
  absl::StatusOr<DaemonCommandLine> cl = ParseDaemonCommandLine(
      {"moetierd", "--config=" + file, "--ram-budget-bytes=8GiB", "--devices=cuda:0,cuda:1",
       "--direct-io=false", "--lock-memory", "--io-queue-depth", "16",
       "--worker-extra-args=--a", "--worker-extra-args=--b"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->help);
  const DaemonConfig& c = cl->config;
  EXPECT_EQ(c.model_path(), "/a.gguf");
  EXPECT_EQ(c.ram_budget_bytes(), 8ull << 30);
  EXPECT_THAT(c.devices(), ElementsAre("cuda:0", "cuda:1"));
  EXPECT_FALSE(c.direct_io());
  EXPECT_TRUE(c.lock_memory());
  EXPECT_EQ(c.io_queue_depth(), 16u);
  EXPECT_THAT(c.worker_extra_args(), ElementsAre("--a", "--b"));
}

TEST(DaemonConfigTest, BadFlagsAreRefused) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"moetierd", "--no_such_flag=1"}, "unknown flag --no-such-flag"},
      {{"moetierd", "--io-queue-depth=abc"}, "--io-queue-depth=abc"},
      {{"moetierd", "--io-queue-depth=99999999999"}, "larger than"},
      {{"moetierd", "--ram-budget-bytes=lots"}, "not a byte size"},
      {{"moetierd", "--direct-io=maybe"}, "expected true or false"},
      {{"moetierd", "model.gguf"}, "unexpected argument 'model.gguf'"},
      {{"moetierd", "--config=/nonexistent/moetierd.conf"}, "cannot read config file"},
      {{"moetierd", "--model-path"}, "--model-path needs a value"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DaemonCommandLine> cl = ParseDaemonCommandLine(c.args);
    ASSERT_FALSE(cl.ok()) << c.args.back();
    EXPECT_THAT(Message(cl.status()), HasSubstr(c.message)) << c.args.back();
  }
  absl::StatusOr<DaemonCommandLine> help = ParseDaemonCommandLine({"moetierd", "--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
}

class DaemonConfigValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = DaemonConfig();
    model_ = dir_.File("m.gguf");
    std::ofstream(model_) << "GGUF";
    config_.set_model_path(model_);
    config_.add_devices("cpu");
    config_.set_worker_socket_path(dir_.File("w.sock"));
    config_.set_api_socket_path(dir_.File("api.sock"));
  }
  std::string Problem() { return Message(ValidateDaemonConfig(config_)); }
  ScratchDir dir_;
  std::string model_;
  DaemonConfig config_;
};

TEST_F(DaemonConfigValidateTest, AcceptsAMinimalConfig) {
  EXPECT_TRUE(ValidateDaemonConfig(config_).ok());
}

TEST_F(DaemonConfigValidateTest, RefusesEachInvalidValueByName) {
  config_.clear_model_path();
  EXPECT_THAT(Problem(), HasSubstr("model_path is not set"));
  SetUp();
  config_.set_model_path(dir_.File("missing.gguf"));
  EXPECT_THAT(Problem(), HasSubstr("No such file"));
  SetUp();
  config_.set_model_path(dir_.path());
  EXPECT_THAT(Problem(), HasSubstr("not a regular file"));
  SetUp();
  config_.clear_devices();
  EXPECT_THAT(Problem(), HasSubstr("devices is empty"));
  SetUp();
  config_.add_devices("auto");
  EXPECT_THAT(Problem(), HasSubstr("'auto' must be the only entry"));
  SetUp();
  config_.add_devices("gpu0");
  EXPECT_THAT(Problem(), HasSubstr("device 'gpu0' is not valid"));
  SetUp();
  config_.add_devices("cpu");
  EXPECT_THAT(Problem(), HasSubstr("listed twice"));
  SetUp();
  config_.add_devices("cuda:");
  EXPECT_THAT(Problem(), HasSubstr("cuda:N"));
  SetUp();
  config_.set_io_backend("aio");
  EXPECT_THAT(Problem(), HasSubstr("io_backend 'aio'"));
  SetUp();
  config_.set_io_queue_depth(2);
  EXPECT_THAT(Problem(), HasSubstr("io_queue_depth 2"));
  SetUp();
  config_.set_worker_restart_backoff_initial_ms(5000);
  config_.set_worker_restart_backoff_max_ms(1000);
  EXPECT_THAT(Problem(), HasSubstr("worker_restart_backoff_initial_ms"));
  SetUp();
  config_.set_worker_heartbeat_timeout_ms(5);
  EXPECT_THAT(Problem(), HasSubstr("worker_heartbeat_timeout_ms is 5"));
  SetUp();
  config_.set_worker_socket_path(std::string(200, 'x'));
  EXPECT_THAT(Problem(), HasSubstr("worker_socket_path"));
  SetUp();
  config_.set_api_socket_path(config_.worker_socket_path());
  EXPECT_THAT(Problem(), HasSubstr("must differ"));
  SetUp();
  config_.set_worker_executable_path(model_);  // not executable
  EXPECT_THAT(Problem(), HasSubstr("worker_executable_path"));
}

TEST(DaemonUsageTest, HelpExplainsEveryField) {
  const std::string usage = DaemonUsage();
  const std::vector<std::string> documented = DocumentedFlagNames();
  const google::protobuf::Descriptor* d = DaemonConfig::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& name = d->field(i)->name();
    std::string flag = name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_THAT(usage, HasSubstr("--" + flag)) << name;
    EXPECT_NE(std::find(documented.begin(), documented.end(), name), documented.end()) << name;
  }
  EXPECT_THAT(usage, HasSubstr("--config=FILE"));
  EXPECT_THAT(usage, HasSubstr("Default: 32."));
  EXPECT_THAT(usage, HasSubstr("SIGTERM"));
}

}  // namespace
}  // namespace moetier
