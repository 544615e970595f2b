// binary16 and bfloat16 conversions against slow references built from the
// IEEE definitions (value tables, exact double arithmetic), not from bit tricks.
#include "gguf/tensor/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

// Value of a binary16 pattern from its definition.
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0x1F) {
    return mant == 0 ? sign * std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::quiet_NaN();
  }
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25);
}

// Nearest binary16 with ties to even, found by binary search over the sorted
// table of non-negative values. Entry 0x7C00 stands for 2^16 (the next value
// the format would have), so values that round up to it become inf.
class HalfReference {
 public:
  HalfReference() : values_(0x7C01) {
    for (uint32_t h = 0; h < 0x7C00; ++h) values_[h] = HalfValue(static_cast<uint16_t>(h));
    values_[0x7C00] = 65536.0;
  }

  uint16_t Convert(float f) const {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) return sign | 0x7E00;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65536.0) return sign | 0x7C00;
    // Largest index with values_[lo] <= a.
    uint32_t lo = 0;
    uint32_t hi = 0x7C00;
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (values_[mid] <= a) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    if (values_[lo] == a) return static_cast<uint16_t>(sign | lo);
    // Compare a with the midpoint as 2a vs lo+hi: both sides are exact doubles.
    const double twice = 2.0 * a;
    const double sum = values_[lo] + values_[lo + 1];
    uint32_t pick;
    if (twice < sum) {
      pick = lo;
    } else if (twice > sum) {
      pick = lo + 1;
    } else {
      pick = (lo & 1) ? lo + 1 : lo;
    }
    return static_cast<uint16_t>(sign | pick);
  }

  double value(uint32_t h) const { return values_[h]; }

 private:
  std::vector<double> values_;
};

const HalfReference& Ref() {
  static const HalfReference* ref = new HalfReference();
  return *ref;
}

void ExpectHalfMatches(float f) {
  const uint16_t got = FloatToHalf(f);
  const uint16_t want = Ref().Convert(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(std::isnan(HalfToFloat(got))) << "f bits 0x" << std::hex << std::bit_cast<uint32_t>(f);
    EXPECT_EQ(got & 0x8000, want & 0x8000);
    return;
  }
  EXPECT_EQ(got, want) << "f=" << f << " bits 0x" << std::hex << std::bit_cast<uint32_t>(f);
}

TEST(HalfTest, EveryPatternDecodesToItsIeeeValue) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const double want = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(HalfTest, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const uint16_t back = FloatToHalf(HalfToFloat(bits));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      // NaN stays a NaN of the same sign (the payload is not kept).
      ASSERT_EQ(back & 0x7C00, 0x7C00) << std::hex << h;
      ASSERT_NE(back & 0x3FF, 0) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
    } else {
      ASSERT_EQ(back, bits) << std::hex << h;
    }
  }
}

TEST(HalfTest, MidpointsAndTheirNeighboursRoundLikeReference) {
  // Every midpoint between consecutive halves is a float (12 significant
  // bits); it and the floats on either side cover ties to even exactly.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double mid = (Ref().value(h) + Ref().value(h + 1)) / 2.0;
    const auto midf = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(midf), mid);
    for (float f : {midf, std::nextafter(midf, 0.0f), std::nextafter(midf, 1e30f),
                    static_cast<float>(Ref().value(h))}) {
      ExpectHalfMatches(f);
      ExpectHalfMatches(-f);
    }
    if (HasFailure()) return;
  }
}

TEST(HalfTest, EdgeValuesRoundLikeReference) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float edges[] = {
      0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
      65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e10f,
      0x1p-24f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f), std::nextafter(0x1p-25f, 0.0f),
      0x1.8p-24f, 0x1.8p-23f, 0x1p-14f, std::nextafter(0x1p-14f, 0.0f), 0x1.ffcp-15f,
      1.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-10f + 0x1p-11f, 1.0f / 3.0f, 0.1f,
  };
  for (float f : edges) {
    ExpectHalfMatches(f);
    ExpectHalfMatches(-f);
  }
  // Spot checks that do not depend on the reference.
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);     // tie above the max rounds to inf
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);     // tie to even: 0
  EXPECT_EQ(FloatToHalf(0x1.8p-24f), 0x0002);   // 1.5 ulp: tie to even: 2
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(HalfTest, RandomFloatsRoundLikeReference) {
  std::mt19937 rng(12345);
  // Uniform bit patterns cover all exponents; a second stream concentrates on
  // the half range, where most of the interesting rounding happens.
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> half_range(0x33000000u - 0x100000u, 0x47800000u + 0x100000u);
  for (int i = 0; i < 200000; ++i) {
    ExpectHalfMatches(std::bit_cast<float>(any_bits(rng)));
    const uint32_t b = half_range(rng) | (any_bits(rng) & 0x80000000u);
    ExpectHalfMatches(std::bit_cast<float>(b));
    if (HasFailure()) return;
  }
}

// bfloat16: nearest value with ties to even; 0x7F80 (inf) stands for 2^128.
uint16_t ReferenceBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  const uint32_t lo = mag >> 16;
  const double a = std::fabs(static_cast<double>(f));
  const double lo_value = static_cast<double>(std::bit_cast<float>(lo << 16));
  if (lo_value == a) return static_cast<uint16_t>(sign | lo);
  const double hi_value = (lo + 1 == 0x7F80) ? std::ldexp(1.0, 128)
                                             : static_cast<double>(std::bit_cast<float>((lo + 1) << 16));
  const double twice = 2.0 * a;
  const double sum = lo_value + hi_value;
  uint32_t pick;
  if (twice < sum) {
    pick = lo;
  } else if (twice > sum) {
    pick = lo + 1;
  } else {
    pick = (lo & 1) ? lo + 1 : lo;
  }
  return static_cast<uint16_t>(sign | pick);
}

void ExpectBf16Matches(float f) {
  const uint16_t got = FloatToBf16(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(std::isnan(Bf16ToFloat(got)));
    EXPECT_EQ(std::signbit(Bf16ToFloat(got)), std::signbit(f));
    return;
  }
  EXPECT_EQ(got, ReferenceBf16(f)) << "f=" << f << " bits 0x" << std::hex << std::bit_cast<uint32_t>(f);
}

TEST(Bf16Test, EveryPatternDecodesAndRoundTrips) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = Bf16ToFloat(bits);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    const uint16_t back = FloatToBf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bf16ToFloat(back))) << std::hex << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << b;
    } else {
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

TEST(Bf16Test, RoundingMatchesReference) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float edges[] = {
      0.0f, kInf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
      std::bit_cast<float>(0x3F808000u),  // tie, even below: stays 0x3F80
      std::bit_cast<float>(0x3F818000u),  // tie, odd below: goes to 0x3F82
      std::bit_cast<float>(0x3F808001u), std::bit_cast<float>(0x3F807FFFu),
      std::bit_cast<float>(0x7F7F8000u),  // tie above the max rounds to inf
      std::bit_cast<float>(0x7F7F7FFFu), std::bit_cast<float>(0x00008000u),
      std::bit_cast<float>(0x7F800001u),  // signalling NaN whose payload is in the low bits
  };
  for (float f : edges) {
    ExpectBf16Matches(f);
    ExpectBf16Matches(-f);
  }
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x7F7F8000u)), 0x7F80);
  std::mt19937 rng(777);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    // Half the samples are forced onto a tie to exercise ties to even.
    uint32_t b = any_bits(rng);
    if (i & 1) b = (b & 0xFFFF0000u) | 0x8000u;
    ExpectBf16Matches(std::bit_cast<float>(b));
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace moetier
