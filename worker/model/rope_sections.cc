#include "model/rope_sections.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moetier {

std::vector<uint8_t> ImropePairUsesPosition(int n_rot, const std::vector<int64_t>& sections) {
  int64_t total = 0;
  for (int64_t s : sections) total += s;
  std::vector<uint8_t> uses(static_cast<size_t>(n_rot / 2), 0);
  for (int i = 0; i < n_rot / 2; ++i) {
    const int64_t s = i % total;
    uses[static_cast<size_t>(i)] = (s % 3 == 0 && s < 3 * sections[0]) ||
                                   (s % 3 == 1 && s < 3 * sections[1]) ||
                                   (s % 3 == 2 && s < 3 * sections[2]);
  }
  return uses;
}

absl::Status ReadImropeSections(const ModelLoader& loader, ModelHparams& hp) {
  absl::StatusOr<std::vector<int64_t>> sections = loader.IntArray("rope.dimension_sections");
  if (!sections.ok()) return sections.status();
  if (sections->empty()) {
    return loader.Error(
        absl::StrFormat("required key %s is missing (the multi-section rope of %s needs it)",
                        loader.Key("rope.dimension_sections"), loader.arch()));
  }
  // ggml asserts one of the first three sections positive (the fourth alone
  // would turn no pair) and their sum at most the head size; a section
  // larger than the head size is refused before anything is summed.
  const std::vector<int64_t>& v = *sections;
  if (v.size() != 4 ||
      std::any_of(v.begin(), v.end(), [&](int64_t s) { return s < 0 || s > hp.head_dim; }) ||
      (v[0] == 0 && v[1] == 0 && v[2] == 0)) {
    return loader.Error(absl::StrFormat(
        "%s = [%s] must be 4 values from 0 to the head size %d, one of the first three positive",
        loader.Key("rope.dimension_sections"), absl::StrJoin(v, ", "), hp.head_dim));
  }
  const int64_t section_sum = v[0] + v[1] + v[2] + v[3];
  if (section_sum > hp.head_dim) {
    // ggml's rope_multi asserts this too (sect_dims <= ne0).
    return loader.Error(absl::StrFormat("%s = [%s] sum to %d, more than the head size %d",
                                        loader.Key("rope.dimension_sections"),
                                        absl::StrJoin(*sections, ", "), section_sum, hp.head_dim));
  }
  hp.rope_pair_uses_position = ImropePairUsesPosition(hp.n_rot, v);
  return absl::OkStatus();
}

}  // namespace moetier
