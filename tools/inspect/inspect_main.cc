// moetier-inspect: prints what a GGUF model holds — metadata, tensor counts
// and bytes per type, expert bytes per layer, and whether moetier can serve
// it — without loading any weights.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/flags/flag_set.h"
#include "gguf/gguf_reader.h"
#include "model/architectures.h"

namespace moetier {
namespace {

constexpr std::string_view kUsage =
    "usage: moetier-inspect [--all-keys] [--tensors] FILE.gguf\n"
    "\n"
    "Prints a summary of a GGUF model: format version, architecture and its\n"
    "hyperparameters, tokenizer size, tensor count and bytes per tensor type,\n"
    "and how many bytes the routed experts take, then whether this build can\n"
    "serve it (architecture, tensor types, names and shapes). FILE may be the\n"
    "first shard (-00001-of-N.gguf) of a split model.";

std::string FormatValue(const GgufValue& value) {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          // A short array of integers (rope sections, per-layer counts) is
          // shown whole.
          constexpr size_t kShownElements = 8;
          const std::string whole = std::visit(
              [](const auto& elements) -> std::string {
                using E = typename std::decay_t<decltype(elements)>::value_type;
                if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>) {
                  if (elements.size() <= kShownElements) {
                    return absl::StrFormat("[%s]", absl::StrJoin(elements, ", "));
                  }
                }
                return "";
              },
              v.elements);
          if (!whole.empty()) return whole;
          return absl::StrFormat("[%s x %d]", GgufValueTypeName(v.element_type), v.size());
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (v.size() > 60) return absl::StrFormat("\"%s...\" (%d bytes)", v.substr(0, 57), v.size());
          return absl::StrFormat("\"%s\"", v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return absl::StrFormat("%g", v);
        } else {
          return absl::StrFormat("%d", v);
        }
      },
      value.data);
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", bytes, units[unit]);
}

int Run(const std::string& path, bool all_keys, bool list_tensors) {
  auto model = GgufModel::Open(path);
  if (!model.ok()) {
    std::fprintf(stderr, "moetier-inspect: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const GgufMetadata& meta = (*model)->metadata();
  const std::string arch = meta.GetStringOr("general.architecture", "(none)");
  std::printf("file:          %s (%zu shard%s, GGUF v%u)\n", path.c_str(), (*model)->shards().size(),
              (*model)->shards().size() == 1 ? "" : "s", (*model)->shards().front()->version());
  std::printf("name:          %s\n", meta.GetStringOr("general.name", "(none)").c_str());
  std::printf("architecture:  %s\n", arch.c_str());
  for (const char* key : {"block_count",
                          "embedding_length",
                          "attention.head_count",
                          "attention.head_count_kv",
                          "attention.key_length",
                          "expert_count",
                          "expert_used_count",
                          "expert_feed_forward_length",
                          "expert_shared_feed_forward_length",
                          "expert_shared_count",
                          "leading_dense_block_count",
                          "feed_forward_length",
                          "expert_gating_func",
                          "expert_weights_norm",
                          "expert_weights_scale",
                          "interleave_moe_layer_step",
                          "nextn_predict_layers",
                          "context_length",
                          "rope.freq_base",
                          "rope.dimension_count",
                          "rope.dimension_sections",
                          "rope.scaling.type",
                          "rope.scaling.factor",
                          "rope.scaling.original_context_length",
                          "attention.layer_norm_rms_epsilon"}) {
    const std::string full = arch + "." + key;
    if (const GgufValue* value = meta.Find(full)) {
      std::printf("  %-36s %s\n", key, FormatValue(*value).c_str());
    }
  }
  if (auto tokens = meta.GetArray("tokenizer.ggml.tokens"); tokens.ok()) {
    auto merges = meta.GetArray("tokenizer.ggml.merges");
    std::printf("tokenizer:     %s/%s, %zu tokens, %zu merges\n",
                meta.GetStringOr("tokenizer.ggml.model", "?").c_str(),
                meta.GetStringOr("tokenizer.ggml.pre", "?").c_str(), (*tokens)->size(),
                merges.ok() ? (*merges)->size() : size_t{0});
  }

  std::map<std::string, std::pair<size_t, uint64_t>> per_type;
  uint64_t total_bytes = 0;
  uint64_t expert_bytes = 0;
  for (const GgufTensorInfo& t : (*model)->tensors()) {
    auto& entry = per_type[std::string(TensorTypeName(t.type))];
    ++entry.first;
    entry.second += t.size_bytes;
    total_bytes += t.size_bytes;
    // The experts' matrices, which the store serves; their biases (gpt-oss)
    // stay with the dense weights.
    if (t.name.find("_exps.weight") != std::string::npos) expert_bytes += t.size_bytes;
  }
  std::printf("tensors:       %zu, %s\n", (*model)->tensors().size(), HumanBytes(double(total_bytes)).c_str());
  for (const auto& [type, entry] : per_type) {
    std::printf("  %-8s %6zu tensors  %s\n", type.c_str(), entry.first, HumanBytes(double(entry.second)).c_str());
  }
  std::printf("routed experts: %s (%.1f%% of the weights)\n", HumanBytes(double(expert_bytes)).c_str(),
              total_bytes ? 100.0 * double(expert_bytes) / double(total_bytes) : 0.0);
  // The workers' own check (moetier-worker --check-model: header and tensor
  // table only), before the optional listings, which scripts read to the
  // end of the output.
  const absl::Status verdict = LoadModel(**model).status();
  std::printf("verdict:       %s\n",
              verdict.ok() ? "supported by this build"
                           : absl::StrCat("not supported: ", verdict.message()).c_str());
  if (all_keys) {
    std::printf("metadata:\n");
    for (const GgufKeyValue& kv : meta.entries()) {
      std::printf("  %-48s %-8s %s\n", kv.key.c_str(), std::string(GgufValueTypeName(kv.value.type)).c_str(),
                  FormatValue(kv.value).c_str());
    }
  }
  if (list_tensors) {
    std::printf("tensors (name type dims shard offset bytes):\n");
    for (const GgufTensorInfo& t : (*model)->tensors()) {
      std::string dims;
      for (uint32_t d = 0; d < t.n_dims; ++d) absl::StrAppendFormat(&dims, "%s%d", d ? "x" : "", t.ne[d]);
      std::printf("  %s %s %s %s %llu %llu\n", t.name.c_str(), std::string(TensorTypeName(t.type)).c_str(),
                  dims.c_str(), (*model)->ShardPath(t).c_str(), static_cast<unsigned long long>(t.file_offset),
                  static_cast<unsigned long long>(t.size_bytes));
    }
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) {
  bool all_keys = false;
  bool list_tensors = false;
  moetier::FlagSet flags;
  flags.AddSwitch({"--all-keys"},
                  "also list every metadata key with its type and value (arrays are shown by "
                  "type and length)",
                  &all_keys);
  flags.AddSwitch({"--tensors"},
                  "also list every tensor: name, type, dims (ne[0] first), shard file, absolute "
                  "byte offset in that file and size",
                  &list_tensors);
  const std::vector<std::string> files =
      moetier::ParseFlagsOrExit(flags, "moetier-inspect", moetier::kUsage, argc, argv);
  if (files.size() != 1) {
    moetier::ExitWithUsageError(
        "moetier-inspect",
        absl::InvalidArgumentError(
            files.empty()
                ? std::string("no FILE given (see --help)")
                : absl::StrFormat("more than one FILE given ('%s' and '%s')", files[0], files[1])));
  }
  return moetier::Run(files[0], all_keys, list_tensors);
}
