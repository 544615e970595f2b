// devices: "auto": one worker per NVIDIA GPU this machine shows, when the
// workers were built with CUDA, else one CPU worker.
#pragma once

#include <string>
#include <vector>

#include "config/daemon_config.h"

namespace moetier {

struct GpuProbe {
  // One entry per GPU the driver knows (/proc/driver/nvidia/gpus/<pci id>).
  std::string driver_gpus_dir = "/proc/driver/nvidia/gpus";
  // $CUDA_VISIBLE_DEVICES as the daemon sees it (workers inherit it):
  // nullptr when unset. Set, it limits the GPUs to its entries.
  const char* cuda_visible_devices = nullptr;
  bool workers_have_cuda = false;
};

// What the workers run on when no device is chosen: cuda:0 .. cuda:N-1, or
// {"cpu"}. `why` says how that was decided, for the log.
std::vector<std::string> AutoDevices(const GpuProbe& probe, std::string* why);

// The probe of this machine and build.
GpuProbe LocalGpuProbe();

// Replaces an empty device list or the single entry "auto" with
// AutoDevices(probe); leaves an explicit list as it is. Returns the log
// line for what it chose, or "" when nothing was automatic.
std::string ResolveAutoDevices(DaemonConfig& config, const GpuProbe& probe);

}  // namespace moetier
