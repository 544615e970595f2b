// Where a routed choice's row goes when a batch's (token, choice) pairs are
// grouped by expert: experts ascending, and within an expert the pairs in
// their order t * top_k + j, which is the order in which the MoE block
// groups them on the host. A choice whose id is not an expert (the router
// gives -1 for non-finite probabilities) sorts after every expert's rows.
//
// Plain C++ (the function is __host__ __device__ under nvcc): the device
// grouping (BuildExpertJobs) evaluates it per choice, and
// tests/cuda/expert_rows_test.cc checks it against the host grouping on any
// machine. O(n_choices) per choice, for the few dozen choices of a decode
// step.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace moetier::cuda {

struct ExpertRow {
  int32_t row = 0;           // the grouped row of the choice
  int32_t rank = 0;          // its place among its expert's rows
  int32_t expert_rows = 0;   // rows of its expert
  bool valid = false;        // the id is an expert
};

MOETIER_HOST_DEVICE inline ExpertRow ExpertRowOf(const int32_t* ids, int n_choices, int n_expert,
                                                 int i) {
  // Invalid ids share the key n_expert, after every expert.
  auto key = [&](int c) {
    const int32_t e = ids[c];
    return e >= 0 && e < n_expert ? e : n_expert;
  };
  const int32_t mine = key(i);
  ExpertRow r;
  r.valid = mine < n_expert;
  for (int c = 0; c < n_choices; ++c) {
    const int32_t k = key(c);
    if (k < mine) ++r.row;
    if (k == mine) {
      if (c < i) ++r.rank;
      ++r.expert_rows;
    }
  }
  r.row += r.rank;
  return r;
}

}  // namespace moetier::cuda
