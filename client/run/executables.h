// Finding the programs `moetier run` starts: next to moetier (installed),
// in the build tree's folders (moetier in client/, moetierd in daemon/, ...),
// then in $PATH.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moetier::client {

// The directory of the running executable ("" if unknown).
std::string SelfDirectory();

// The first executable file among `dir`/`name`, `dir`/../`sub`/`name` for
// each of `build_subdirs`, then $PATH (`path_env`, may be null). "" when
// none.
std::string FindExecutable(std::string_view name, const std::string& dir,
                           const std::vector<std::string>& build_subdirs, const char* path_env);

}  // namespace moetier::client
