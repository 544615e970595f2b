// The heat profile: its file round-trips; any changed byte, any truncation
// or padding, another model's profile is refused with a reason and the
// keeper starts cold instead of crashing; decay follows the tokens; ranks
// and the warm order follow the counts.
#include "heat/heat_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heat/heat_keeper.h"
#include "test_model.h"

namespace moetier {
namespace {

using daemon_test::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

HeatProfile Sample() {
  HeatProfile p;
  p.fingerprint = 0x0123456789abcdefULL;
  p.n_layer = 3;
  p.n_expert = 4;
  p.saved_unix_s = 1'764'000'000;
  p.tokens = 1234.5;
  p.half_life_tokens = 65536;
  p.counts = {0, 5, 2, 9, 1, 1, 0, 0, 3.25, 0, 7, 0.5};
  return p;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(HeatProfileTest, RoundTripsEveryField) {
  const HeatProfile p = Sample();
  const std::string bytes = EncodeHeatProfile(p);
  EXPECT_EQ(bytes.size(), kHeatHeaderBytes + 12 * 8 + 8);
  EXPECT_EQ(bytes.substr(0, 8), "MOETHEAT");
  absl::StatusOr<HeatProfile> back = DecodeHeatProfile(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fingerprint, p.fingerprint);
  EXPECT_EQ(back->n_layer, p.n_layer);
  EXPECT_EQ(back->n_expert, p.n_expert);
  EXPECT_EQ(back->saved_unix_s, p.saved_unix_s);
  EXPECT_EQ(back->tokens, p.tokens);
  EXPECT_EQ(back->half_life_tokens, p.half_life_tokens);
  EXPECT_EQ(back->counts, p.counts);
}

TEST(HeatProfileTest, AChangeOfAnyByteIsRefused) {
  const std::string good = EncodeHeatProfile(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    for (const uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ flip);
      const absl::StatusOr<HeatProfile> decoded = DecodeHeatProfile(bad);
      EXPECT_FALSE(decoded.ok()) << "byte " << i << " ^ " << int{flip} << " was accepted";
      if (!decoded.ok()) {
        EXPECT_FALSE(decoded.status().message().empty());
      }
    }
  }
}

TEST(HeatProfileTest, EveryTruncationAndPaddingIsRefused) {
  const std::string good = EncodeHeatProfile(Sample());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeHeatProfile(good.substr(0, n)).ok()) << n << " bytes were accepted";
  }
  const absl::StatusOr<HeatProfile> padded = DecodeHeatProfile(good + '\0');
  ASSERT_FALSE(padded.ok());
  EXPECT_THAT(padded.status().message(), HasSubstr("truncated or padded"));
}

TEST(HeatProfileTest, ForeignProfilesAreToldApart) {
  const HeatProfile p = Sample();
  EXPECT_TRUE(CheckHeatProfileFits(p, p.fingerprint, 3, 4).ok());
  EXPECT_THAT(CheckHeatProfileFits(p, 42, 3, 4).message(), HasSubstr("fingerprint"));
  EXPECT_THAT(CheckHeatProfileFits(p, p.fingerprint, 3, 8).message(),
              HasSubstr("3 layers of 4 experts; the model has 3 of 8"));
}

