// SPDX-License-Identifier: BSD-3-Clause
// Per-call C++ time of custom::weighted_sum(_out) against at::add(_out) and at::mul(w, x * x) at
// small sizes, where the dispatcher and the launch cost more than memory traffic; CPU, and the GPU
// where there is one. Batches end with a synchronize inside the timed region (wall time).
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/cuda.h>

#include <custom_ops/custom_ops.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int64_t kCallsPerBatch = 64;

enum class Op { kWeightedSum, kWeightedSumOut, kAdd, kAddOut, kMulSquare };

struct OpInfo {
  Op op;
  const char* name;
};

constexpr OpInfo kOps[] = {
    {Op::kWeightedSum, "weighted_sum"},
    {Op::kWeightedSumOut, "weighted_sum_out"},
    {Op::kAdd, "add"},
    {Op::kAddOut, "add_out"},
    {Op::kMulSquare, "mul_square"},
};

void call(Op op, at::Tensor& y, const at::Tensor& x, const at::Tensor& w) {
  switch (op) {
    case Op::kWeightedSum:
      benchmark::DoNotOptimize(custom::weighted_sum(x, w));
      break;
    case Op::kWeightedSumOut:
      custom::weighted_sum_out(y, x, w);
      break;
    case Op::kAdd:
      benchmark::DoNotOptimize(at::add(x, w));
      break;
    case Op::kAddOut:
      at::add_out(y, x, w);
      break;
    case Op::kMulSquare:
      benchmark::DoNotOptimize(at::mul(w, x * x));
      break;
  }
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) {
    torch::cuda::synchronize();
  }
}

void BM_Call(benchmark::State& state, Op op, at::Device device) {
  const int64_t n = state.range(0);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  const auto x = at::randn({n}, options);  // random, never zeros
  const auto w = at::randn({n}, options);
  auto y = at::empty({n}, options);
  synchronize(device);
  // The synchronize at the end of each batch is timed: the GPU's work is part of the cost.
  while (state.KeepRunningBatch(kCallsPerBatch)) {
    for (int64_t i = 0; i < kCallsPerBatch; ++i) {
      call(op, y, x, w);
    }
    synchronize(device);
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}

// A benchmark of a wrong kernel measures nothing: compare once against the composite.
void check_values(const at::Device& device) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  const auto x = at::randn({1000}, options);
  const auto w = at::randn({1000}, options);
  const auto expected = at::mul(w.to(at::kDouble), x.to(at::kDouble).square());
  auto out = at::full({1000}, NAN, options);
  custom::weighted_sum_out(out, x, w);
  for (const auto& got : {custom::weighted_sum(x, w), out}) {
    if (!at::allclose(got.to(at::kDouble), expected, 1e-5, 1e-6)) {
      std::fprintf(stderr, "bench: custom::weighted_sum gives wrong values on %s\n", device.str().c_str());
      std::exit(1);
    }
  }
}

bool gpu_usable() {
  if (!torch::cuda::is_available()) {
    return false;
  }
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("custom::weighted_sum", "");
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
    std::fprintf(stderr, "bench: a GPU is visible, but libcustom_ops has no CUDA kernels; CPU only\n");
    return false;
  }
  return true;
}

void register_benchmarks(const at::Device& device) {
  check_values(device);  // also the warm-up: CUDA context, first kernel loads
  for (const auto& info : kOps) {
    const std::string name = std::string(info.name) + "/" + (device.is_cuda() ? "cuda" : "cpu");
    benchmark::RegisterBenchmark(name.c_str(), BM_Call, info.op, device)
        ->RangeMultiplier(2)
        ->Range(1 << 6, 1 << 14)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  register_benchmarks(at::Device(at::kCPU));
  if (gpu_usable()) {
    register_benchmarks(at::Device(at::kCUDA, 0));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
