#include "backend/cpu/huge_page_copy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_check.h"
#include "backend/cpu/host_memory.h"

namespace moetier::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Copy in slices so that released source pages can be reclaimed while later
// slices are copied.
constexpr size_t kCopySlice = size_t{64} << 20;

uintptr_t RoundUp(uintptr_t n, uintptr_t align) { return (n + align - 1) / align * align; }

// Sorted by start, overlapping and touching ranges merged.
std::vector<ByteRange> MergeRanges(std::span<const ByteRange> ranges) {
  std::vector<ByteRange> sorted;
  for (const ByteRange& r : ranges) {
    MOETIER_CPU_CHECK(r.begin != nullptr && r.begin <= r.end, "bad byte range");
    if (r.begin < r.end) sorted.push_back(r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : sorted) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

size_t UnionBytes(std::span<const ByteRange> ranges) {
  size_t bytes = 0;
  for (const ByteRange& r : MergeRanges(ranges)) bytes += static_cast<size_t>(r.end - r.begin);
  return bytes;
}

bool HugePageCopyPays(size_t weight_bytes) {
  constexpr size_t kWorthIt = size_t{1} << 30;
  constexpr size_t kSpare = size_t{2} << 30;
  const std::string thp = ReadSmallFile("/sys/kernel/mm/transparent_hugepage/enabled");
  // The active choice is the bracketed one: "always [madvise] never".
  const bool thp_on = thp.find("[always]") != std::string::npos ||
                      thp.find("[madvise]") != std::string::npos;
  return thp_on && weight_bytes >= kWorthIt && weight_bytes + kSpare <= MemAvailableBytes();
}

absl::StatusOr<HugePageCopy> HugePageCopy::Create(std::span<const ByteRange> ranges,
                                                  bool release_source) {
  // Each merged segment keeps its bytes' relative offsets.
  const std::vector<ByteRange> merged = MergeRanges(ranges);
  // Destination offsets keep each source's 64-byte alignment phase, so the
  // kernels see the same alignment as in the source.
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const ByteRange& r : merged) {
    const size_t phase = reinterpret_cast<uintptr_t>(r.begin) % 64;
    total = RoundUp(total, 64) + phase;
    offsets.push_back(total);
    total += static_cast<size_t>(r.end - r.begin);
  }

  HugePageCopy copy;
  copy.mapping_bytes_ = RoundUp(std::max<size_t>(total, 1), kHugePage) + kHugePage;
  copy.mapping_ = mmap(nullptr, copy.mapping_bytes_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (copy.mapping_ == MAP_FAILED) {
    copy.mapping_ = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map %d MiB for the huge-page copy of the weights: %s", total >> 20,
                        std::strerror(errno)));
  }
  // Huge pages need 2 MiB aligned virtual addresses.
  uint8_t* base =
      reinterpret_cast<uint8_t*>(RoundUp(reinterpret_cast<uintptr_t>(copy.mapping_), kHugePage));
  if (madvise(base, RoundUp(std::max<size_t>(total, 1), kHugePage), MADV_HUGEPAGE) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "madvise(MADV_HUGEPAGE) failed (%s): transparent huge pages are unavailable; check "
        "/sys/kernel/mm/transparent_hugepage/enabled (it must be \"always\" or \"madvise\") or "
        "turn the huge-page copy off",
        std::strerror(errno)));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < merged.size(); ++i) {
    const ByteRange& r = merged[i];
    uint8_t* dst = base + offsets[i];
    const size_t n = static_cast<size_t>(r.end - r.begin);
    for (size_t done = 0; done < n; done += kCopySlice) {
      const size_t len = std::min(kCopySlice, n - done);
      std::memcpy(dst + done, r.begin + done, len);
      if (release_source) {
        // Only whole pages inside the slice: neighbours may still be in use.
        const uintptr_t from = RoundUp(reinterpret_cast<uintptr_t>(r.begin + done), page);
        const uintptr_t to = reinterpret_cast<uintptr_t>(r.begin + done + len) / page * page;
        // MADV_COLD keeps the contents (unlike MADV_DONTNEED on anonymous
        // memory) and only makes the pages the first the kernel reclaims.
        if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_COLD);
      }
    }
    copy.segments_.push_back({r.begin, r.end, dst});
  }
  copy.bytes_ = total;
  return copy;
}

HugePageCopy::HugePageCopy(HugePageCopy&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      segments_(std::move(other.segments_)) {}

HugePageCopy& HugePageCopy::operator=(HugePageCopy&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    segments_ = std::move(other.segments_);
  }
  return *this;
}

HugePageCopy::~HugePageCopy() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

const uint8_t* HugePageCopy::Translate(const uint8_t* p) const {
  // The last segment starting at or before p.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), p,
                             [](const uint8_t* x, const Segment& s) { return x < s.src_begin; });
  MOETIER_CPU_CHECK(it != segments_.begin(), "pointer outside the copied ranges");
  --it;
  MOETIER_CPU_CHECK(p < it->src_end, "pointer outside the copied ranges");
  return it->dst + (p - it->src_begin);
}

}  // namespace moetier::cpu
