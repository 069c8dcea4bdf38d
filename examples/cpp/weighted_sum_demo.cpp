// SPDX-License-Identifier: BSD-3-Clause
// weighted_sum_demo: every C++ way of calling the `custom` operators, with no Python in the process.
//
//   weighted_sum_demo [--device cpu|cuda|all] [--quiet] [MODEL.pt] [MODEL.pt2]
//
// 1. custom::weighted_sum through the public C++ API, with autograd, plus the out= and in-place
//    variants, checked against weight * input**2 computed with ATen; then
//    custom::weighted_square_sum, the sum of weight * input**2 over chosen dims, with autograd and
//    a float64 result, checked against (weight * input.square()).sum(...) computed with ATen.
// 2. MODEL.pt: a TorchScript module (examples/python/export_models.py) run with torch::jit::load.
// 3. MODEL.pt2: an AOTInductor package run with torch::inductor::AOTIModelPackageLoader, on the
//    device it was compiled for.
//
// Both model files call both operators: forward(input, weight) = custom::weighted_sum(input, weight)
// + input + custom::weighted_square_sum(input, weight, {-1}, /*keepdim=*/true, at::kDouble), a
// float64 result, with dynamic sizes; the program runs them at several shapes. --device all (the
// default) checks the CPU, and CUDA too when a GPU is visible and the library has CUDA kernels.
//
// Exit status: 0 when every check matched, 1 when one did not, 2 on a usage or loading error.
#include <custom_ops/custom_ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

bool quiet = false;
int failures = 0;

// (batch, features) shapes for the models: every size at least 2, as the export's dynamic dims.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{2, 3}, {5, 8}, {17, 4}, {64, 33}};

// A larger atol for float32 values that sum several rounded terms.
void check(const std::string& what, const at::Tensor& actual, const at::Tensor& expected, double atol = 1e-6) {
  const bool ok = actual.defined() && actual.sizes() == expected.sizes() &&
      actual.scalar_type() == expected.scalar_type() && actual.device() == expected.device() &&
      at::allclose(actual, expected, /*rtol=*/1e-5, atol);
  std::cout << (ok ? "  ok       " : "  MISMATCH ") << what << '\n';
  if (!ok) {
    ++failures;
    std::cout << "    expected " << expected.sizes() << ' ' << expected.scalar_type() << " on " << expected.device()
              << "\n    got      ";
    if (actual.defined()) {
      std::cout << actual.sizes() << ' ' << actual.scalar_type() << " on " << actual.device()
                << "\n    max |difference| "
                << (actual.to(expected.device(), expected.scalar_type()) - expected).abs().max().item<double>();
    } else {
      std::cout << "an undefined tensor";
    }
    std::cout << '\n';
  }
}

void show(const std::string& name, const at::Tensor& tensor) {
  if (!quiet) {
    std::cout << name << " =\n" << tensor << '\n';
  }
}

at::TensorOptions on(const c10::Device& device) {
  return at::TensorOptions().dtype(at::kFloat).device(device);
}

// The C++ API: forward, backward through the Autograd kernel, out= and in-place.
void run_api(const c10::Device& device) {
  std::cout << "custom::weighted_sum on " << device << '\n';
  auto input = torch::randn({4, 5}, on(device)).requires_grad_();
  auto weight = torch::randn({5}, on(device)).requires_grad_();  // broadcast over the rows
  auto output = custom::weighted_sum(input, weight);
  auto grad = torch::randn_like(output);
  output.backward(grad);

  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = weight * input * input;
  }
  show("input", input);
  show("weight", weight);
  show("weighted_sum(input, weight)", output);
  show("input.grad", input.grad());
  show("weight.grad", weight.grad());

  torch::NoGradGuard no_grad;
  check("forward", output.detach(), expected);
  check("grad of input", input.grad(), 2 * weight * input * grad);
  check("grad of weight", weight.grad(), (input * input * grad).sum(0));

  auto out = torch::empty({4, 5}, on(device));
  custom::weighted_sum_out(out, input.detach(), weight.detach());
  check("weighted_sum_out", out, expected);

  auto self = input.detach().clone();
  custom::weighted_sum_(self, weight.detach());
  check("weighted_sum_", self, expected);
}

// The C++ API of the reduction: sums over the dims given (every dim by default), keepdim, and a
// result dtype; the gradients come from the same Autograd kernel machinery as weighted_sum's.
void run_square_sum_api(const c10::Device& device) {
  std::cout << "custom::weighted_square_sum on " << device << '\n';
  auto input = torch::randn({4, 5}, on(device)).requires_grad_();
  auto weight = torch::randn({5}, on(device)).requires_grad_();
  auto row_sums = custom::weighted_square_sum(input, weight, /*dim=*/{1});  // one sum per row
  auto grad = torch::randn_like(row_sums);
  row_sums.backward(grad);
  show("weighted_square_sum(input, weight, dim=1)", row_sums);

  torch::NoGradGuard no_grad;
  check("forward, dim=1", row_sums.detach(), (weight * input.square()).sum(1), /*atol=*/1e-5);
  check("grad of input", input.grad(), 2 * weight * input * grad.unsqueeze(1));
  check("grad of weight", weight.grad(), (input.square() * grad.unsqueeze(1)).sum(0), /*atol=*/1e-5);
  // Every dim, summed and returned in float64.
  const auto total = custom::weighted_square_sum(input, weight, std::nullopt, /*keepdim=*/false, at::kDouble);
  check("every dim, dtype=float64", total, (weight.to(at::kDouble) * input.to(at::kDouble).square()).sum());
}

