#include "config/daemon_config.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "store/store_layout.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using google::protobuf::FieldDescriptor;

// Debian's absl::string_view is its own type, not std::string_view.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// How --help and errors spell the flag of a config field: with dashes.
std::string FlagSpelling(std::string_view field) {
  std::string name(field);
  for (char& c : name) {
    if (c == '_') c = '-';
  }
  return name;
}

struct FlagDoc {
  const char* name;
  const char* value;
  const char* help;
};

// One entry per DaemonConfig field, plus --config and --help.
constexpr FlagDoc kFlags[] = {
    {"config", "FILE", "Read a DaemonConfig in protobuf text format; flags override it."},
    {"model_path", "PATH", "The model: a .gguf file or the first shard of a split model."},
    {"ram_budget_bytes", "SIZE",
     "RAM for the locked expert store (tables, dense weights, expert slots), e.g. 24GiB. "
     "0 holds every expert; less makes RAM a cache over the model file."},
    {"devices", "LIST",
     "Comma-separated devices, one worker each: cpu, cuda:0, cuda:1, ..., or auto: every "
     "NVIDIA GPU present when the workers have CUDA, else the CPU. Default: auto."},
    {"worker_executable_path", "PATH",
     "The worker program (default: moetier-worker next to moetierd, or in the build "
     "tree's worker/ folder)."},
    {"worker_socket_path", "PATH", "Unix socket on which workers join the daemon (mode 0600)."},
    {"api_socket_path", "PATH", "Unix socket of the client API."},
    {"io_backend", "auto|io_uring|pread",
     "How experts are read: io_uring when the kernel allows it (auto), or plain pread."},
    {"io_queue_depth", "N", "Reads in flight at once, 4 to 4096 (an expert takes 2 or 3)."},
    {"direct_io", "BOOL",
     "Read experts with O_DIRECT, straight into the store, bypassing the page cache."},
    {"lock_memory", "BOOL", "mlock the expert store."},
    {"allow_unlocked_memory", "BOOL",
     "If mlock fails, run with memory the kernel may swap out instead of refusing to start."},
    {"huge_pages", "BOOL", "Ask for transparent huge pages for the store."},
    {"worker_handshake_timeout_ms", "MS", "Time from starting a worker to its joining."},
    {"worker_heartbeat_timeout_ms", "MS",
     "Heartbeat silence after which a worker counts as hung and is restarted."},
    {"worker_restart_backoff_initial_ms", "MS",
     "Delay before restarting a failed worker; doubles with each failure in a row."},
    {"worker_restart_backoff_max_ms", "MS", "Longest delay between restarts."},
    {"worker_stable_after_ms", "MS", "A worker up this long has its backoff reset."},
    {"worker_stop_grace_ms", "MS", "At shutdown, time between SIGTERM and SIGKILL."},
    {"worker_extra_args", "ARG",
     "An extra argument for every worker's command line; repeat for more."},
    {"preload_progress_interval_ms", "MS",
     "Longest time between progress lines of a start-up phase (locking, dense weights, "
     "preload); a line also comes every 5%."},
    {"preload_bytes_per_s", "SIZE",
     "Read at most this much per second while preloading (and copying the dense weights), "
     "e.g. 500MiB, so a desktop stays responsive; demand reads are never held back. 0: as "
     "fast as the disk goes."},
    {"state_directory", "PATH",
     "Where the heat profile (per-expert use, per model) is kept across restarts. Default: "
     "$STATE_DIRECTORY (systemd's StateDirectory=, /var/lib/moetier), else nothing is kept."},
    {"heat_profile_save_interval_s", "S",
     "Seconds between saves of the heat profile; it is saved at shutdown too. 0: only then."},
    {"warm_start", "BOOL",
     "Fill the RAM cache and the workers' expert caches with the saved profile's hottest "
     "experts at start."},
    {"api_socket_mode", "OCTAL", "Permissions of the API socket."},
    {"api_socket_group", "GROUP",
     "Group owning the API socket; its members may use the API. Empty or missing: the "
     "daemon's own group."},
    {"listen_address", "HOST:PORT",
     "Also serve the API over TCP (no authentication: prefer 127.0.0.1). Empty: unix socket "
     "only."},
    {"max_queued_requests", "N",
     "Requests waiting for a worker; more get RESOURCE_EXHAUSTED."},
    {"max_active_sequences", "N", "Requests computed at once over all workers."},
    {"max_prompt_bytes", "BYTES", "Longest prompt (UTF-8 bytes, or 4 per given token id)."},
    {"max_new_tokens_limit", "N", "Largest max_new_tokens a request may ask for."},
    {"default_max_new_tokens", "N", "max_new_tokens of requests that leave it unset."},
    {"max_score_tokens", "N", "Longest token list of a Score request."},
    {"http_listen_address", "HOST:PORT",
     "Serve the OpenAI- and Anthropic-compatible HTTP API here, e.g. 127.0.0.1:8080. Empty: "
     "no HTTP."},
    {"api_keys_file", "PATH",
     "API keys, one a line; when set, HTTP requests (but /health) need 'Authorization: Bearer "
     "KEY'. Must not be readable by other users."},
    {"http_max_body_bytes", "BYTES", "Largest HTTP request body; larger ones get 413."},
    {"help", "", "Print this help and exit (also -h)."},
};

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty()) first_ = absl::StrFormat("%d:%d: %s", line + 1, column + 1, message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::StatusOr<bool> ParseBool(std::string_view flag, std::string_view text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrFormat("--%s=%s: expected true or false", FlagSpelling(flag), text));
}

