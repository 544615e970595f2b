#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/expert_cache_policy.h"
#include "cache/policies.h"

namespace moetier {

std::string_view ExpertPolicyName(ExpertPolicyKind kind) {
  switch (kind) {
    case ExpertPolicyKind::kLru:
      return "lru";
    case ExpertPolicyKind::kLfu:
      return "lfu";
    case ExpertPolicyKind::kLrfu:
      return "lrfu";
    case ExpertPolicyKind::kReuseDistance:
      return "reuse";
    case ExpertPolicyKind::kAdaptive:
      return "adaptive";
    case ExpertPolicyKind::kOptGen:
      return "optgen";
  }
  return "?";
}

std::vector<ExpertPolicyKind> AllExpertPolicyKinds() {
  return {ExpertPolicyKind::kLru, ExpertPolicyKind::kLfu, ExpertPolicyKind::kLrfu,
          ExpertPolicyKind::kReuseDistance, ExpertPolicyKind::kAdaptive,
          ExpertPolicyKind::kOptGen};
}

absl::StatusOr<ExpertPolicyKind> ParseExpertPolicyKind(std::string_view name) {
  std::string known;
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    if (name == ExpertPolicyName(kind)) return kind;
    known += known.empty() ? "" : ", ";
    known += ExpertPolicyName(kind);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown expert cache policy '%s' (known: %s)", name, known));
}

absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> MakeExpertCachePolicy(
    ExpertPolicyKind kind, const ExpertCacheShape& shape) {
  if (absl::Status s = shape.Validate(); !s.ok()) return s;
  switch (kind) {
    case ExpertPolicyKind::kLru:
      return NewLruPolicy(shape);
    case ExpertPolicyKind::kLfu:
      return NewLrfuPolicy(shape, 1.0 / 64, "lfu");
    case ExpertPolicyKind::kLrfu:
      return NewLrfuPolicy(shape, 0.1, "lrfu");
    case ExpertPolicyKind::kReuseDistance:
      return NewReuseDistancePolicy(shape);
    case ExpertPolicyKind::kAdaptive:
      return NewAdaptiveLrfuPolicy(shape);
    case ExpertPolicyKind::kOptGen:
      return NewOptGenPolicy(shape);
  }
  return absl::InvalidArgumentError("unknown expert cache policy kind");
}

absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> MakeLrfuPolicy(const ExpertCacheShape& shape,
                                                                  double lambda) {
  if (absl::Status s = shape.Validate(); !s.ok()) return s;
  if (!(lambda > 0 && lambda <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("LRFU lambda %g is outside (0, 1]", lambda));
  }
  return NewLrfuPolicy(shape, lambda, absl::StrFormat("lrfu(%g)", lambda));
}

}  // namespace moetier
