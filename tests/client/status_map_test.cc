#include "render/status_map.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "fake_moetier_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::AddSampleGpuWorker;
using testing::SampleStatus;

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n'); }

TEST(HeatLevelTest, FiveLevelsFromUnusedToHot) {
  EXPECT_EQ(HeatLevel(0.0f), 0);
  EXPECT_EQ(HeatLevel(-1.0f), 0);
  EXPECT_EQ(HeatLevel(0.01f), 1);
  EXPECT_EQ(HeatLevel(0.2499f), 1);
  EXPECT_EQ(HeatLevel(0.25f), 2);
  EXPECT_EQ(HeatLevel(0.5f), 3);
  EXPECT_EQ(HeatLevel(0.75f), 4);
  EXPECT_EQ(HeatLevel(1.0f), 4);
}

TEST(RenderCellTest, PlainCellsAreLettersUpperCaseWhenHot) {
  const MapStyle plain;
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_VRAM, 0.9f, plain), "V");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_VRAM, 0.2f, plain), "v");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_RAM, 0.5f, plain), "R");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_RAM, 0.0f, plain), "r");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_DISK, 0.6f, plain), "!");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_DISK, 0.4f, plain), ".");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_UNSPECIFIED, 1.0f, plain), "?");
}

TEST(RenderCellTest, ColourCellsShowTierByGlyphAndHeatByColour) {
  MapStyle ascii;
  ascii.color = true;
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_VRAM, 1.0f, ascii), "\x1b[1;31m#\x1b[0m");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_RAM, 0.0f, ascii), "\x1b[90m+\x1b[0m");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_DISK, 0.3f, ascii), "\x1b[36m.\x1b[0m");
  MapStyle blocks = ascii;
  blocks.unicode = true;
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_VRAM, 0.6f, blocks), "\x1b[33m\u2588\x1b[0m");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_RAM, 0.1f, blocks), "\x1b[34m\u2592\x1b[0m");
  EXPECT_EQ(RenderCell(v1::EXPERT_TIER_DISK, 1.0f, blocks), "\x1b[1;31m\u2591\x1b[0m");
}

TEST(RenderStatusMapTest, PlainMapOfAKnownStatus) {
  const std::string expected =
      "model     qwen3moe, 2 layers x 20 experts (top 2), vocab 8\n"
      "          /models/tiny.gguf\n"
      "store     cache: 4.0 GiB of experts; RAM holds 1.0 GiB of a 3.0 GiB budget\n"
      "uptime    1h 02m 05s\n"
      "\n"
      "experts   0                16\n"
      "layer 0   VVVvrrRRRrrr!!!. ..!!  vram 4 ram 8 disk 8\n"
      "layer 1   rrrrrRrrrrrrrrrr rrrr  vram 0 ram 20 disk 0\n"
      "legend    V v in VRAM   R r in RAM   ! . on disk only   ? unknown\n"
      "          upper case and ! = hot: recent use >= 50% of the hottest expert's\n"
      "\n"
      "experts   VRAM 4 (10.0%)   RAM 28 (70.0%)   disk 8 (20.0%)   of 40\n"
      "hits      VRAM - (no lookups yet)   RAM 90.0% (900 hits, 100 misses)\n"
      "moved     disk -> RAM 5.0 MiB at 1.0 MiB/s   RAM -> VRAM 0 B   evictions 7\n"
      "queue     active 1/16   queued 0/64   completed 12   rejected 0   cancelled 2\n"
      "workers   #0 cpu ready, pid 4242, 12.5 tok/s, served 5, restarts 0, heartbeat 120 ms "
      "ago\n";
  EXPECT_EQ(RenderStatusMap(SampleStatus(), MapStyle()), expected);
}

// A dense layer (glm4moe's first) has no experts to place: it says so and
// counts toward no total.
TEST(RenderStatusMapTest, ADenseLayerSaysItHasNoExperts) {
  v1::Status status = SampleStatus();
  status.mutable_layers(0)->Clear();
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("layer 0   dense: no routed experts\n"));
  EXPECT_THAT(map, HasSubstr("layer 1   rrrrrRrrrrrrrrrr rrrr  vram 0 ram 20 disk 0\n"));
  EXPECT_THAT(map,
              HasSubstr("experts   VRAM 0 (0.0%)   RAM 20 (100.0%)   disk 0 (0.0%)   of 20\n"));
}

TEST(RenderStatusMapTest, PlainMapHasNoEscapeSequences) {
  EXPECT_THAT(RenderStatusMap(SampleStatus(), MapStyle()), Not(HasSubstr("\x1b")));
}

