// What the HTTP API calls a served model: its file name without the folder
// and ".gguf", and without "-00001-of-0000N" for the first shard of a split
// model. The daemon answers with it; `moetier serve` prints it.
#pragma once

#include <string>
#include <string_view>

namespace moetier {

inline std::string ModelIdFromPath(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string name(slash == std::string_view::npos ? path : path.substr(slash + 1));
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  const size_t shard = name.rfind("-00001-of-");
  if (shard != std::string::npos && shard + 15 == name.size()) name.resize(shard);
  return name.empty() ? "model" : name;
}

}  // namespace moetier
