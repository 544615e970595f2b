#include "config/auto_devices.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace moetier {

std::vector<std::string> AutoDevices(const GpuProbe& probe, std::string* why) {
  if (!probe.workers_have_cuda) {
    *why = "this build's workers have no CUDA";
    return {"cpu"};
  }
  int gpus = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it(probe.driver_gpus_dir, error), end;
       !error && it != end; it.increment(error)) {
    ++gpus;
  }
  if (gpus == 0) {
    *why = absl::StrFormat("no NVIDIA GPU found (%s is empty or missing)", probe.driver_gpus_dir);
    return {"cpu"};
  }
  if (probe.cuda_visible_devices != nullptr) {
    const std::vector<std::string> visible =
        absl::StrSplit(probe.cuda_visible_devices, ',', absl::SkipWhitespace());
    if (static_cast<int>(visible.size()) < gpus) gpus = static_cast<int>(visible.size());
    if (gpus == 0) {
      *why = "CUDA_VISIBLE_DEVICES hides every GPU";
      return {"cpu"};
    }
  }
  std::vector<std::string> devices;
  for (int i = 0; i < gpus; ++i) devices.push_back(absl::StrFormat("cuda:%d", i));
  *why = absl::StrFormat("%d NVIDIA GPU(s) found", gpus);
  return devices;
}

GpuProbe LocalGpuProbe() {
  GpuProbe probe;
  probe.cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES");
#ifdef MOETIER_WORKERS_HAVE_CUDA
  probe.workers_have_cuda = true;
#endif
  return probe;
}

std::string ResolveAutoDevices(DaemonConfig& config, const GpuProbe& probe) {
  const bool automatic =
      config.devices_size() == 0 || (config.devices_size() == 1 && config.devices(0) == "auto");
  if (!automatic) return "";
  std::string why;
  const std::vector<std::string> devices = AutoDevices(probe, &why);
  config.clear_devices();
  for (const std::string& d : devices) config.add_devices(d);
  return absl::StrFormat("devices: auto -> %s (%s)", absl::StrJoin(devices, ", "), why);
}

}  // namespace moetier