TEST(HeatProfileTest, WritesAtomicallyUnderTheStateDirectory) {
  ScratchDir dir;
  const std::string path = HeatProfilePath(dir.path() + "/state/", 0xabcULL);
  EXPECT_EQ(path, dir.path() + "/state/heat/0000000000000abc.heat");
  HeatProfile p = Sample();
  ASSERT_TRUE(WriteHeatProfile(path, p).ok());
  absl::StatusOr<HeatProfile> back = ReadHeatProfile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->counts, p.counts);
  // Nothing but the profile is left in the folder.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/state/heat")) {
    EXPECT_EQ(entry.path().string(), path);
    ++files;
  }
  EXPECT_EQ(files, 1);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0007, 0u) << "other users may not read it";
  EXPECT_EQ(ReadHeatProfile(dir.path() + "/none.heat").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HeatProfileTest, AFifoOrALinkIsRefusedWithoutBlocking) {
  ScratchDir dir;
  const std::string fifo = dir.File("fifo.heat");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadHeatProfile(fifo).status().message(), HasSubstr("not a regular file"));
  const std::string real = dir.File("real.heat");
  ASSERT_TRUE(WriteHeatProfile(real, Sample()).ok());
  const std::string link = dir.File("link.heat");
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  EXPECT_FALSE(ReadHeatProfile(link).ok());
  // A link planted at the temporary name is replaced, not written through.
  const std::string victim = dir.File("victim");
  WriteFile(victim, "keep me");
  const std::string path = dir.File("p.heat");
  ASSERT_EQ(symlink(victim.c_str(), (path + ".tmp." + std::to_string(getpid())).c_str()), 0);
  ASSERT_TRUE(WriteHeatProfile(path, Sample()).ok());
  EXPECT_EQ(ReadFile(victim), "keep me");
  EXPECT_TRUE(ReadHeatProfile(path).ok());
}

TEST(HeatProfileTest, RanksAndTheWarmOrderFollowTheCounts) {
  const HeatProfile p = Sample();
  // Layer 0: 9 > 5 > 2, expert 0 unused; layer 1: a tie goes to the lower
  // id; layer 2: 7 > 3.25 > 0.5.
  EXPECT_THAT(WarmRanks(p), ElementsAre(0, 2, 3, 1, 1, 2, 0, 0, 2, 0, 1, 3));
  EXPECT_THAT(HottestFirst(p), ElementsAre(3, 10, 1, 8, 2, 4, 5, 11));
}

class HeatKeeperTest : public ::testing::Test {
 protected:
  HeatKeeperOptions Options() const {
    HeatKeeperOptions o;
    o.state_directory = dir_.path();
    o.fingerprint = 77;
    o.n_layer = 2;
    o.n_expert = 4;
    o.top_k = 2;
    o.half_life_tokens = 100;
    o.now_unix_s = [this] { return now_; };
    return o;
  }

  ScratchDir dir_;
  int64_t now_ = 1'764'000'000;
};

TEST_F(HeatKeeperTest, WithoutAStateDirectoryNothingIsKept) {
  HeatKeeperOptions o = Options();
  o.state_directory.clear();
  HeatKeeper keeper(o);
  EXPECT_TRUE(keeper.path().empty());
  EXPECT_FALSE(keeper.started_from().has_value());
  EXPECT_THAT(keeper.Describe(), StartsWith("not kept"));
  EXPECT_TRUE(keeper.Save().ok());
}

TEST_F(HeatKeeperTest, DecaysByTheTokensTheNewRowsStandFor) {
  HeatKeeper keeper(Options());
  EXPECT_THAT(keeper.Describe(), HasSubstr("cold start: no profile at"));
  // 100 tokens: layer 0 routes 200 rows (top-2), layer 1 as many.
  keeper.Absorb(std::vector<uint64_t>{150, 50, 0, 0, 0, 100, 100, 0});
  HeatProfile p = keeper.Current();
  EXPECT_DOUBLE_EQ(p.tokens, 100);
  EXPECT_THAT(p.counts, ElementsAre(150, 50, 0, 0, 0, 100, 100, 0));
  // 100 more tokens, one half-life: the old counts halve, the new add.
  keeper.Absorb(std::vector<uint64_t>{150, 250, 0, 0, 0, 200, 100, 100});
  p = keeper.Current();
  EXPECT_DOUBLE_EQ(p.tokens, 150);
  EXPECT_THAT(p.counts, ElementsAre(75, 225, 0, 0, 0, 150, 50, 100));
  // Nothing new: nothing decays.
  keeper.Absorb(std::vector<uint64_t>{150, 250, 0, 0, 0, 200, 100, 100});
  EXPECT_EQ(keeper.Current().counts, p.counts);
}

