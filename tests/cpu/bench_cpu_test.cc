// moetier-bench-cpu end to end on a test vector: every SIMD level this
// processor has completes a run whose bandwidth probe reads more floats than
// a float accumulator can count one by one (4 · 2^24 on the scalar level).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

const char kBench[] = MOETIER_BINARY_DIR "/worker/bench/moetier-bench-cpu";

TEST(BenchCpuTest, EveryLevelMeasuresALargeBandwidthBuffer) {
  const std::string model = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.gguf";
  for (const char* level : {"scalar", "avx2", "avx512"}) {
    SCOPED_TRACE(level);
    const testing::ProgramResult r = testing::RunProgram(
        kBench, {"--model", model, "--threads", "1", "--simd", level, "--bandwidth-mib", "320",
                 "--decode-tokens", "2", "--prompt-tokens", "4", "--context", "2"});
    if (r.exit_code != 0 && r.err.find("does not support") != std::string::npos) continue;
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("RAM read bandwidth:"));
    EXPECT_THAT(r.out, HasSubstr("check: ok"));
  }
}

}  // namespace
}  // namespace moetier
