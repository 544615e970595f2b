// Sort keys for a logits row's best candidates (cuda_top_candidates.cu): one
// uint64 per (logit, id) whose ascending order is the host sampler's order
// (sampling/sampler.h: higher logit first, equal logits lower id first), so
// the device selects exactly the tokens the sampler would rank first. Plain
// C++, evaluated by the kernels and by host tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace moetier::cuda {

// The float's bits, mapped so that unsigned order is the floats' order,
// with -0 as +0 (the sampler's comparison holds them equal) and NaN below
// every number (a NaN logit never ranks first).
MOETIER_HOST_DEVICE inline uint32_t OrderedLogitBits(float logit) {
  if (logit != logit) return 0;  // NaN
  if (logit == 0.0f) logit = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(logit);
#else
  uint32_t bits = 0;
  std::memcpy(&bits, &logit, sizeof(bits));
#endif
  // Negative floats: all bits flipped (larger magnitude, smaller key);
  // non-negative: the sign bit set (above every negative). -inf stays
  // above NaN's 0.
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

MOETIER_HOST_DEVICE inline float LogitOfOrderedBits(uint32_t ordered) {
  const uint32_t bits = (ordered & 0x80000000u) != 0 ? ordered & 0x7fffffffu : ~ordered;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float logit = 0.0f;
  std::memcpy(&logit, &bits, sizeof(bits));
  return logit;
#endif
}

// Ascending keys: higher logit first, equal logits lower id first.
MOETIER_HOST_DEVICE inline uint64_t CandidateKey(float logit, int32_t id) {
  return (static_cast<uint64_t>(~OrderedLogitBits(logit)) << 32) | static_cast<uint32_t>(id);
}

MOETIER_HOST_DEVICE inline int32_t CandidateId(uint64_t key) {
  return static_cast<int32_t>(static_cast<uint32_t>(key));
}

MOETIER_HOST_DEVICE inline float CandidateLogit(uint64_t key) {
  return LogitOfOrderedBits(~static_cast<uint32_t>(key >> 32));
}

}  // namespace moetier::cuda
