// The shared-memory contract: sizes, offsets, lock-freedom, ring behaviour
// and the checks a worker makes when it attaches.
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/spsc_ring.h"
#include "store/store_client.h"
#include "store/store_layout.h"
#include "store/worker_channel.h"

namespace moetier::store {
namespace {

using ::testing::HasSubstr;

TEST(StoreLayoutTest, SizesAndOffsetsAreFixed) {
  // Repeated at run time so a failing value is printed, not just refused.
  EXPECT_EQ(sizeof(SegmentHeader), 4096u);
  EXPECT_EQ(offsetof(SegmentHeader, hparams), 192u);
  EXPECT_EQ(offsetof(SegmentHeader, daemon), 320u);
  EXPECT_EQ(offsetof(SegmentHeader, doorbell), 384u);
  EXPECT_EQ(offsetof(SegmentHeader, counters), 448u);
  EXPECT_EQ(sizeof(ExpertEntry), 128u);
  EXPECT_EQ(offsetof(ExpertEntry, slice_offset), 20u);
  EXPECT_EQ(offsetof(ExpertEntry, pins), 32u);
  EXPECT_EQ(offsetof(ExpertEntry, hits), 64u);
  EXPECT_EQ(sizeof(LayerDesc), 192u);
  EXPECT_EQ(sizeof(DenseTensorEntry), 128u);
  EXPECT_EQ(sizeof(ExpertRequest), 16u);
  EXPECT_EQ(sizeof(ExpertCompletion), 16u);
  EXPECT_EQ(sizeof(RequestRing), 128u + 16u * kRingCapacity);
  EXPECT_EQ(offsetof(WorkerStatusPage, expert_cache_bytes), 192u);
  EXPECT_EQ(offsetof(WorkerStatusPage, vram_residency), 256u);
  EXPECT_EQ(sizeof(WorkerRegion), 20480u);
  EXPECT_EQ(sizeof(WorkerHello), 80u);
  EXPECT_EQ(sizeof(DaemonWelcome), 168u);
}

TEST(StoreLayoutTest, ContendedFieldsSitOnTheirOwnCacheLines) {
  EXPECT_EQ(alignof(ExpertEntry), 64u);
  EXPECT_EQ(offsetof(RequestRing, head) / 64, 0u);
  EXPECT_EQ(offsetof(RequestRing, tail) / 64, 1u);
  EXPECT_EQ(offsetof(WorkerStatusPage, heartbeat_ns) % 64, 0u);
  EXPECT_EQ(offsetof(SegmentHeader, doorbell) % 64, 0u);
  EXPECT_NE(offsetof(SegmentHeader, doorbell) / 64, offsetof(SegmentHeader, daemon) / 64);
}

TEST(StoreLayoutTest, SharedFieldsAreLockFree) {
  EXPECT_TRUE(std::atomic_ref<uint16_t>::is_always_lock_free);
  EXPECT_TRUE(std::atomic_ref<uint32_t>::is_always_lock_free);
  EXPECT_TRUE(std::atomic_ref<uint64_t>::is_always_lock_free);
}

TEST(StoreLayoutTest, ResidencyBitmapCoversEveryExpert) {
  EXPECT_EQ(ResidencyBit(kMaxLayers - 1, kMaxExpertsPerLayer - 1) / 64, kResidencyWords - 1);
  EXPECT_EQ(ResidencyBit(1, 0), kMaxExpertsPerLayer);
}

TEST(SpscRingTest, FillsDrainsAndWraps) {
  auto ring = std::make_unique<RequestRing>();
  std::memset(ring.get(), 0, sizeof(RequestRing));
  ExpertRequest r{};
  for (uint32_t round = 0; round < 3; ++round) {
    for (uint32_t i = 0; i < kRingCapacity; ++i) {
      r.sequence = round * 1000 + i;
      ASSERT_TRUE(RingPush(*ring, r)) << i;
    }
    EXPECT_FALSE(RingPush(*ring, r)) << "a full ring must refuse";
    EXPECT_EQ(RingSize(*ring), kRingCapacity);
    for (uint32_t i = 0; i < kRingCapacity; ++i) {
      ExpertRequest out{};
      ASSERT_EQ(RingPop(*ring, &out), RingPopResult::kValue);
      EXPECT_EQ(out.sequence, round * 1000 + i);
    }
    ExpertRequest out{};
    EXPECT_EQ(RingPop(*ring, &out), RingPopResult::kEmpty);
  }
}

TEST(SpscRingTest, ConsumerDetectsACorruptProducerIndex) {
  auto ring = std::make_unique<CompletionRing>();
  std::memset(ring.get(), 0, sizeof(CompletionRing));
  ring->head = kRingCapacity + 5;  // claims more than the ring holds
  ExpertCompletion out{};
  EXPECT_EQ(RingPop(*ring, &out), RingPopResult::kCorrupt);
  RingSkipAll(*ring);
  EXPECT_EQ(RingPop(*ring, &out), RingPopResult::kEmpty);
}

class StoreHeaderValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::memset(&h_, 0, sizeof(h_));
    h_.magic = kSegmentMagic;
    h_.layout_version = kLayoutVersion;
    h_.header_bytes = sizeof(SegmentHeader);
    h_.store_mode = static_cast<uint32_t>(StoreMode::kCache);
    h_.n_layer = 2;
    h_.n_expert = 4;
    h_.n_slot = 2;
    h_.n_dense = 1;
    h_.max_workers = kMaxWorkers;
    h_.ring_capacity = kRingCapacity;
    h_.worker_region_stride = sizeof(WorkerRegion);
    uint64_t at = kPageBytes;
    auto place = [&at](uint64_t bytes) {
      const uint64_t offset = AlignUp(at, kPageBytes);
      at = offset + bytes;
      return offset;
    };
    h_.layer_table_offset = place(2 * sizeof(LayerDesc));
    h_.expert_table_offset = place(8 * sizeof(ExpertEntry));
    h_.slot_table_offset = place(2 * sizeof(SlotDesc));
    h_.dense_table_offset = place(sizeof(DenseTensorEntry));
    h_.worker_region_offset = place(kMaxWorkers * sizeof(WorkerRegion));
    h_.dense_data_bytes = 100;
    h_.dense_data_offset = place(h_.dense_data_bytes);
    h_.slot_area_bytes = 2 * 8192;
    h_.slot_area_offset = place(h_.slot_area_bytes);
    h_.segment_bytes = at;
  }
  SegmentHeader h_;
};

