#include <cmath>
#include <limits>

#include "commands/bench_command.h"
#include "gtest/gtest.h"
#include "render/format.h"
#include "render/json_writer.h"

namespace moetier::client {
namespace {

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{1} << 20), "1.0 MiB");
  EXPECT_EQ(FormatBytes((uint64_t{1} << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(FormatBytes(uint64_t{17716740096}), "16.5 GiB");
  EXPECT_EQ(FormatBytes(std::numeric_limits<uint64_t>::max()), "16.0 EiB");
}

TEST(FormatTest, CountsDurationsPercentages) {
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(12345), "12.3k");
  EXPECT_EQ(FormatCount(999999), "1.0M");
  EXPECT_EQ(FormatCount(1200000), "1.2M");
  EXPECT_EQ(FormatDuration(45.21), "45.2 s");
  EXPECT_EQ(FormatDuration(723), "12m 03s");
  EXPECT_EQ(FormatDuration(3723), "1h 02m 03s");
  EXPECT_EQ(FormatDuration(-1), "-");
  EXPECT_EQ(FormatPercent(0.912), "91.2%");
  EXPECT_EQ(FormatPercent(std::nullopt), "-");
  EXPECT_FALSE(HitRate(0, 0).has_value());
  EXPECT_DOUBLE_EQ(*HitRate(3, 1), 0.75);
}

TEST(JsonWriterTest, NestedDocument) {
  JsonWriter json;
  json.BeginObject();
  json.Key("name");
  json.String("a \"quoted\"\\path\n\x01");
  json.Key("n");
  json.Int(-3);
  json.Key("big");
  json.Uint(std::numeric_limits<uint64_t>::max());
  json.Key("rate");
  json.Double(0.1);
  json.Key("none");
  json.Double(std::nullopt);
  json.Key("nan");
  json.Double(std::nan(""));
  json.Key("list");
  json.BeginArray();
  json.Double(1.5);
  json.Bool(true);
  json.Null();
  json.EndArray();
  json.Key("empty");
  json.BeginObject();
  json.EndObject();
  json.Key("empty_list");
  json.BeginArray();
  json.EndArray();
  json.EndObject();
  EXPECT_EQ(json.Finish(),
            "{\n"
            "  \"name\": \"a \\\"quoted\\\"\\\\path\\n\\u0001\",\n"
            "  \"n\": -3,\n"
            "  \"big\": 18446744073709551615,\n"
            "  \"rate\": 0.1,\n"
            "  \"none\": null,\n"
            "  \"nan\": null,\n"
            "  \"list\": [\n"
            "    1.5,\n"
            "    true,\n"
            "    null\n"
            "  ],\n"
            "  \"empty\": {},\n"
            "  \"empty_list\": []\n"
            "}\n");
}

TEST(JsonWriterDeathTest, MisuseAborts) {
  EXPECT_DEATH(
      {
        JsonWriter json;
        json.BeginObject();
        json.Int(1);  // a value without a key
      },
      "check failed");
}

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(Median({})));
}

}  // namespace
}  // namespace moetier::client