// What both model files compute, with ATen alone: the operators' composites, the row sums in float64.
at::Tensor model_reference(const at::Tensor& input, const at::Tensor& weight) {
  const auto row_sums = (weight.to(at::kDouble) * input.to(at::kDouble).square()).sum(-1, /*keepdim=*/true);
  return weight * input * input + input + row_sums;
}

void run_torchscript(const std::string& path, const c10::Device& device) {
  std::cout << "TorchScript " << path << " on " << device << '\n';
  torch::jit::script::Module module = torch::jit::load(path, device);
  module.eval();
  for (const auto& [rows, cols] : kShapes) {
    auto input = torch::randn({rows, cols}, on(device));
    auto weight = torch::randn({cols}, on(device));
    auto output = module.forward({input, weight}).toTensor();
    check("forward " + std::to_string(rows) + "x" + std::to_string(cols), output, model_reference(input, weight));
  }
  // Autograd through the scripted module: the operators' Autograd kernels run under the
  // interpreter. The same gradients by autograd through the ATen reference.
  auto input = torch::randn({3, 4}, on(device)).requires_grad_();
  auto weight = torch::randn({4}, on(device)).requires_grad_();
  module.forward({input, weight}).toTensor().sum().backward();
  auto reference_input = input.detach().clone().requires_grad_();
  auto reference_weight = weight.detach().clone().requires_grad_();
  model_reference(reference_input, reference_weight).sum().backward();
  check("grad of input", input.grad(), reference_input.grad(), /*atol=*/1e-5);
  check("grad of weight", weight.grad(), reference_weight.grad(), /*atol=*/1e-5);
}

c10::Device package_device(const std::string& path) {
  const auto metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
  const auto key = metadata.find("AOTI_DEVICE_KEY");
  return c10::Device(key == metadata.end() ? std::string("cpu") : key->second);
}

void run_aoti(const std::string& path) {
  const c10::Device device = package_device(path);
  std::cout << "AOTInductor " << path << " on " << device << '\n';
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error("the package was compiled for CUDA, and no GPU is visible");
  }
  torch::inductor::AOTIModelPackageLoader loader(path);
  for (const auto& [rows, cols] : kShapes) {
    auto input = torch::randn({rows, cols}, on(device));
    auto weight = torch::randn({cols}, on(device));
    auto outputs = loader.run({input, weight});
    if (outputs.size() != 1) {
      throw std::runtime_error("expected one output, got " + std::to_string(outputs.size()));
    }
    check("run " + std::to_string(rows) + "x" + std::to_string(cols), outputs[0], model_reference(input, weight));
  }
}

bool cuda_usable() {
  if (!torch::cuda::is_available()) {
    return false;
  }
  const auto& op = c10::Dispatcher::singleton().findSchemaOrThrow("custom::weighted_sum", "");
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
    std::cout << "a GPU is visible, but libcustom_ops was built without CUDA kernels: CPU only\n";
    return false;
  }
  return true;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int usage(const char* program) {
  std::cerr << "usage: " << program << " [--device cpu|cuda|all] [--quiet] [MODEL.pt] [MODEL.pt2]\n"
            << "  MODEL.pt   TorchScript module (torch.jit.save), run on each device\n"
            << "  MODEL.pt2  AOTInductor package (aoti_compile_and_package), run on its own device\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_choice = "all";
  std::vector<std::string> torchscript_paths;
  std::vector<std::string> package_paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      device_choice = argv[++i];
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    } else if (ends_with(arg, ".pt2")) {
      package_paths.push_back(arg);
    } else if (ends_with(arg, ".pt")) {
      torchscript_paths.push_back(arg);
    } else {
      return usage(argv[0]);
    }
  }
  if (device_choice != "cpu" && device_choice != "cuda" && device_choice != "all") {
    return usage(argv[0]);
  }

  try {
    torch::manual_seed(0);
    std::vector<c10::Device> devices;
    if (device_choice != "cuda") {
      devices.emplace_back(c10::kCPU);
    }
    if (device_choice != "cpu") {
      if (cuda_usable()) {
        devices.emplace_back(c10::kCUDA);
      } else if (device_choice == "cuda") {
        std::cerr << "--device cuda: no GPU visible, or libcustom_ops has no CUDA kernels\n";
        return 2;
      } else {
        std::cout << "CUDA: not available, CPU only\n";
      }
    }

    for (const auto& device : devices) {
      run_api(device);
      run_square_sum_api(device);
      for (const auto& path : torchscript_paths) {
        run_torchscript(path, device);
      }
    }
    for (const auto& path : package_paths) {
      run_aoti(path);
    }
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 2;
  }

  if (failures > 0) {
    std::cout << failures << " check(s) FAILED\n";
    return 1;
  }
  std::cout << "all checks passed\n";
  return 0;
}