TEST(RenderStatusMapTest, ColourMapSwitchesColourOnlyWhereHeatChanges) {
  MapStyle style;
  style.color = true;
  style.unicode = true;
  const std::string map = RenderStatusMap(SampleStatus(), style);
  const std::vector<std::string> lines = Lines(map);
  const auto row = std::find_if(lines.begin(), lines.end(),
                                [](const std::string& l) { return l.rfind("layer 1", 0) == 0; });
  ASSERT_NE(row, lines.end());
  // Layer 1: cold, one hot expert (5), cold again, then the reset.
  EXPECT_EQ(Count(*row, "\x1b["), 4u) << *row;
  EXPECT_EQ(Count(*row, "\u2592"), 20u);
  EXPECT_THAT(*row, HasSubstr("\x1b[90m\u2592\u2592\u2592\u2592\u2592\x1b[1;31m\u2592\x1b[90m"));
  EXPECT_THAT(*row, HasSubstr("\x1b[0m  vram 0 ram 20 disk 0"));
  // The legend explains glyphs and colours with coloured samples.
  EXPECT_THAT(map, HasSubstr("in VRAM"));
  EXPECT_THAT(map, HasSubstr("colour = heat"));
  EXPECT_THAT(map, HasSubstr("\x1b[36m\u2588\x1b[0m <50%"));
  EXPECT_THAT(map, Not(HasSubstr("upper case")));
}

TEST(RenderStatusMapTest, WideLayersWrapInWholeGroups) {
  MapStyle style;
  style.width = 30;
  const std::vector<std::string> lines = Lines(RenderStatusMap(SampleStatus(), style));
  const auto first = std::find(lines.begin(), lines.end(), "layer 0   VVVvrrRRRrrr!!!.");
  ASSERT_NE(first, lines.end());
  ASSERT_NE(first + 1, lines.end());
  EXPECT_EQ(*(first + 1), "     +16  ..!!              vram 4 ram 8 disk 8");
  EXPECT_NE(std::find(lines.begin(), lines.end(), "experts   0"), lines.end());
}

TEST(RenderStatusMapTest, ManyLayersWidenTheLabel) {
  v1::Status status = SampleStatus();
  while (status.layers_size() < 120) *status.add_layers() = status.layers(1);
  status.set_n_layer(120);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("\nlayer   0 VVVv"));
  EXPECT_THAT(map, HasSubstr("\nlayer 119 rrrr"));
  EXPECT_THAT(map, HasSubstr("of 2400\n"));
}

TEST(RenderStatusMapTest, NoLayersYetSaysSo) {
  v1::Status status = SampleStatus();
  status.clear_layers();
  status.set_preload_fraction(0.25);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("no residency map yet"));
  EXPECT_THAT(map, HasSubstr("preload 25.0%"));
  EXPECT_THAT(map, Not(HasSubstr("legend")));
}

TEST(RenderStatusMapTest, GpuWorkersShowTheirCacheAndRestarts) {
  v1::Status status = SampleStatus();
  v1::WorkerStatus* w = AddSampleGpuWorker(status);
  w->set_state("loading");
  w->set_pid(0);
  w->set_restarts(2);
  w->set_last_exit("killed by signal 9");
  w->set_heartbeat_age_ms(-1);
  status.mutable_vram()->set_hits(3);
  status.mutable_vram()->set_misses(1);
  const std::string map = RenderStatusMap(status, MapStyle());
  // The worker's line, then its cache's line; the rate moves to the latter.
  EXPECT_THAT(map, HasSubstr("          #1 cuda:0 loading, no process, served 3, restarts 2; "
                             "last exit: killed by signal 9\n"
                             "             VRAM cache 6.0 GiB, 4.5 GiB resident   hits 75.0%   "
                             "misses 100 (40 on host)   prefetch 80 issued, 56 used (70.0%), 10 "
                             "wasted   copied 3.0 GiB at 12.9 GB/s   31.5 tok/s\n"));
  EXPECT_THAT(map, HasSubstr("hits      VRAM 75.0% (3 hits, 1 misses)"));
  EXPECT_THAT(map, HasSubstr("RAM -> VRAM 3.0 GiB"));
  // The cpu worker has no cache, so no cache line, and keeps its rate.
  EXPECT_EQ(Count(map, "VRAM cache"), 1u);
  EXPECT_THAT(map, HasSubstr("#0 cpu ready, pid 4242, 12.5 tok/s, served 5"));
}

TEST(RenderStatusMapTest, ACacheLineFollowsEachWorkerFromItsOwnCounters) {
  v1::Status status = SampleStatus();
  AddSampleGpuWorker(status);
  v1::WorkerStatus* w = status.add_workers();
  w->set_index(2);
  w->set_device("cuda:1");
  w->set_state("ready");
  w->set_pid(4444);
  w->set_expert_cache_bytes(uint64_t{3} << 29);
  w->mutable_vram()->set_resident_bytes(uint64_t{1} << 20);
  w->mutable_vram()->set_hits(12345);
  w->mutable_vram()->set_misses(15);
  w->set_misses_on_host(2);
  w->set_prefetch_issued(1200000);
  w->set_prefetch_used(300000);
  w->set_prefetch_wasted(7);
  w->set_bytes_copied(uint64_t{5} << 20);
  w->set_copy_bytes_per_s(2.5e9);
  const std::vector<std::string> lines = Lines(RenderStatusMap(status, MapStyle()));
  const auto second = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.rfind("          #2 cuda:1 ready", 0) == 0;
  });
  ASSERT_NE(second, lines.end());
  ASSERT_NE(second + 1, lines.end());
  EXPECT_EQ(*(second + 1),
            "             VRAM cache 1.5 GiB, 1.0 MiB resident   hits 99.9%   misses 15 (2 on "
            "host)   prefetch 1.2M issued, 300.0k used (25.0%), 7 wasted   copied 5.0 MiB at "
            "2.5 GB/s");
  EXPECT_EQ(*(second - 1),
            "             VRAM cache 6.0 GiB, 4.5 GiB resident   hits 75.0%   misses 100 (40 on "
            "host)   prefetch 80 issued, 56 used (70.0%), 10 wasted   copied 3.0 GiB at 12.9 "
            "GB/s   31.5 tok/s");
}

