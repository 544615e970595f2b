#include "run/model_cache.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "run/subprocess.h"

namespace moetier::client {
namespace {

// mkdir -p with mode 0700 for the parts it creates (XDG cache convention).
absl::Status MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string part = slash == std::string::npos ? path : path.substr(0, slash);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::UnavailableError(
          absl::StrFormat("cannot create the directory %s: %s", part, std::strerror(errno)));
    }
    if (slash == std::string::npos) return absl::OkStatus();
  }
}

}  // namespace

std::string CacheDirectory(const char* xdg_cache_home, const char* home) {
  if (xdg_cache_home != nullptr && xdg_cache_home[0] == '/') {
    return absl::StrCat(xdg_cache_home, "/moetier");
  }
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/moetier");
  return "";
}

absl::StatusOr<std::string> EnsureSyntheticModel(const std::string& synth_path,
                                                 const std::string& cache_dir, std::ostream& err) {
  if (cache_dir.empty()) {
    return absl::FailedPreconditionError(
        "no cache directory for the synthetic model (neither $XDG_CACHE_HOME nor $HOME is set); "
        "pass --model FILE");
  }
  const std::string model = absl::StrCat(cache_dir, "/", kSyntheticModelName);
  struct stat st {};
  if (stat(model.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) return model;
  if (synth_path.empty()) {
    return absl::NotFoundError(
        "cannot find moetier-synth next to moetier or in PATH to make a model; build it "
        "(cmake --build build --target moetier-synth), or pass --synth PATH or --model FILE");
  }
  if (absl::Status s = MakeDirectories(cache_dir); !s.ok()) return s;
  const std::string partial = absl::StrFormat("%s.%d.tmp", model, getpid());
  err << "moetier run: no model given; writing a small synthetic one to " << model << std::endl;
  SpawnOptions spawn;
  spawn.argv = {synth_path, "--preset", "small", "--quant", "q4_k_m",
                "--seed",   "1",        "--out", partial};
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  if (!pid.ok()) return pid.status();
  std::optional<int> wait_status;
  while (!(wait_status = WaitFor(*pid, 1000)).has_value()) {
  }
  if (!WIFEXITED(*wait_status) || WEXITSTATUS(*wait_status) != 0) {
    std::remove(partial.c_str());
    return absl::InternalError(absl::StrFormat("%s %s while writing %s", synth_path,
                                               DescribeWaitStatus(*wait_status), partial));
  }
  if (std::rename(partial.c_str(), model.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    return absl::UnavailableError(
        absl::StrFormat("cannot rename %s to %s: %s", partial, model, std::strerror(error)));
  }
  return model;
}

}  // namespace moetier::client
