#include "heat/heat_profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_format.h"
#include "store/store_layout.h"

namespace moetier {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'T', 'H', 'E', 'A', 'T'};
constexpr size_t kChecksumBytes = 8;

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The file format is little-endian, as every machine moetier runs on.
static_assert(std::endian::native == std::endian::little);

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T Get(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

absl::Status WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::ErrnoToStatus(n < 0 ? errno : EIO, "write");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrFormat("cannot create %s", prefix));
    }
    if (slash == std::string::npos) return absl::OkStatus();
  }
}

}  // namespace

std::string EncodeHeatProfile(const HeatProfile& p) {
  std::string out;
  out.reserve(kHeatHeaderBytes + p.counts.size() * sizeof(double) + kChecksumBytes);
  out.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kHeatFormatVersion);
  Put<uint32_t>(out, kHeatHeaderBytes);
  Put<uint64_t>(out, p.fingerprint);
  Put<uint32_t>(out, p.n_layer);
  Put<uint32_t>(out, p.n_expert);
  Put<int64_t>(out, p.saved_unix_s);
  Put<double>(out, p.tokens);
  Put<double>(out, p.half_life_tokens);
  Put<uint64_t>(out, 0);
  for (const double c : p.counts) Put<double>(out, c);
  Put<uint64_t>(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<HeatProfile> DecodeHeatProfile(std::string_view bytes) {
  if (bytes.size() < kHeatHeaderBytes + kChecksumBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d bytes is too short for a heat profile (at least %d)", bytes.size(),
        kHeatHeaderBytes + kChecksumBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a heat profile (no MOETHEAT at offset 0)");
  }
  const uint32_t version = Get<uint32_t>(bytes, 8);
  if (version != kHeatFormatVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "heat profile format version %d at offset 8; this build reads version %d", version,
        kHeatFormatVersion));
  }
  const uint32_t header_bytes = Get<uint32_t>(bytes, 12);
  if (header_bytes != kHeatHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "header size %d at offset 12; version %d has %d", header_bytes, version,
        kHeatHeaderBytes));
  }
  HeatProfile p;
  p.fingerprint = Get<uint64_t>(bytes, 16);
  p.n_layer = Get<uint32_t>(bytes, 24);
  p.n_expert = Get<uint32_t>(bytes, 28);
  if (p.n_layer == 0 || p.n_layer > store::kMaxLayers || p.n_expert == 0 ||
      p.n_expert > store::kMaxExpertsPerLayer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d layers of %d experts at offset 24 (at most %d layers of %d experts)", p.n_layer,
        p.n_expert, store::kMaxLayers, store::kMaxExpertsPerLayer));
  }
  const size_t n = static_cast<size_t>(p.n_layer) * p.n_expert;
  const size_t expected = kHeatHeaderBytes + n * sizeof(double) + kChecksumBytes;
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d bytes, but %d layers of %d experts make a %d-byte profile (truncated or padded)",
        bytes.size(), p.n_layer, p.n_expert, expected));
  }
  const uint64_t stored = Get<uint64_t>(bytes, expected - kChecksumBytes);
  const uint64_t actual = Fnv1a64(bytes.substr(0, expected - kChecksumBytes));
  if (stored != actual) {
    return absl::DataLossError(absl::StrFormat(
        "checksum %016x at offset %d does not match the contents (%016x): the file is corrupt",
        stored, expected - kChecksumBytes, actual));
  }
  p.saved_unix_s = Get<int64_t>(bytes, 32);
  p.tokens = Get<double>(bytes, 40);
  p.half_life_tokens = Get<double>(bytes, 48);
  if (!std::isfinite(p.tokens) || p.tokens < 0 || !std::isfinite(p.half_life_tokens) ||
      p.half_life_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokens %g or half-life %g (offsets 40, 48) out of range", p.tokens,
        p.half_life_tokens));
  }
  p.counts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t offset = kHeatHeaderBytes + i * sizeof(double);
    p.counts[i] = Get<double>(bytes, offset);
    if (!std::isfinite(p.counts[i]) || p.counts[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "count %g of layer %d expert %d (offset %d) is not a finite count", p.counts[i],
          i / p.n_expert, i % p.n_expert, offset));
    }
  }
  return p;
}

absl::Status CheckHeatProfileFits(const HeatProfile& p, uint64_t fingerprint, uint32_t n_layer,
                                  uint32_t n_expert) {
  if (p.fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "it was made for the model with fingerprint %016x, not %016x", p.fingerprint,
        fingerprint));
  }
  if (p.n_layer != n_layer || p.n_expert != n_expert) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "it has %d layers of %d experts; the model has %d of %d", p.n_layer, p.n_expert,
        n_layer, n_expert));
  }
  return absl::OkStatus();
}

std::string HeatProfilePath(std::string_view state_directory, uint64_t fingerprint) {
  std::string dir(state_directory);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return absl::StrFormat("%s/heat/%016x.heat", dir, fingerprint);
}

absl::StatusOr<HeatProfile> ReadHeatProfile(const std::string& path) {
  // Never blocks on a FIFO, nor follows a link planted in its place.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrFormat("cannot open %s", path));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s is not a regular file", path));
  }
  // Far above any real profile (128 layers x 512 experts is 512 KiB).
  constexpr off_t kMaxBytes = 16 << 20;
  if (st.st_size > kMaxBytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d bytes is too large for a heat profile", path, st.st_size));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, absl::StrFormat("cannot read %s", path));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(done);
  absl::StatusOr<HeatProfile> profile = DecodeHeatProfile(bytes);
  if (!profile.ok()) {
    return absl::Status(profile.status().code(),
                        absl::StrFormat("%s: %s", path, profile.status().message()));
  }
  return profile;
}

absl::Status WriteHeatProfile(const std::string& path, const HeatProfile& profile) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  const std::string temp = absl::StrFormat("%s.tmp.%d", path, getpid());
  // A fresh file of our own: a stale one (or a link) is removed, not written through.
  (void)unlink(temp.c_str());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot create %s", temp));
  }
  absl::Status s = WriteAll(fd, EncodeHeatProfile(profile));
  if (s.ok() && fsync(fd) != 0) s = absl::ErrnoToStatus(errno, "fsync");
  if (close(fd) != 0 && s.ok()) s = absl::ErrnoToStatus(errno, "close");
  if (s.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    s = absl::ErrnoToStatus(errno, absl::StrFormat("rename to %s", path));
  }
  if (!s.ok()) {
    unlink(temp.c_str());
    return absl::Status(s.code(), absl::StrFormat("cannot write %s: %s", path, s.message()));
  }
  // The rename is durable once the folder is.
  if (const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

std::vector<uint32_t> WarmRanks(const HeatProfile& p) {
  std::vector<uint32_t> ranks(p.counts.size(), 0);
  std::vector<uint32_t> order(p.n_expert);
  for (uint32_t l = 0; l < p.n_layer; ++l) {
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return p.count(l, a) > p.count(l, b);
    });
    for (uint32_t r = 0; r < p.n_expert && p.count(l, order[r]) > 0; ++r) {
      ranks[static_cast<size_t>(l) * p.n_expert + order[r]] = r + 1;
    }
  }
  return ranks;
}

std::vector<uint32_t> HottestFirst(const HeatProfile& p) {
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < p.counts.size(); ++i) {
    if (p.counts[i] > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return p.counts[a] > p.counts[b]; });
  return order;
}

}  // namespace moetier