TEST(RenderStatusMapTest, AnIdleCacheShowsDashesAndNoRate) {
  v1::Status status = SampleStatus();
  v1::WorkerStatus* w = status.add_workers();
  w->set_index(1);
  w->set_device("cuda:0");
  w->set_state("ready");
  w->set_pid(4343);
  w->set_expert_cache_bytes(uint64_t{2} << 30);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("\n             VRAM cache 2.0 GiB, 0 B resident   hits -   misses 0 "
                             "(0 on host)   prefetch 0 issued, 0 used (-), 0 wasted   copied 0 "
                             "B\n"));
}

TEST(RenderStatusMapTest, ACpuWorkersCacheIsNamedAsRamSlots) {
  v1::Status status = SampleStatus();
  v1::WorkerStatus* w = status.add_workers();
  w->set_index(1);
  w->set_device("cpu");
  w->set_state("ready");
  w->set_expert_cache_bytes(uint64_t{1} << 30);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("\n             RAM slot cache 1.0 GiB, 0 B resident"));
  EXPECT_THAT(map, Not(HasSubstr("VRAM cache")));
}

TEST(RenderStatusMapTest, AGpuWorkerWithoutACacheHasNoCacheLine) {
  v1::Status status = SampleStatus();
  v1::WorkerStatus* w = AddSampleGpuWorker(status);
  w->set_expert_cache_bytes(0);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, Not(HasSubstr("VRAM cache")));
  EXPECT_THAT(map, HasSubstr("#1 cuda:0 ready, pid 4343, 31.5 tok/s, served 3, restarts 0"));
}

TEST(RenderStatusMapTest, EachWorkerShowsWhatASequencesStateTakes) {
  v1::Status status = SampleStatus();
  v1::WorkerStatus* hybrid = status.add_workers();
  hybrid->set_index(1);
  hybrid->set_device("cpu");
  hybrid->set_state("ready");
  // Qwen3.6-35B-A3B: 10 attention layers of 2 KV heads x 256 dims in fp32,
  // 30 DeltaNet layers of conv and delta-rule state.
  hybrid->set_max_ctx(262144);
  hybrid->set_kv_bytes_per_token(40960);
  hybrid->set_recurrent_state_bytes(30 * (3 * 8192 + 32 * 128 * 128) * 4);
  v1::WorkerStatus* plain = status.add_workers();
  plain->set_index(2);
  plain->set_device("cpu");
  plain->set_state("ready");
  plain->set_max_ctx(4096);
  plain->set_kv_bytes_per_token(98304);
  // Qwen3-30B-A3B with a q8_0 cache: 48 layers x 4 KV heads x (K + V) x 136 bytes.
  v1::WorkerStatus* quantized = status.add_workers();
  quantized->set_index(3);
  quantized->set_device("cpu");
  quantized->set_state("ready");
  quantized->set_max_ctx(4096);
  quantized->set_kv_bytes_per_token(48 * 4 * 2 * 136);
  quantized->set_kv_type_k("q8_0");
  quantized->set_kv_type_v("q8_0");
  quantized->set_max_sequences(4);
  quantized->set_running_requests(3);
  quantized->set_prefix_cache_budget_bytes(1024ull << 20);
  quantized->set_prefix_cache_states(3);
  quantized->set_prefix_cache_bytes(96ull << 20);
  quantized->set_prompt_tokens_reused(4096);
  const std::string map = RenderStatusMap(status, MapStyle());
  EXPECT_THAT(map, HasSubstr("sequence state: KV 40.0 KiB per token x 262144 tokens = 10.0 GiB   "
                             "recurrent 62.8 MiB (+ 62.8 MiB checkpoint)"));
  EXPECT_THAT(map, HasSubstr("sequence state: KV 96.0 KiB per token x 4096 tokens = 384.0 MiB\n"));
  EXPECT_THAT(map, HasSubstr("sequence state: KV 51.0 KiB per token x 4096 tokens = 204.0 MiB "
                             "(keys q8_0, values q8_0)   x 4 sequences decoded together, 3 "
                             "running\n"));
  EXPECT_EQ(Count(map, "recurrent"), 1u) << "a model without recurrent layers shows none";
  EXPECT_THAT(map, HasSubstr("prefix cache: 3 states, 96.0 MiB of 1.0 GiB   4.1k prompt tokens "
                             "reused"));
  EXPECT_EQ(Count(map, "prefix cache"), 1u) << "only the worker with a budget shows one";
}

}  // namespace
}  // namespace moetier::client
