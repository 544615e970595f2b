// moetierd's configuration: a text-format DaemonConfig file (--config) with
// command-line flags of the same names on top, validated before anything
// is allocated. Errors say which value is wrong and what would be right.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/daemon_config.pb.h"

namespace moetier {

using daemon::DaemonConfig;

// Parses text format; `source` names the file in error messages.
absl::StatusOr<DaemonConfig> ParseDaemonConfigText(std::string_view text, std::string_view source);

// Checks every value (not whether the model file is a valid GGUF).
absl::Status ValidateDaemonConfig(const DaemonConfig& config);

struct DaemonCommandLine {
  DaemonConfig config;
  bool help = false;
};

// args[0] is the program name. Applies --config=FILE first, then every
// other flag in order. Accepts --flag=value and --flag value; a bool flag
// alone means true. Sizes (*_bytes, *_bytes_per_s) accept units: 24GiB,
// 512MiB, 20GB.
// List flags (--devices, --worker-extra-args) replace the file's list;
// --devices takes a comma-separated list, --worker-extra-args one argument
// per occurrence.
absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(const std::vector<std::string>& args);

// api_socket_mode as permission bits ("0660" -> 0660); InvalidArgument
// unless it is an octal number within 0777.
absl::StatusOr<unsigned> ParseSocketMode(std::string_view octal);

// state_directory, or where it is unset, the first entry of systemd's
// $STATE_DIRECTORY (`state_directory_env`, null when unset); empty when
// neither names one.
std::string ResolveStateDirectory(const DaemonConfig& config, const char* state_directory_env);

// The --help text: every flag, its default and its meaning.
std::string DaemonUsage();

// Names of every flag --help documents (tests check it covers the proto).
std::vector<std::string> DocumentedFlagNames();

}  // namespace moetier
