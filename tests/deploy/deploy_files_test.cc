#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/daemon_config.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Deploy(const std::string& name) {
  return std::string(MOETIER_SOURCE_DIR) + "/deploy/" + name;
}

// The example's "key: value" lines, commented out ("# key: value") or not,
// for keys that are fields of DaemonConfig.
struct KeyLine {
  std::string key;
  std::string line;  // without the comment mark
  bool commented;
};

std::vector<KeyLine> KeyLines(const std::string& text) {
  std::vector<KeyLine> out;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    bool commented = absl::ConsumePrefix(&raw, "# ");
    const size_t colon = raw.find(": ");
    if (colon == absl::string_view::npos) continue;
    const std::string key(raw.substr(0, colon));
    if (DaemonConfig::descriptor()->FindFieldByName(key) == nullptr) continue;
    out.push_back({key, std::string(raw), commented});
  }
  return out;
}

// Whether `parsed` holds the field's default value.
bool HoldsDefault(const DaemonConfig& parsed, const FieldDescriptor* f) {
  const auto* r = parsed.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(parsed, f) == f->default_value_string();
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(parsed, f) == f->default_value_bool();
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(parsed, f) == f->default_value_uint32();
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetUInt64(parsed, f) == f->default_value_uint64();
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(parsed, f) == f->default_value_int32();
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetInt64(parsed, f) == f->default_value_int64();
    default:
      return false;
  }
}

TEST(ConfigExampleTest, ListsEveryKeyWithItsDefault) {
  const std::vector<KeyLine> lines = KeyLines(ReadFile(Deploy("moetierd.conf.example")));
  const google::protobuf::Descriptor* d = DaemonConfig::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::vector<const KeyLine*> found;
    for (const KeyLine& l : lines) {
      if (l.key == f->name()) found.push_back(&l);
    }
    if (found.empty()) {
      ADD_FAILURE() << "moetierd.conf.example does not mention " << f->name();
      continue;
    }
    if (f->is_repeated() || !f->has_default_value()) continue;
    // The commented line shows the default: parsing it alone gives it.
    const KeyLine& l = *found.front();
    EXPECT_TRUE(l.commented) << l.line << ": only keys without a default are set";
    DaemonConfig parsed;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(l.line, &parsed)) << l.line;
    EXPECT_TRUE(HoldsDefault(parsed, f)) << l.line << " is not the default of " << f->name();
  }
}

TEST(ConfigExampleTest, ParsesAndValidatesAsIsAndWithEveryKeyUncommented) {
  const std::string text = ReadFile(Deploy("moetierd.conf.example"));
  absl::StatusOr<DaemonConfig> as_is = ParseDaemonConfigText(text, "moetierd.conf.example");
  ASSERT_TRUE(as_is.ok()) << as_is.status();
  EXPECT_EQ(as_is->model_path(), "/var/lib/moetier/model.gguf");
  EXPECT_THAT(as_is->devices(), ::testing::ElementsAre("auto"));

  std::string all;
  for (const KeyLine& l : KeyLines(text)) all += l.line + "\n";
  absl::StatusOr<DaemonConfig> full = ParseDaemonConfigText(all, "uncommented example");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_THAT(full->devices(), ::testing::ElementsAre("auto", "cuda:0", "cpu"));
  // "auto" stands alone; the commented entries are its alternatives.
  full->mutable_devices()->erase(full->mutable_devices()->begin());
  // Only the model must exist for the values to validate.
  full->set_model_path(Deploy("moetierd.conf.example"));
  EXPECT_TRUE(ValidateDaemonConfig(*full).ok()) << ValidateDaemonConfig(*full);
}

TEST(SystemdUnitTest, HasWhatTheServiceNeeds) {
  const std::string unit = ReadFile(Deploy("moetierd.service"));
  for (const char* line :
       {"\nType=notify\n",
        "\nExecStart=/usr/local/bin/moetierd --config=/etc/moetier/moetierd.conf\n",
        "\nLimitMEMLOCK=infinity\n", "\nRestart=on-failure\n", "\nRuntimeDirectory=moetier\n",
        "\nGroup=moetier\n", "\nDeviceAllow=char-nvidia-frontend rw\n",
        "\nDeviceAllow=/dev/nvidiactl rw\n", "\nDeviceAllow=/dev/nvidia-uvm rw\n",
        "\nProtectSystem=strict\n", "\nNoNewPrivileges=yes\n", "\nUser=moetier\n",
        // moetierd exits 2 on a bad config or flag; restarting would only loop.
        "\nRestartPreventExitStatus=2\n", "\nProtectProc=invisible\n"}) {
    EXPECT_THAT(unit, HasSubstr(line));
  }
  // These would hide the GPU or break CUDA.
  EXPECT_THAT(unit, Not(HasSubstr("\nPrivateDevices=yes")));
  EXPECT_THAT(unit, Not(HasSubstr("\nMemoryDenyWriteExecute=yes")));
}

