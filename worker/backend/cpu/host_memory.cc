#include "backend/cpu/host_memory.h"

#include <fstream>
#include <string>

namespace moetier::cpu {

size_t MemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace moetier::cpu
