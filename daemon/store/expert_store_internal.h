// What expert_store.cc and expert_store_service.cc, the two halves of
// ExpertStore, both use.
#pragma once

#include <cstdint>
#include <string_view>

#include "store/store_layout.h"

namespace moetier::expert_store_internal {

inline constexpr std::string_view kPhasePreload = "preloading experts";

constexpr uint32_t StateValue(store::ExpertState s) { return static_cast<uint32_t>(s); }

inline double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace moetier::expert_store_internal