// The unit's "Key=value" settings by "[Section]Key", in file order; comments
// and blank lines dropped. Enough of systemd's syntax for this unit (no
// line continuations).
std::multimap<std::string, std::string> UnitSettings(const std::string& text) {
  std::multimap<std::string, std::string> out;
  std::string section;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(line);
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    out.emplace(section + std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return out;
}

std::vector<std::string> Values(const std::multimap<std::string, std::string>& settings,
                                const std::string& key) {
  std::vector<std::string> out;
  for (auto [it, end] = settings.equal_range(key); it != end; ++it) out.push_back(it->second);
  return out;
}

TEST(SystemdUnitTest, ServiceSectionSetsEachKeyOnce) {
  const auto settings = UnitSettings(ReadFile(Deploy("moetierd.service")));
  using ::testing::ElementsAre;
  EXPECT_THAT(Values(settings, "[Service]Type"), ElementsAre("notify"));
  EXPECT_THAT(Values(settings, "[Service]User"), ElementsAre("moetier"));
  EXPECT_THAT(Values(settings, "[Service]LimitMEMLOCK"), ElementsAre("infinity"));
  EXPECT_THAT(Values(settings, "[Service]RestartPreventExitStatus"), ElementsAre("2"));
  EXPECT_THAT(Values(settings, "[Service]ProtectProc"), ElementsAre("invisible"));
  // The daemon feeds the watchdog only where the unit asks for one; a unit
  // that sets it must not switch it off.
  for (const std::string& watchdog : Values(settings, "[Service]WatchdogSec")) {
    EXPECT_THAT(watchdog, Not(::testing::AnyOf("", "0", "infinity"))) << "WatchdogSec=" << watchdog;
  }
  EXPECT_THAT(Values(settings, "[Install]WantedBy"), ElementsAre("multi-user.target"));
}

// Runs `command`; its exit status and everything it printed.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// systemd-analyze verify warns (exit status 0) about unknown keys and bad
// values; the unit must produce no output at all.
TEST(SystemdUnitTest, PassesSystemdAnalyzeVerify) {
  std::string which;
  if (RunCommand("command -v systemd-analyze", &which) != 0) {
    GTEST_SKIP() << "systemd-analyze is not installed";
  }
  char dir[] = "/tmp/moetier-unit-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  // ExecStart must name an existing program for verify to pass.
  std::string unit = ReadFile(Deploy("moetierd.service"));
  const std::string exec = "ExecStart=/usr/local/bin/moetierd";
  unit.replace(unit.find(exec), exec.size(), "ExecStart=/bin/true");
  const std::string path = std::string(dir) + "/moetierd.service";
  std::ofstream(path) << unit;
  std::string output;
  const int status = RunCommand("systemd-analyze verify --man=no " + path, &output);
  unlink(path.c_str());
  rmdir(dir);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "");
}

TEST(TmpfilesTest, MakesTheModelDirectoryForTheMoetierUser) {
  EXPECT_THAT(ReadFile(Deploy("moetier.tmpfiles.conf")),
              HasSubstr("\nd /var/lib/moetier 0755 moetier moetier -\n"));
}

TEST(SysusersTest, CreatesTheMoetierUserAndGroup) {
  std::string which;
  if (RunCommand("command -v systemd-sysusers", &which) != 0) {
    GTEST_SKIP() << "systemd-sysusers is not installed";
  }
  std::string output;
  const int status =
      RunCommand("systemd-sysusers --dry-run " + Deploy("moetier.sysusers.conf"), &output);
  EXPECT_EQ(status, 0) << output;
  // Already present on a machine where it was installed; else it would be made.
  if (output.find("Creating") != std::string::npos) {
    EXPECT_THAT(output, HasSubstr("Creating group 'moetier'"));
    EXPECT_THAT(output, HasSubstr("Creating user 'moetier'"));
  }
}

}  // namespace
}  // namespace moetier
