// The one place where the `custom` operators are declared. Every other file only registers
// kernels for these schemas with TORCH_LIBRARY_IMPL.
//
// The out= and in-place overloads mutate an argument and return nothing: torch.compile's
// auto-functionalization only handles mutating custom ops without aliased returns.
#include <dlfcn.h>

#include <optional>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace {

void define_operators(torch::Library& m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def("weighted_sum(Tensor input, Tensor weight) -> Tensor", tags);
  // A Python number as weight, like aten::mul.Scalar (ops/weighted_sum_scalar.cpp).
  m.def("weighted_sum.Scalar(Tensor input, Scalar weight) -> Tensor", tags);
  m.def("weighted_sum.out(Tensor input, Tensor weight, *, Tensor(a!) out) -> ()", tags);
  m.def("weighted_sum_(Tensor(a!) self, Tensor weight) -> ()", tags);
  // Which gradients to compute is an argument, so an unneeded one costs nothing.
  m.def(
      "weighted_sum_backward(Tensor grad, Tensor input, Tensor weight, bool[2] output_mask)"
      " -> (Tensor, Tensor)",
      tags);
}

std::string this_library_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&define_operators), &info) != 0 && info.dli_fname != nullptr
             ? info.dli_fname
             : "libcustom_ops.so";
}

// What TORCH_LIBRARY(custom, m) does, except when another copy of this library (a build tree and
// an installed package, say) already defined the operators in this process. TORCH_LIBRARY would
// throw from this static initializer then, and an exception there aborts the process. Instead
// this copy defines nothing and says so; its kernels (TORCH_LIBRARY_IMPL, same code) replace the
// first copy's, with the dispatcher's own "Overriding a previously registered kernel" warning.
std::optional<torch::Library> definition;  // owns the registrations while the library is loaded

const bool defined_here = [] {
  if (c10::Dispatcher::singleton().findSchema({"custom::weighted_sum", ""}).has_value()) {
    TORCH_WARN("custom_ops: the `custom` operators are already defined in this process, by another copy of "
               "libcustom_ops.so; ", this_library_path(), " does not define them again. Load one copy only.");
    return false;
  }
  definition.emplace(torch::Library::DEF, "custom", std::nullopt, __FILE__, __LINE__);
  define_operators(*definition);
  return true;
}();

}  // namespace
