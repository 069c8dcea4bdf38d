// SPDX-License-Identifier: BSD-3-Clause
#include "kernels/cpu/streaming_threshold.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <c10/util/Exception.h>

namespace custom::cpu {
namespace {

constexpr int64_t kFallbackCacheBytes = int64_t{32} << 20;

// "32768K" -> 33554432; 0 if unreadable.
int64_t parse_cache_size(const std::string& text) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || value <= 0) {
    return 0;
  }
  const int64_t unit = *end == 'K' ? 1 << 10 : *end == 'M' ? 1 << 20 : *end == 'G' ? 1 << 30 : 1;
  return static_cast<int64_t>(value) * unit;
}

// The largest cache level that CPU 0 reports in sysfs: what the kernel says this machine (or
// VM) has, where cpuid through a hypervisor may report the host's whole cache instead.
int64_t last_level_cache_bytes() {
  int best_level = 0;
  int64_t best_bytes = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size)) {
      continue;
    }
    if (const int64_t bytes = parse_cache_size(size); bytes > 0 && level >= best_level) {
      best_level = level;
      best_bytes = bytes;
    }
  }
  if (best_bytes > 0) {
    return best_bytes;
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (const long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE); bytes > 0) {
    return bytes;
  }
#endif
  return kFallbackCacheBytes;
}

int64_t from_environment_or_cache() {
  const char* text = std::getenv("CUSTOM_OPS_CPU_STREAMING_MIN_BYTES");
  if (text == nullptr || *text == '\0') {
    return last_level_cache_bytes();
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 0) {
    TORCH_WARN(
        "custom_ops: ignoring CUSTOM_OPS_CPU_STREAMING_MIN_BYTES=", text,
        " (expected a number of bytes >= 0); using the last-level cache size");
    return last_level_cache_bytes();
  }
  return static_cast<int64_t>(value);
}

}  // namespace

int64_t streaming_min_bytes() {
  static const int64_t bytes = from_environment_or_cache();
  return bytes;
}

}  // namespace custom::cpu