// Fields whose values are byte counts and so accept units (24GiB).
bool IsByteSizeField(std::string_view name) {
  return absl::EndsWith(Absl(name), "_bytes") || absl::EndsWith(Absl(name), "_bytes_per_s");
}

// The text format only knows plain integers, so `ram_budget_bytes: 24GiB`
// (or "24GiB") becomes the number before parsing. Lines keep their numbers,
// so parse errors still point at the right place.
absl::StatusOr<std::string> WithByteSizesAsNumbers(std::string_view text,
                                                   std::string_view source) {
  static const std::regex kSizedField(
      R"re(^(\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:\s*)"?([0-9][0-9.]*\s*[A-Za-z]+)"?(\s*(#.*)?)$)re");
  std::string out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(Absl(text), '\n')) {
    ++line_number;
    std::string l(line);
    std::smatch m;
    if (std::regex_match(l, m, kSizedField) && IsByteSizeField(m[2].str())) {
      absl::StatusOr<uint64_t> bytes = ParseByteSize(m[4].str());
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "config %s:%d: %s: %s", source, line_number, m[2].str(), bytes.status().message()));
      }
      l = absl::StrCat(m[1].str(), m[2].str(), m[3].str(), *bytes, m[5].str());
    }
    if (line_number > 1) out += '\n';
    out += l;
  }
  return out;
}

absl::StatusOr<uint64_t> ParseUnsigned(const FieldDescriptor& field, std::string_view text) {
  uint64_t value = 0;
  if (IsByteSizeField(field.name())) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s: %s", FlagSpelling(field.name()), bytes.status().message()));
    }
    value = *bytes;
  } else if (!absl::SimpleAtoi(Absl(text), &value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: expected a non-negative integer", FlagSpelling(field.name()),
                        text));
  }
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32 && value > UINT32_MAX) {
    return absl::OutOfRangeError(
        absl::StrFormat("--%s=%s: larger than %d", FlagSpelling(field.name()), text, UINT32_MAX));
  }
  return value;
}

absl::Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("cannot read config file %s: %s", path,
                                               std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return absl::OkStatus();
}

