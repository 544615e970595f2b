// When a start-up phase reports its progress: the first call, every
// `percent_step` of the total, at least every `interval_ns`, and the last
// (done == total). Bounded both ways: a fast phase logs at most
// 100 / percent_step + 2 lines, a slow one never stays silent longer than
// the interval. Times are given by the caller, so tests need no clock.
#pragma once

#include <cstdint>

namespace moetier {


class ProgressPacer {
 public:
  ProgressPacer(uint64_t total, uint64_t interval_ns, uint32_t percent_step = 5)
      : total_(total), interval_ns_(interval_ns), percent_step_(percent_step) {}

  // True when a report of `done` is due at `now_ns`; it then counts as sent.
  bool Due(uint64_t done, uint64_t now_ns) {
    const bool first = !reported_;
    const bool last = done >= total_ && !finished_;
    const bool step = Steps(done) > Steps(last_done_);
    const bool quiet = now_ns - last_ns_ >= interval_ns_;
    if (!first && !last && !step && !quiet) return false;
    if (finished_ && !first) return false;
    reported_ = true;
    finished_ = done >= total_;
    last_done_ = done;
    last_ns_ = now_ns;
    return true;
  }

 private:
  __extension__ typedef unsigned __int128 Uint128;  // done * 100 must not overflow

  uint64_t Steps(uint64_t done) const {
    if (total_ == 0 || percent_step_ == 0) return 0;
    return static_cast<uint64_t>(static_cast<Uint128>(done) * 100 /
                                 (static_cast<Uint128>(total_) * percent_step_));
  }

  uint64_t total_;
  uint64_t interval_ns_;
  uint32_t percent_step_;
  bool reported_ = false;
  bool finished_ = false;
  uint64_t last_done_ = 0;
  uint64_t last_ns_ = 0;
};

}  // namespace moetier
