#include "run/executables.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moetier::client {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Without the "../" steps, for messages.
std::string Tidy(const std::string& path) {
  char resolved[PATH_MAX] = {};
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

}  // namespace

std::string SelfDirectory() {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string path(self, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string FindExecutable(std::string_view name, const std::string& dir,
                           const std::vector<std::string>& build_subdirs, const char* path_env) {
  const std::string file(name);
  if (!dir.empty()) {
    if (std::string p = absl::StrCat(dir, "/", file); IsExecutableFile(p)) return p;
    for (const std::string& sub : build_subdirs) {
      if (std::string p = absl::StrCat(dir, "/../", sub, "/", file); IsExecutableFile(p)) {
        return Tidy(p);
      }
    }
  }
  if (path_env != nullptr) {
    for (absl::string_view entry : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
      if (std::string p = absl::StrCat(entry, "/", file); IsExecutableFile(p)) return p;
    }
  }
  return "";
}

}  // namespace moetier::client
