// Start-up reporting: when a progress line is due, the preload's pace,
// the systemd messages (STATUS=, EXTEND_TIMEOUT_USEC=, the watchdog's
// environment) and their delivery to $NOTIFY_SOCKET. Times are given, not
// measured, so nothing here depends on how fast the machine is.
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "log/progress_pacer.h"
#include "store/byte_rate_limiter.h"
#include "util/systemd_notify.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSecond = 1'000'000'000;

TEST(ProgressPacerTest, ReportsTheFirstEveryStepTheQuietIntervalAndTheLast) {
  ProgressPacer pacer(1000, 5 * kSecond, 5);
  EXPECT_TRUE(pacer.Due(0, 0)) << "the first report always goes";
  EXPECT_FALSE(pacer.Due(49, kSecond)) << "4.9%: below the next 5% step";
  EXPECT_TRUE(pacer.Due(50, kSecond)) << "5%";
  EXPECT_FALSE(pacer.Due(60, 2 * kSecond));
  EXPECT_TRUE(pacer.Due(61, 6 * kSecond)) << "5 s without a report";
  EXPECT_FALSE(pacer.Due(62, 7 * kSecond));
  EXPECT_TRUE(pacer.Due(999, 7 * kSecond)) << "99.9%: many steps at once";
  EXPECT_TRUE(pacer.Due(1000, 7 * kSecond)) << "the end always goes";
  EXPECT_FALSE(pacer.Due(1000, 20 * kSecond)) << "and only once";
}

TEST(ProgressPacerTest, AFastPhaseReportsAtMostOncePerStep) {
  ProgressPacer pacer(uint64_t{17} << 30, 2 * kSecond, 5);
  int reports = 0;
  for (uint64_t done = 0; done <= (uint64_t{17} << 30); done += 1 << 20) {
    reports += pacer.Due(done, 0) ? 1 : 0;
  }
  EXPECT_EQ(reports, 21);  // 0%, 5%, ..., 100%
}

TEST(ByteRateLimiterTest, UnlimitedNeverWaits) {
  ByteRateLimiter limiter(0, 0);
  EXPECT_FALSE(limiter.limited());
  limiter.Consume(uint64_t{1} << 40, 0);
  EXPECT_EQ(limiter.DelayNs(0), 0u);
}

TEST(ByteRateLimiterTest, HoldsTheAverageToTheRate) {
  const uint64_t mib = 1 << 20;
  ByteRateLimiter limiter(100 * mib, 0);  // 100 MiB/s: 1 MiB per 10 ms
  const uint64_t t0 = 1000 * kSecond;
  EXPECT_EQ(limiter.DelayNs(t0), 0u);
  limiter.Consume(10 * mib, t0);
  EXPECT_EQ(limiter.DelayNs(t0), 100'000'000u) << "10 MiB at 100 MiB/s is paid for 100 ms later";
  EXPECT_EQ(limiter.DelayNs(t0 + 40'000'000), 60'000'000u);
  EXPECT_EQ(limiter.DelayNs(t0 + 100'000'000), 0u);
  // A read started late does not earn credit for the idle time before it.
  limiter.Consume(mib, t0 + 500'000'000);
  EXPECT_EQ(limiter.DelayNs(t0 + 500'000'000), 10'000'000u);
}

TEST(ByteRateLimiterTest, BurstLetsReadsStartAheadOfThePace) {
  const uint64_t mib = 1 << 20;
  ByteRateLimiter limiter(mib, 2 * mib);  // 1 MiB/s, 2 MiB (2 s) of credit
  const uint64_t t0 = 1000 * kSecond;
  limiter.Consume(mib, t0);
  EXPECT_EQ(limiter.DelayNs(t0), 0u);
  limiter.Consume(mib, t0);
  EXPECT_EQ(limiter.DelayNs(t0), 0u);
  limiter.Consume(mib, t0);
  EXPECT_EQ(limiter.DelayNs(t0), kSecond) << "3 MiB booked, 2 s of credit: wait 1 s";
  // 18 GiB at 1 GiB/s: no overflow in the arithmetic (bytes * 1e9 > 2^64).
  ByteRateLimiter fast(uint64_t{1} << 30, 0);
  fast.Consume(uint64_t{18} << 30, t0);
  EXPECT_EQ(fast.DelayNs(t0), 18 * kSecond);
}

TEST(SystemdMessageTest, StartupProgressNamesThePhasePercentAndExtension) {
  const std::string m = StartupProgressMessage("preloading experts", uint64_t{7} << 30,
                                               uint64_t{17} << 30, 30'000'000);
  EXPECT_EQ(m,
            "STATUS=preloading experts: 41% (7.00 GiB of 17.0 GiB)\n"
            "EXTEND_TIMEOUT_USEC=30000000");
  EXPECT_THAT(StartupProgressMessage("x", 0, 0, 1), HasSubstr("x: 100%"));
}

TEST(SystemdMessageTest, WatchdogOnlyForThisProcess) {
  EXPECT_EQ(WatchdogPingIntervalUsec("60000000", nullptr, 123), 30'000'000u);
  EXPECT_EQ(WatchdogPingIntervalUsec("60000000", "123", 123), 30'000'000u);
  EXPECT_EQ(WatchdogPingIntervalUsec("60000000", "", 123), 30'000'000u);
  EXPECT_EQ(WatchdogPingIntervalUsec("60000000", "124", 123), std::nullopt)
      << "another process's watchdog";
  EXPECT_EQ(WatchdogPingIntervalUsec(nullptr, nullptr, 123), std::nullopt);
  EXPECT_EQ(WatchdogPingIntervalUsec("0", nullptr, 123), std::nullopt);
  EXPECT_EQ(WatchdogPingIntervalUsec("soon", nullptr, 123), std::nullopt);
}

TEST(SystemdMessageTest, NotifyReachesTheSocketInNotifySocket) {
  char dir[] = "/tmp/moetier-notify-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/notify";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  NotifySystemd(StartupProgressMessage("copying dense weights", 1, 2, 5));
  NotifySystemd("READY=1");
  unsetenv("NOTIFY_SOCKET");
  NotifySystemd("lost: no socket named");
  std::vector<std::string> got;
  char buffer[512];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0;) {
    got.emplace_back(buffer, static_cast<size_t>(n));
  }
  close(fd);
  unlink(path.c_str());
  rmdir(dir);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "STATUS=copying dense weights: 50% (1 B of 2 B)\nEXTEND_TIMEOUT_USEC=5");
  EXPECT_EQ(got[1], "READY=1");
}

}  // namespace
}  // namespace moetier
