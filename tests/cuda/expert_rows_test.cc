// The device grouping's per-choice rows (backend/cuda/expert_rows.h) on the
// host, against the MoE block's host grouping (counts, offsets, then rows in
// choice order): the same row for every choice, so the device path gathers,
// computes and combines exactly the host path's rows. Invalid ids (the
// router's -1 for NaN probabilities, or ids past the experts) take the rows
// after every expert's. Runs on every machine.
#include "backend/cuda/expert_rows.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moetier::cuda {
namespace {

// The MoE block's grouping (CudaMoeBlock::RouteAndGroup), with invalid ids
// given the key n_expert.
std::vector<int32_t> HostRows(const std::vector<int32_t>& ids, int n_expert) {
  std::vector<int32_t> count(static_cast<size_t>(n_expert) + 1, 0);
  auto key = [&](int32_t e) { return e >= 0 && e < n_expert ? e : n_expert; };
  for (int32_t e : ids) ++count[static_cast<size_t>(key(e))];
  std::vector<int32_t> offset(count.size() + 1, 0);
  for (size_t e = 0; e < count.size(); ++e) offset[e + 1] = offset[e] + count[e];
  std::vector<int32_t> rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    rows[i] = offset[static_cast<size_t>(key(ids[i]))]++;
  }
  return rows;
}

TEST(ExpertRowsTest, EveryChoiceGetsTheHostGroupingsRow) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n_expert = 1 + static_cast<int>(rng() % 300);
    const int top_k = 1 + static_cast<int>(rng() % 8);
    const int n_tokens = 1 + static_cast<int>(rng() % 16);
    // Few experts in play at times, so that experts get many rows.
    const int spread = 1 + static_cast<int>(rng() % static_cast<unsigned>(n_expert));
    std::vector<int32_t> ids(static_cast<size_t>(n_tokens * top_k));
    for (int32_t& id : ids) {
      const unsigned roll = rng() % 50;
      id = roll == 0 ? -1 : roll == 1 ? n_expert : static_cast<int32_t>(rng() % spread);
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    const std::vector<int32_t> want = HostRows(ids, n_expert);
    const int n = static_cast<int>(ids.size());
    for (int i = 0; i < n; ++i) {
      const ExpertRow r = ExpertRowOf(ids.data(), n, n_expert, i);
      ASSERT_EQ(r.row, want[static_cast<size_t>(i)]) << "choice " << i;
      ASSERT_EQ(r.valid, ids[static_cast<size_t>(i)] >= 0 && ids[static_cast<size_t>(i)] < n_expert);
      // The rank counts the same expert's earlier choices, the rows all of them.
      int rank = 0, rows = 0;
      for (int c = 0; c < n; ++c) {
        const bool same = ids[static_cast<size_t>(c)] == ids[static_cast<size_t>(i)] ||
                          (!r.valid && !(ids[static_cast<size_t>(c)] >= 0 &&
                                         ids[static_cast<size_t>(c)] < n_expert));
        rows += same;
        rank += same && c < i;
      }
      ASSERT_EQ(r.rank, rank);
      ASSERT_EQ(r.expert_rows, rows);
    }
  }
}

// The jobs BuildExpertJobs makes from the rows (a job starts at every
// kCudaGemvMaxBatch-th row of an expert, numbered in row order) cover each
// valid row exactly once, inside one expert, at most 8 rows each.
TEST(ExpertRowsTest, JobsFromTheRowsCoverEachValidRowOnce) {
  constexpr int kMaxRows = 8;  // kCudaGemvMaxBatch
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n_expert = 2 + static_cast<int>(rng() % 20);
    const int top_k = 1 + static_cast<int>(rng() % 8);
    const int n_tokens = 1 + static_cast<int>(rng() % 40);
    std::vector<int32_t> ids(static_cast<size_t>(n_tokens * top_k));
    for (int32_t& id : ids) id = rng() % 30 == 0 ? -1 : static_cast<int32_t>(rng() % n_expert);
    const int n = static_cast<int>(ids.size());
    std::vector<int> starts(static_cast<size_t>(n), 0);
    std::vector<ExpertRow> rows(static_cast<size_t>(n));
    std::vector<int32_t> expert_of_row(static_cast<size_t>(n), -1);
    for (int i = 0; i < n; ++i) {
      const ExpertRow r = ExpertRowOf(ids.data(), n, n_expert, i);
      rows[static_cast<size_t>(i)] = r;
      if (r.valid) expert_of_row[static_cast<size_t>(r.row)] = ids[static_cast<size_t>(i)];
      starts[static_cast<size_t>(r.row)] = r.valid && r.rank % kMaxRows == 0;
    }
    std::vector<int> covered(static_cast<size_t>(n), 0);
    int n_jobs = 0;
    for (int i = 0; i < n; ++i) {
      const ExpertRow& r = rows[static_cast<size_t>(i)];
      if (!starts[static_cast<size_t>(r.row)]) continue;
      ++n_jobs;
      const int job_rows = std::min(kMaxRows, r.expert_rows - r.rank);
      ASSERT_GE(job_rows, 1);
      for (int k = 0; k < job_rows; ++k) {
        ASSERT_EQ(expert_of_row[static_cast<size_t>(r.row + k)], ids[static_cast<size_t>(i)]);
        ++covered[static_cast<size_t>(r.row + k)];
      }
    }
    int valid_rows = 0;
    for (int row = 0; row < n; ++row) {
      const bool valid = expert_of_row[static_cast<size_t>(row)] >= 0;
      valid_rows += valid;
      ASSERT_EQ(covered[static_cast<size_t>(row)], valid ? 1 : 0) << "row " << row;
    }
    // Valid rows come first.
    for (int row = 0; row < valid_rows; ++row) {
      ASSERT_GE(expert_of_row[static_cast<size_t>(row)], 0);
    }
    // ceil(rows / 8) jobs per used expert.
    std::vector<int> per_expert(static_cast<size_t>(n_expert), 0);
    for (int32_t id : ids) {
      if (id >= 0) ++per_expert[static_cast<size_t>(id)];
    }
    int want_jobs = 0;
    for (int c : per_expert) want_jobs += (c + kMaxRows - 1) / kMaxRows;
    ASSERT_EQ(n_jobs, want_jobs);
  }
}

}  // namespace
}  // namespace moetier::cuda