TEST_F(HeatKeeperTest, ASavedProfileIsWhereTheNextStartBegins) {
  {
    HeatKeeper keeper(Options());
    keeper.Absorb(std::vector<uint64_t>{10, 0, 4, 6, 0, 20, 0, 0});
    ASSERT_TRUE(keeper.Save().ok());
    now_ += 30;
    EXPECT_THAT(keeper.Describe(), HasSubstr("saved 30 s ago"));
  }
  HeatKeeper next(Options());
  ASSERT_TRUE(next.started_from().has_value());
  EXPECT_THAT(next.started_from()->counts, ElementsAre(10, 0, 4, 6, 0, 20, 0, 0));
  EXPECT_THAT(next.Describe(), StartsWith("loaded from " + next.path() + " (saved 2025-11-24"));
  EXPECT_THAT(next.Describe(), HasSubstr("10 tokens"));
  // Counting goes on from the loaded counts (the store's totals restart at 0).
  next.Absorb(std::vector<uint64_t>{0, 0, 0, 0, 0, 0, 0, 20});
  EXPECT_GT(next.Current().counts[0], 9.0);
  EXPECT_DOUBLE_EQ(next.Current().counts[7], 20);
}

TEST_F(HeatKeeperTest, ACorruptProfileMeansAColdStartAndIsReplacedAtTheNextSave) {
  std::string good;
  {
    HeatKeeper keeper(Options());
    keeper.Absorb(std::vector<uint64_t>{10, 0, 4, 6, 0, 20, 0, 0});
    ASSERT_TRUE(keeper.Save().ok());
    good = ReadFile(keeper.path());
  }
  const std::string path = HeatProfilePath(dir_.path(), 77);
  // Every length short of the whole file, and a few changed bytes.
  std::vector<std::string> bad;
  for (size_t n = 0; n < good.size(); n += 7) bad.push_back(good.substr(0, n));
  for (const size_t i : {0, 9, 17, 30, 70, 100}) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x20);
    bad.push_back(b);
  }
  for (const std::string& b : bad) {
    WriteFile(path, b);
    HeatKeeper keeper(Options());
    EXPECT_FALSE(keeper.started_from().has_value()) << b.size() << " bytes";
    EXPECT_THAT(keeper.Describe(), StartsWith("cold start: the saved profile was refused"));
    EXPECT_THAT(keeper.Describe(), HasSubstr(path));
  }
  HeatKeeper keeper(Options());
  keeper.Absorb(std::vector<uint64_t>{1, 0, 0, 0, 0, 0, 0, 1});
  ASSERT_TRUE(keeper.Save().ok());
  EXPECT_TRUE(HeatKeeper(Options()).started_from().has_value());
}

TEST_F(HeatKeeperTest, AnotherModelsProfileIsRefused) {
  {
    HeatKeeperOptions o = Options();
    o.n_expert = 8;  // same fingerprint, other shape: a hand-copied file
    HeatKeeper keeper(o);
    keeper.Absorb(std::vector<uint64_t>(16, 2));
    ASSERT_TRUE(keeper.Save().ok());
  }
  HeatKeeper keeper(Options());
  EXPECT_FALSE(keeper.started_from().has_value());
  EXPECT_THAT(keeper.Describe(), HasSubstr("2 layers of 8 experts; the model has 2 of 4"));
}

TEST_F(HeatKeeperTest, AFailedSaveIsReportedAndLeavesTheOldFile) {
  HeatKeeper keeper(Options());
  keeper.Absorb(std::vector<uint64_t>{1, 0, 0, 0, 0, 0, 0, 1});
  ASSERT_TRUE(keeper.Save().ok());
  const std::string before = ReadFile(keeper.path());
  // A directory where the temporary file would go makes the save fail
  // (modes would not: the tests may run as root).
  const std::string blocker = keeper.path() + ".tmp." + std::to_string(getpid());
  std::filesystem::create_directory(blocker);
  keeper.Absorb(std::vector<uint64_t>{5, 0, 0, 0, 0, 0, 0, 5});
  const absl::Status saved = keeper.Save();
  EXPECT_FALSE(saved.ok());
  EXPECT_THAT(keeper.Describe(), HasSubstr("the last save failed"));
  EXPECT_EQ(ReadFile(keeper.path()), before);
  std::filesystem::remove(blocker);
}

}  // namespace
}  // namespace moetier
