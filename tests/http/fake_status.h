// A daemon Status with believable numbers that move with `tick`: for the
// pages' tests, which need a status source without a store or workers.
#pragma once

#include <cstdint>

#include "moetier/v1/moetier.pb.h"

namespace moetier::http_test {

inline constexpr uint32_t kFakeLayers = 24;
inline constexpr uint32_t kFakeExperts = 64;

// Two workers: 0 on "cpu" (no device cache), 1 on "cuda:0" (a cache).
v1::Status FakeStatus(uint64_t tick);

}  // namespace moetier::http_test
