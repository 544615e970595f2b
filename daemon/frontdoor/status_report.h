// Builds the front door's Status message: the store's per-expert residency
// and heat, its counters, each worker's state (supervisor, status page,
// scheduler) and the request queue, gathered in one place so every RPC that
// reports status says the same thing.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "config/daemon_config.h"
#include "heat/heat_keeper.h"
#include "moetier/v1/moetier.pb.h"
#include "scheduler/request_scheduler.h"
#include "stats/daemon_stats.h"
#include "store/expert_store.h"
#include "supervisor/worker_supervisor.h"

namespace moetier {

class StatusReporter {
 public:
  // Every pointer must outlive the reporter; `supervisor` may be null.
  StatusReporter(const DaemonConfig& config, const ExpertStore* store,
                 const WorkerSupervisor* supervisor, const RequestScheduler* scheduler);

  // Where the heat profile came from, for Status.heat_profile; must outlive
  // the reporter. Call before the first Build.
  void set_heat_keeper(const HeatKeeper* keeper) { heat_keeper_ = keeper; }

  // Thread-safe. Heat decays between calls: an expert's heat is an
  // exponentially weighted rate of routed token rows (half-life kHeatHalfLifeS),
  // scaled so the hottest expert of the model is 1.
  v1::Status Build();

  static constexpr double kHeatHalfLifeS = 10.0;

 private:
  const DaemonConfig& config_;
  const ExpertStore* store_;
  const WorkerSupervisor* supervisor_;
  const RequestScheduler* scheduler_;
  const HeatKeeper* heat_keeper_ = nullptr;
  std::mutex mutex_;
  DaemonStatsCollector collector_;
  uint64_t start_ns_ = 0;
  uint64_t last_ns_ = 0;
  std::vector<uint64_t> last_routed_;
  std::vector<double> heat_;
};

}  // namespace moetier