// Applies one flag; `replaced` tracks list fields already reset by a flag.
absl::Status ApplyFlag(DaemonConfig& config, std::string_view name,
                       std::optional<std::string> value,
                       absl::flat_hash_set<const FieldDescriptor*>& replaced) {
  const FieldDescriptor* field = DaemonConfig::descriptor()->FindFieldByName(std::string(name));
  if (field == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown flag --%s; run moetierd --help for the list", FlagSpelling(name)));
  }
  const google::protobuf::Reflection* r = config.GetReflection();
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
    absl::StatusOr<bool> b = value.has_value() ? ParseBool(name, *value) : true;
    if (!b.ok()) return b.status();
    r->SetBool(&config, field, *b);
    return absl::OkStatus();
  }
  if (!value.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s needs a value", FlagSpelling(name)));
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      absl::StatusOr<uint64_t> v = ParseUnsigned(*field, *value);
      if (!v.ok()) return v.status();
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
        r->SetUInt32(&config, field, static_cast<uint32_t>(*v));
      } else {
        r->SetUInt64(&config, field, *v);
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      if (!field->is_repeated()) {
        r->SetString(&config, field, *value);
        return absl::OkStatus();
      }
      if (replaced.insert(field).second) r->ClearField(&config, field);
      if (name == "devices") {
        for (absl::string_view item : absl::StrSplit(*value, ',', absl::SkipWhitespace())) {
          r->AddString(&config, field, std::string(item));
        }
      } else {
        r->AddString(&config, field, *value);
      }
      return absl::OkStatus();
    default:
      return absl::InternalError(
          absl::StrFormat("flag --%s has an unsupported type", FlagSpelling(name)));
  }
}

template <typename... Args>
absl::Status Invalid(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrFormat(format, args...));
}

bool IsValidDevice(std::string_view device) {
  if (device == "cpu") return true;
  if (!absl::StartsWith(Absl(device), "cuda:")) return false;
  std::string_view number = device.substr(5);
  uint32_t index = 0;
  return !number.empty() && number.size() <= 3 &&
         number.find_first_not_of("0123456789") == std::string_view::npos &&
         absl::SimpleAtoi(Absl(number), &index);
}

absl::Status CheckSocketPath(std::string_view name, const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s '%s' must be 1 to %d bytes long", name, path, sizeof(sockaddr_un{}.sun_path) - 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseDaemonConfigText(std::string_view text,
                                                   std::string_view source) {
  DaemonConfig config;
  absl::StatusOr<std::string> plain = WithByteSizesAsNumbers(text, source);
  if (!plain.ok()) return plain.status();
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*plain, &config)) {
    return absl::InvalidArgumentError(absl::StrFormat("config %s:%s", source, errors.first()));
  }
  return config;
}

absl::StatusOr<unsigned> ParseSocketMode(std::string_view octal) {
  unsigned mode = 0;
  if (octal.empty() || octal.size() > 4) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s' is not an octal mode", octal));
  }
  for (const char c : octal) {
    if (c < '0' || c > '7') {
      return absl::InvalidArgumentError(absl::StrFormat("'%s' is not an octal mode", octal));
    }
    mode = mode * 8 + static_cast<unsigned>(c - '0');
  }
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s' has bits beyond 0777", octal));
  }
  return mode;
}

