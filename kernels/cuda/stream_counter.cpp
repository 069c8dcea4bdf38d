#include "kernels/cuda/stream_counter.h"

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include <cuda_runtime_api.h>

#include <c10/cuda/CUDAException.h>

namespace custom::cuda {
namespace {

// Keyed by the stream's handle and device (the legacy default stream has the same handle on
// every device). Never freed: 4 bytes a stream, and no CUDA call at process exit.
struct Counters {
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, unsigned int*> by_stream[C10_COMPILE_TIME_MAX_GPUS];
};

Counters& counters() {
  static auto* const instance = new Counters;
  return *instance;
}

}  // namespace

unsigned int* stream_counter(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &status));
  if (status != cudaStreamCaptureStatusNone) {
    return nullptr;
  }
  auto& all = counters();
  const std::lock_guard<std::mutex> lock(all.mutex);
  auto& counter = all.by_stream[stream.device_index()][reinterpret_cast<std::uintptr_t>(stream.stream())];
  if (counter == nullptr) {
    unsigned int* fresh = nullptr;
    C10_CUDA_CHECK(cudaMalloc(&fresh, sizeof(unsigned int)));
    // Queued on the stream itself: zero before the first kernel that counts on it.
    C10_CUDA_CHECK(cudaMemsetAsync(fresh, 0, sizeof(unsigned int), stream.stream()));
    counter = fresh;
  }
  return counter;
}

}  // namespace custom::cuda