TEST_F(StoreHeaderValidationTest, AcceptsAConsistentHeader) {
  EXPECT_TRUE(ValidateSegmentHeader(h_, h_.segment_bytes).ok());
}

TEST_F(StoreHeaderValidationTest, RefusesAnotherLayoutVersionWithTheFix) {
  h_.layout_version = kLayoutVersion + 1;
  const absl::Status s = ValidateSegmentHeader(h_, h_.segment_bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("layout version"));
  EXPECT_THAT(s.message(), HasSubstr("from one release"));
}

TEST_F(StoreHeaderValidationTest, RefusesAForeignSegment) {
  h_.magic = 0x1234;
  EXPECT_THAT(ValidateSegmentHeader(h_, h_.segment_bytes).message(),
              HasSubstr("not a moetier store segment"));
}

TEST_F(StoreHeaderValidationTest, RefusesRegionsOutsideTheSegment) {
  h_.slot_area_bytes += kPageBytes;
  EXPECT_THAT(ValidateSegmentHeader(h_, h_.segment_bytes).message(), HasSubstr("slot area"));
  SetUp();
  EXPECT_THAT(ValidateSegmentHeader(h_, h_.segment_bytes + 4096).message(),
              HasSubstr("segment has"));
  SetUp();
  h_.expert_table_offset += 8;  // misaligned
  EXPECT_THAT(ValidateSegmentHeader(h_, h_.segment_bytes).message(), HasSubstr("expert table"));
  SetUp();
  h_.n_expert = kMaxExpertsPerLayer + 1;
  EXPECT_FALSE(ValidateSegmentHeader(h_, h_.segment_bytes).ok());
}

}  // namespace
}  // namespace moetier::store