absl::Status ValidateDaemonConfig(const DaemonConfig& c) {
  if (c.model_path().empty()) {
    return Invalid("model_path is not set: give it in the config file or as --model-path=FILE");
  }
  struct stat st {};
  if (stat(c.model_path().c_str(), &st) != 0) {
    return Invalid("model_path %s cannot be read: %s", c.model_path(), std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Invalid("model_path %s is not a regular file", c.model_path());
  if (c.devices_size() == 0) {
    return Invalid("devices is empty: list at least one of auto, cpu, cuda:0, cuda:1, ...");
  }
  if (c.devices_size() > static_cast<int>(store::kMaxWorkers)) {
    return Invalid("%d devices listed; at most %d workers are supported", c.devices_size(),
                   store::kMaxWorkers);
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& d : c.devices()) {
    if (d == "auto") {
      return Invalid("device 'auto' must be the only entry of devices (it picks them all)");
    }
    if (!IsValidDevice(d)) {
      return Invalid("device '%s' is not valid: use auto, cpu or cuda:N (N = 0, 1, ...)", d);
    }
    if (!seen.insert(d).second) return Invalid("device '%s' is listed twice", d);
  }
  if (c.io_backend() != "auto" && c.io_backend() != "io_uring" && c.io_backend() != "pread") {
    return Invalid("io_backend '%s' is not one of auto, io_uring, pread", c.io_backend());
  }
  if (c.io_queue_depth() < 4 || c.io_queue_depth() > 4096) {
    return Invalid("io_queue_depth %d is outside [4, 4096]", c.io_queue_depth());
  }
  if (absl::Status s = CheckSocketPath("worker_socket_path", c.worker_socket_path()); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSocketPath("api_socket_path", c.api_socket_path()); !s.ok()) return s;
  if (c.worker_socket_path() == c.api_socket_path()) {
    return Invalid("worker_socket_path and api_socket_path are both %s; they must differ",
                   c.worker_socket_path());
  }
  if (!c.worker_executable_path().empty() &&
      access(c.worker_executable_path().c_str(), X_OK) != 0) {
    return Invalid("worker_executable_path %s is not an executable file: %s",
                   c.worker_executable_path(), std::strerror(errno));
  }
  const struct {
    const char* name;
    uint32_t value;
    uint32_t min;
  } limits[] = {
      {"worker_handshake_timeout_ms", c.worker_handshake_timeout_ms(), 100},
      {"worker_heartbeat_timeout_ms", c.worker_heartbeat_timeout_ms(), 100},
      {"worker_restart_backoff_initial_ms", c.worker_restart_backoff_initial_ms(), 1},
      {"worker_restart_backoff_max_ms", c.worker_restart_backoff_max_ms(), 1},
      {"worker_stable_after_ms", c.worker_stable_after_ms(), 1},
      {"worker_stop_grace_ms", c.worker_stop_grace_ms(), 1},
      {"preload_progress_interval_ms", c.preload_progress_interval_ms(), 1},
      {"max_queued_requests", c.max_queued_requests(), 1},
      {"max_active_sequences", c.max_active_sequences(), 1},
      {"max_prompt_bytes", c.max_prompt_bytes(), 1},
      {"max_new_tokens_limit", c.max_new_tokens_limit(), 1},
      {"default_max_new_tokens", c.default_max_new_tokens(), 1},
      {"max_score_tokens", c.max_score_tokens(), 1},
  };
  for (const auto& l : limits) {
    if (l.value < l.min) return Invalid("%s is %d; it must be at least %d", l.name, l.value, l.min);
  }
  if (c.default_max_new_tokens() > c.max_new_tokens_limit()) {
    return Invalid("default_max_new_tokens (%d) is above max_new_tokens_limit (%d)",
                   c.default_max_new_tokens(), c.max_new_tokens_limit());
  }
  if (!ParseSocketMode(c.api_socket_mode()).ok()) {
    return Invalid("api_socket_mode '%s' is not an octal mode such as 0660", c.api_socket_mode());
  }
  if (!c.listen_address().empty() && c.listen_address().rfind(':') == std::string::npos) {
    return Invalid("listen_address '%s' is not HOST:PORT", c.listen_address());
  }
  if (!c.http_listen_address().empty() && c.http_listen_address().rfind(':') == std::string::npos) {
    return Invalid("http_listen_address '%s' is not HOST:PORT", c.http_listen_address());
  }
  if (c.http_max_body_bytes() < 4096) {
    return Invalid("http_max_body_bytes is %d; it must be at least 4096", c.http_max_body_bytes());
  }
  if (!c.state_directory().empty() && c.state_directory().front() != '/') {
    return Invalid("state_directory '%s' is not an absolute path", c.state_directory());
  }
  if (c.heat_profile_save_interval_s() > 86400) {
    return Invalid("heat_profile_save_interval_s is %d; at most 86400 (a day)",
                   c.heat_profile_save_interval_s());
  }
  if (c.worker_restart_backoff_initial_ms() > c.worker_restart_backoff_max_ms()) {
    return Invalid("worker_restart_backoff_initial_ms (%d) is above "
                   "worker_restart_backoff_max_ms (%d)",
                   c.worker_restart_backoff_initial_ms(), c.worker_restart_backoff_max_ms());
  }
  return absl::OkStatus();
}

namespace {

// Flags are spelled with dashes (--model-path); the config field's own
// spelling (--model_path) is accepted as well.
std::string FieldNameOfFlag(std::string_view flag) {
  std::string name(flag);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

}  // namespace

std::string ResolveStateDirectory(const DaemonConfig& config, const char* state_directory_env) {
  if (!config.state_directory().empty()) return config.state_directory();
  if (state_directory_env == nullptr) return {};
  // systemd joins several StateDirectory= entries with ':'.
  const std::string_view env(state_directory_env);
  const std::string_view first = env.substr(0, env.find(':'));
  return !first.empty() && first.front() == '/' ? std::string(first) : std::string();
}

absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(const std::vector<std::string>& args) {
  struct Flag {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<Flag> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h") a = "--help";
    if (!absl::StartsWith(Absl(a), "--") || a.size() == 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unexpected argument '%s'; every option is a --flag (run moetierd --help)", a));
    }
    a.remove_prefix(2);
    Flag flag;
    if (const size_t eq = a.find('='); eq != std::string_view::npos) {
      flag.name = FieldNameOfFlag(a.substr(0, eq));
      flag.value = std::string(a.substr(eq + 1));
    } else {
      flag.name = FieldNameOfFlag(a);
      const FieldDescriptor* field = DaemonConfig::descriptor()->FindFieldByName(flag.name);
      const bool takes_value =
          flag.name == "config" ||
          (field != nullptr && field->cpp_type() != FieldDescriptor::CPPTYPE_BOOL);
      if (takes_value && i + 1 < args.size()) flag.value = args[++i];
    }
    flags.push_back(std::move(flag));
  }

  DaemonCommandLine out;
  for (const Flag& f : flags) {
    if (f.name == "help") {
      out.help = true;
      return out;
    }
  }
  for (const Flag& f : flags) {
    if (f.name != "config") continue;
    if (!f.value.has_value() || f.value->empty()) {
      return absl::InvalidArgumentError("--config needs a file name");
    }
    std::string text;
    if (absl::Status s = ReadFile(*f.value, &text); !s.ok()) return s;
    absl::StatusOr<DaemonConfig> parsed = ParseDaemonConfigText(text, *f.value);
    if (!parsed.ok()) return parsed.status();
    out.config = std::move(*parsed);
  }
  absl::flat_hash_set<const FieldDescriptor*> replaced;
  for (const Flag& f : flags) {
    if (f.name == "config") continue;
    if (absl::Status s = ApplyFlag(out.config, f.name, f.value, replaced); !s.ok()) return s;
  }
  return out;
}

namespace {

// Appends `text` as lines of at most 80 columns, each indented by 6.
void AppendWrapped(std::string* out, std::string_view text) {
  constexpr size_t kWidth = 80 - 6;
  std::string line;
  for (absl::string_view word : absl::StrSplit(Absl(text), ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(out, "      ", line, "\n");
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line.append(word.data(), word.size());
  }
  if (!line.empty()) absl::StrAppend(out, "      ", line, "\n");
}

}  // namespace

std::string DaemonUsage() {
  std::string out =
      "moetierd: the moetier daemon. Owns the pinned expert store of one Mixture-of-Experts\n"
      "model and runs one moetier-worker per device.\n\n"
      "usage: moetierd --config=FILE [--flag=value ...]\n"
      "       moetierd --model-path=MODEL.gguf [--devices=cpu] [--flag=value ...]\n\n"
      "The config file is a DaemonConfig in protobuf text format (field: value, one per\n"
      "line). Every flag below is also a config field, spelled with underscores\n"
      "(--model-path is model_path; --model_path works as a flag too), and a flag given\n"
      "here overrides the file. Sizes accept units in both: 24GiB, 512MiB, 20GB.\n\n"
      "flags:\n";
  const DaemonConfig defaults;
  for (const FlagDoc& f : kFlags) {
    std::string head = absl::StrFormat("  --%s", FlagSpelling(f.name));
    if (f.value[0] != '\0') absl::StrAppendFormat(&head, "=%s", f.value);
    std::string help = f.help;
    const FieldDescriptor* field = DaemonConfig::descriptor()->FindFieldByName(f.name);
    if (field != nullptr && !field->is_repeated()) {
      std::string value;
      google::protobuf::TextFormat::PrintFieldValueToString(defaults, field, -1, &value);
      if (value != "\"\"") absl::StrAppendFormat(&help, " Default: %s.", value);
    }
    absl::StrAppend(&out, head, "\n");
    AppendWrapped(&out, help);
  }
  out += "\nSIGTERM or SIGINT stops the workers and the daemon cleanly.\n";
  return out;
}

std::vector<std::string> DocumentedFlagNames() {
  std::vector<std::string> names;
  for (const FlagDoc& f : kFlags) names.emplace_back(f.name);
  return names;
}

}  // namespace moetier
