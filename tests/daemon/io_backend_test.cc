// The read backends: io_uring (O_DIRECT) and pread return identical bytes
// for the same aligned ranges; short reads are finished, errors reported
// per read; reads past the end of the file stop at the end.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/io_backend_factory.h"
#include "io/pread_backend.h"
#include "io/read_progress.h"
#include "io/uring_backend.h"
#include "test_model.h"

namespace moetier {
namespace {

using daemon_test::ScratchDir;

constexpr uint64_t kAlign = 4096;

// Page-aligned scratch memory (O_DIRECT needs aligned destinations).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : size_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~AlignedBuffer() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
  size_t size_;
};

std::vector<uint8_t> WriteRandomFile(const std::string& path, size_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  std::mt19937 rng(seed);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  return bytes;
}

// Submits `reads` (at most queue depth at a time) and collects completions.
std::map<uint64_t, ReadCompletion> RunReads(IoBackend& io, const std::vector<ReadRequest>& reads) {
  std::map<uint64_t, ReadCompletion> done;
  size_t next = 0;
  while (done.size() < reads.size()) {
    while (next < reads.size() && io.in_flight() < io.queue_depth()) io.Submit(reads[next++]);
    ReadCompletion out[16];
    const size_t n = io.Reap(out, 100'000'000);
    for (size_t i = 0; i < n; ++i) done[out[i].user_data] = out[i];
  }
  return done;
}

std::unique_ptr<UringBackend> UringOrSkip(uint32_t depth, bool direct, std::string* why) {
  absl::StatusOr<std::unique_ptr<UringBackend>> uring = UringBackend::Create(depth, direct);
  if (!uring.ok()) {
    *why = std::string(uring.status().message());
    return nullptr;
  }
  return std::move(*uring);
}

TEST(ReadProgressTest, ContinuesFromTheLastAlignedPosition) {
  ReadProgress p;
  p.request.offset = 8192;
  p.request.length = 3 * kAlign;
  EXPECT_FALSE(p.OnBytes(5000, kAlign));  // 5000 valid, resume at 4096
  EXPECT_EQ(p.done, 5000u);
  EXPECT_EQ(p.position, kAlign);
  EXPECT_EQ(p.attempt_offset(), 8192u + kAlign);
  EXPECT_EQ(p.attempt_length(), 2 * kAlign);
  EXPECT_FALSE(p.OnBytes(kAlign, kAlign));  // up to 8192
  EXPECT_EQ(p.position, 2 * kAlign);
  EXPECT_TRUE(p.OnBytes(kAlign, kAlign));
  EXPECT_EQ(p.done, 3 * kAlign);
}

TEST(ReadProgressTest, StopsWhenTheFileEndsInsideABlock) {
  ReadProgress p;
  p.request.length = 2 * kAlign;
  EXPECT_TRUE(p.OnBytes(100, kAlign)) << "no aligned progress possible: end of file";
  EXPECT_EQ(p.done, 100u);
  ReadProgress q;
  q.request.length = 100;
  EXPECT_TRUE(q.OnBytes(0, 1));
  EXPECT_EQ(q.done, 0u);
}

TEST(IoBackendTest, UringAndPreadReturnIdenticalBytes) {
  ScratchDir dir;
  const size_t file_size = 3 * 1024 * 1024 + 1234;  // does not end on a block
  const std::vector<uint8_t> bytes = WriteRandomFile(dir.File("data.bin"), file_size, 7);
  std::string why;
  std::unique_ptr<UringBackend> uring = UringOrSkip(8, /*direct=*/true, &why);
  if (uring == nullptr) GTEST_SKIP() << "io_uring unavailable here: " << why;
  PreadBackend pread(8);
  ASSERT_TRUE(uring->RegisterFile(dir.File("data.bin")).ok());
  ASSERT_TRUE(pread.RegisterFile(dir.File("data.bin")).ok());

  std::mt19937 rng(11);
  const size_t n = 40;
  const size_t max_read = 64 * kAlign;
  AlignedBuffer a(n * max_read);
  AlignedBuffer b(n * max_read);
  ASSERT_NE(a.data(), nullptr);
  std::vector<ReadRequest> ra;
  std::vector<ReadRequest> rb;
  for (size_t i = 0; i < n; ++i) {
    ReadRequest r;
    r.offset = (rng() % (file_size / kAlign + 1)) * kAlign;  // some run past the end
    r.length = (1 + rng() % 64) * kAlign;
    r.user_data = i;
    r.dest = a.data() + i * max_read;
    ra.push_back(r);
    r.dest = b.data() + i * max_read;
    rb.push_back(r);
  }
  const auto done_a = RunReads(*uring, ra);
  const auto done_b = RunReads(pread, rb);
  // pread with O_DIRECT reads the same bytes.
  PreadBackend direct(8, nullptr, /*direct_io=*/true);
  ASSERT_TRUE(direct.RegisterFile(dir.File("data.bin")).ok());
  AlignedBuffer c(n * max_read);
  std::vector<ReadRequest> rc = ra;
  for (size_t i = 0; i < n; ++i) rc[i].dest = c.data() + i * max_read;
  const auto done_c = RunReads(direct, rc);
  for (size_t i = 0; i < n; ++i) {
    const ReadCompletion& ca = done_a.at(i);
    const ReadCompletion& cb = done_b.at(i);
    ASSERT_EQ(ca.error, 0) << std::strerror(ca.error);
    ASSERT_EQ(cb.error, 0);
    const uint64_t expect =
        std::min<uint64_t>(ra[i].length, ra[i].offset < file_size ? file_size - ra[i].offset : 0);
    ASSERT_EQ(ca.bytes, expect) << "read " << i;
    ASSERT_EQ(cb.bytes, expect) << "read " << i;
    ASSERT_EQ(done_c.at(i).bytes, expect) << "read " << i;
    ASSERT_EQ(std::memcmp(ra[i].dest, rb[i].dest, expect), 0) << "read " << i;
    ASSERT_EQ(std::memcmp(rc[i].dest, rb[i].dest, expect), 0) << "read " << i;
    ASSERT_EQ(std::memcmp(ra[i].dest, bytes.data() + ra[i].offset, expect), 0) << "read " << i;
  }
  EXPECT_TRUE(uring->direct_io());
  EXPECT_EQ(uring->in_flight(), 0u);
  EXPECT_EQ(uring->stats().errors, 0u);
}

TEST(IoBackendTest, UringReportsAnErrorPerRead) {
  ScratchDir dir;
  WriteRandomFile(dir.File("data.bin"), 64 * 1024, 3);
  std::string why;
  std::unique_ptr<UringBackend> uring = UringOrSkip(4, /*direct=*/true, &why);
  if (uring == nullptr) GTEST_SKIP() << "io_uring unavailable here: " << why;
  ASSERT_TRUE(uring->RegisterFile(dir.File("data.bin")).ok());
  // A directory opens, but reading it fails (EISDIR): that read alone fails.
  absl::StatusOr<uint32_t> directory = uring->RegisterFile(dir.path());
  ASSERT_TRUE(directory.ok()) << directory.status();
  AlignedBuffer buffer(4 * kAlign);
  const ReadRequest good{0, 0, kAlign, buffer.data(), 1};
  const ReadRequest past_end{0, 1024 * 1024, kAlign, buffer.data() + kAlign, 2};
  const ReadRequest bad{*directory, 0, kAlign, buffer.data() + 2 * kAlign, 3};
  const auto done = RunReads(*uring, {good, past_end, bad});
  EXPECT_EQ(done.at(1).error, 0);
  EXPECT_EQ(done.at(1).bytes, kAlign);
  EXPECT_EQ(done.at(2).error, 0);
  EXPECT_EQ(done.at(2).bytes, 0u) << "entirely past the end: zero bytes, no error";
  EXPECT_NE(done.at(3).error, 0) << "reading a directory must fail";
  EXPECT_EQ(uring->stats().errors, 1u);
}

TEST(IoBackendTest, PreadFinishesInjectedShortReads) {
  ScratchDir dir;
  const std::vector<uint8_t> bytes = WriteRandomFile(dir.File("data.bin"), 256 * 1024, 5);
  int attempts = 0;
  PreadBackend io(4, [&](const ReadRequest&, uint64_t, uint64_t length)
                         -> std::optional<InjectedFault> {
    ++attempts;
    if (length > 1000) return InjectedFault{InjectedFault::Kind::kShortRead, 0, length / 3};
    return std::nullopt;
  });
  ASSERT_TRUE(io.RegisterFile(dir.File("data.bin")).ok());
  std::vector<uint8_t> out(100000);
  const auto done = RunReads(io, {{0, 4321, out.size(), out.data(), 9}});
  ASSERT_EQ(done.at(9).error, 0);
  EXPECT_EQ(done.at(9).bytes, out.size());
  EXPECT_EQ(std::memcmp(out.data(), bytes.data() + 4321, out.size()), 0);
  EXPECT_GT(io.stats().short_reads, 3u);
  EXPECT_EQ(io.stats().reads_submitted, static_cast<uint64_t>(attempts));
}

TEST(IoBackendTest, PreadInjectedErrorsFailOnlyTheirRead) {
  ScratchDir dir;
  const std::vector<uint8_t> bytes = WriteRandomFile(dir.File("data.bin"), 64 * 1024, 5);
  PreadBackend io(8, [](const ReadRequest& r, uint64_t, uint64_t) -> std::optional<InjectedFault> {
    if (r.user_data == 2) return InjectedFault{InjectedFault::Kind::kError, EIO, 0};
    if (r.user_data == 3) return InjectedFault{InjectedFault::Kind::kEndOfFile, 0, 0};
    return std::nullopt;
  });
  ASSERT_TRUE(io.RegisterFile(dir.File("data.bin")).ok());
  std::vector<uint8_t> out(4 * 4096, 0xAB);
  std::vector<ReadRequest> reads;
  for (uint64_t i = 0; i < 4; ++i) reads.push_back({0, i * 4096, 4096, out.data() + i * 4096, i});
  const auto done = RunReads(io, reads);
  EXPECT_EQ(done.at(0).error, 0);
  EXPECT_EQ(done.at(1).error, 0);
  EXPECT_EQ(done.at(2).error, EIO);
  EXPECT_EQ(done.at(3).error, 0);
  EXPECT_EQ(done.at(3).bytes, 0u) << "an early end of file is a short completion";
  EXPECT_EQ(std::memcmp(out.data(), bytes.data(), 2 * 4096), 0);
  EXPECT_EQ(io.stats().errors, 1u);
}

TEST(IoBackendTest, FactoryHonoursTheRequestedBackend) {
  IoBackendOptions options;
  options.kind = IoBackendKind::kPread;
  absl::StatusOr<std::unique_ptr<IoBackend>> pread = CreateIoBackend(options);
  ASSERT_TRUE(pread.ok());
  EXPECT_EQ((*pread)->name(), "pread");
  options.kind = IoBackendKind::kAuto;
  absl::StatusOr<std::unique_ptr<IoBackend>> automatic = CreateIoBackend(options);
  ASSERT_TRUE(automatic.ok());
  std::string why;
  if (UringOrSkip(4, true, &why) != nullptr) {
    EXPECT_EQ((*automatic)->name(), "io_uring");
  } else {
    EXPECT_EQ((*automatic)->name(), "pread") << "auto falls back when io_uring is refused";
  }
  EXPECT_FALSE(ParseIoBackendKind("aio").ok());
  options.queue_depth = 0;
  EXPECT_FALSE(CreateIoBackend(options).ok());
}

}  // namespace
}  // namespace moetier
