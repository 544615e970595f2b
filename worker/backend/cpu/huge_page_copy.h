// A copy of scattered read-only byte ranges (weight tensors) in anonymous
// memory backed by transparent huge pages.
//
// Decoding streams every active weight once per token. Behind 4 KiB pages of
// a file mapping, a large model costs a TLB miss (a page walk, and under
// virtualization a nested one) every 4 KiB; on the 2-core test machine that
// halves decode throughput on an 18 GiB model. 2 MiB pages remove almost all
// of them. The price is one copy at start-up and memory that is no longer
// shared with the page cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier::cpu {

struct ByteRange {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;  // one past the last byte
};

// Bytes covered by the union of `ranges`.
size_t UnionBytes(std::span<const ByteRange> ranges);

// Whether copying `weight_bytes` of weights into huge pages is worth it here:
// transparent huge pages are enabled ("always" or "madvise"), the weights are
// large enough that 4 KiB-page TLB misses cost real time (at least 1 GiB),
// and the copy fits in the memory the kernel reports available, with room to
// spare for everything else.
bool HugePageCopyPays(size_t weight_bytes);

class HugePageCopy {
 public:
  // Copies the union of `ranges` (which may overlap) into one buffer advised
  // for huge pages. When `release_source`, each source page is marked cold
  // (MADV_COLD) as soon as it is copied, so that the kernel reclaims those
  // file pages first while the copy grows; the source keeps its contents.
  // Fails when the memory cannot be mapped or the kernel refuses the advice.
  static absl::StatusOr<HugePageCopy> Create(std::span<const ByteRange> ranges,
                                             bool release_source);

  HugePageCopy(HugePageCopy&& other) noexcept;
  HugePageCopy& operator=(HugePageCopy&& other) noexcept;
  HugePageCopy(const HugePageCopy&) = delete;
  HugePageCopy& operator=(const HugePageCopy&) = delete;
  ~HugePageCopy();

  // The copy of source byte `p`. Precondition: p lies in one of the ranges.
  const uint8_t* Translate(const uint8_t* p) const;
  size_t size() const { return bytes_; }

 private:
  struct Segment {
    const uint8_t* src_begin;
    const uint8_t* src_end;
    uint8_t* dst;
  };
  HugePageCopy() = default;

  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  size_t bytes_ = 0;               // bytes copied
  std::vector<Segment> segments_;  // sorted by src_begin, disjoint
};

}  // namespace moetier::cpu
