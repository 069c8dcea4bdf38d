// SPDX-License-Identifier: BSD-3-Clause
// Whether a GPU can run kernels built for a TORCH_CUDA_ARCH_LIST, without a GPU or the CUDA
// runtime, so tests/cpp/cuda_build_test.cpp checks the rule on the CPU.
#pragma once

#include <cctype>
#include <string_view>

namespace custom::cuda {

// `archs` holds entries such as "8.0", "9.0a" or "9.0+PTX", separated by spaces or semicolons. A
// cubin runs on GPUs of its major version with the same or a higher minor (8.0 on 8.6); an
// arch-specific one ("a") only on its own; PTX is compiled by the driver for its own and newer GPUs.
inline bool architectures_cover(std::string_view archs, int major, int minor) {
  const auto digits = [](std::string_view text, size_t& at) {
    int value = 0;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) != 0) {
      value = value * 10 + (text[at++] - '0');
    }
    return value;
  };
  const int device = major * 10 + minor;
  size_t at = 0;
  while (at < archs.size()) {
    const size_t end = archs.find_first_of(" ;", at);
    const std::string_view entry = archs.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? archs.size() : end + 1;
    size_t pos = 0;
    const int arch_major = digits(entry, pos);
    if (pos == 0 || pos >= entry.size() || entry[pos] != '.') {
      continue;
    }
    ++pos;
    const int arch = arch_major * 10 + digits(entry, pos);
    const bool arch_specific = pos < entry.size() && entry[pos] == 'a';
    const bool ptx = entry.substr(pos).find("+PTX") != std::string_view::npos;
    if ((ptx && arch <= device) || arch == device || (!arch_specific && arch_major == major && arch <= device)) {
      return true;
    }
  }
  return false;
}

}  // namespace custom::cuda
