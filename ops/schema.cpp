// SPDX-License-Identifier: BSD-3-Clause
// The one place where the `custom` operators are declared, each from its row of the operator
// table. Every other file only registers kernels for these schemas with TORCH_LIBRARY_IMPL; the
// layout errors below cover every schema listed here.
//
// The out= and in-place overloads mutate an argument and return nothing: torch.compile's
// auto-functionalization only handles mutating custom ops without aliased returns.
#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <custom_ops/operators.h>

namespace custom {
namespace {

struct Operator {
  const char* schema;
  // Its one kernel calls the library's other operators, whose kernels check the layouts.
  bool composite = false;
};

// Each row of the operator table (custom_ops/operators.h) gives its operator's schemas.
#define CUSTOM_OPS_ELEMENTWISE_SCHEMAS(name_, Term_)                                                      \
  {#name_ "(Tensor input, Tensor weight) -> Tensor"}, /* A Python number as weight, like aten::mul.Scalar \
                                                         (elementwise_scalar.cpp). */                     \
      {#name_ ".Scalar(Tensor input, Scalar weight) -> Tensor", /*composite=*/true},                      \
      {#name_ ".out(Tensor input, Tensor weight, *, Tensor(a!) out) -> ()"},                              \
      {#name_ "_(Tensor(a!) self, Tensor weight) -> ()"},
// Which gradients to compute is an argument, so an unneeded one costs nothing. A reduction's
// backward is its term's, with the grad broadcast back over the reduced dims.
#define CUSTOM_OPS_BACKWARD_SCHEMA(Term_, backward_) \
  {#backward_ "(Tensor grad, Tensor input, Tensor weight, bool[2] output_mask) -> (Tensor, Tensor)"},
// The sum over `dim` (every dim when None or empty), like torch.sum.
#define CUSTOM_OPS_REDUCTION_SCHEMA(name_, Term_) \
  {#name_ "(Tensor input, Tensor weight, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"},

constexpr Operator kOperators[] = {CUSTOM_OPS_ELEMENTWISE_OPERATORS(CUSTOM_OPS_ELEMENTWISE_SCHEMAS) CUSTOM_OPS_TERMS(
    CUSTOM_OPS_BACKWARD_SCHEMA) CUSTOM_OPS_REDUCTION_OPERATORS(CUSTOM_OPS_REDUCTION_SCHEMA)};
#undef CUSTOM_OPS_ELEMENTWISE_SCHEMAS
#undef CUSTOM_OPS_BACKWARD_SCHEMA
#undef CUSTOM_OPS_REDUCTION_SCHEMA

}  // namespace

namespace detail {

// TORCH_LIBRARY(custom, m), safe against a second copy of this library in one process (a build
// tree's and an installed package's, say).
//
// TORCH_LIBRARY throws from a static initializer when the namespace is already defined, and an
// exception there aborts the process. Here the second copy defines nothing and warns instead;
// its kernels (TORCH_LIBRARY_IMPL, same code) replace the first copy's, with the dispatcher's
// own "Overriding a previously registered kernel" warning.
class DefineLibraryOnce {
 public:
  DefineLibraryOnce(const char* ns, void (*define)(torch::Library&), const char* file, uint32_t line);

 private:
  std::optional<torch::Library> library_;  // owns the definitions while the library is loaded
};

namespace {

std::string this_library_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&this_library_path), &info) != 0 && info.dli_fname != nullptr
      ? info.dli_fname
      : "libcustom_ops.so";
}

}  // namespace

DefineLibraryOnce::DefineLibraryOnce(const char* ns, void (*define)(torch::Library&), const char* file, uint32_t line) {
  try {
    // Registers the namespace with the dispatcher, which refuses a second definition.
    library_.emplace(torch::Library::DEF, ns, std::nullopt, file, line);
  } catch (const c10::Error&) {
    TORCH_WARN(
        "custom_ops: the `", ns,
        "` operators are already defined in this process, by another copy of "
        "libcustom_ops.so; ",
        this_library_path(), " does not define them again. Load one copy only.");
    return;
  }
  define(*library_);
}

}  // namespace detail
}  // namespace custom

namespace custom {
namespace {

void define_operators(torch::Library& m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  for (const auto& op : kOperators) {
    m.def(op.schema, tags);
  }
}

const detail::DefineLibraryOnce operators_defined("custom", &define_operators, __FILE__, __LINE__);

}  // namespace
}  // namespace custom

// Sparse, sparse-CSR, mkldnn and nested tensors dispatch to their own keys, where the dispatcher
// would only say "could not run ... with arguments from the 'SparseCPU' backend". These kernels
// name the argument and its layout instead, for every operator of the library.
namespace custom {
namespace {

void reject_non_strided(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // With the overload ("custom::weighted_sum.out"), as the device kernels' errors name it.
  const auto name = c10::str(op.operator_name());
  const auto& arguments = op.schema().arguments();
  const auto values = torch::jit::last(*stack, arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!values[i].isTensor()) {
      continue;
    }
    const auto& tensor = values[i].toTensor();
    TORCH_CHECK(
        !tensor.defined() || (tensor.layout() == at::kStrided && !tensor.is_nested() && !tensor.is_mkldnn()), name,
        ": ", arguments[i].name(), " must be a dense strided tensor, got ",
        tensor.is_nested() ? "a nested tensor" : "layout ", tensor.is_nested() ? "" : c10::str(tensor.layout()));
  }
  TORCH_CHECK(false, name, ": only dense strided tensors are supported");
}

void register_rejections(torch::Library& m) {
  for (const auto& op : kOperators) {
    if (op.composite) {
      continue;
    }
    const std::string_view schema = op.schema;
    const std::string name(schema.substr(0, schema.find('(')));  // "weighted_sum.out"
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&reject_non_strided>());
  }
}

}  // namespace

// One registration per key whose tensors are not dense strided ones.
#define CUSTOM_OPS_REJECT_KEY(key)     \
  TORCH_LIBRARY_IMPL(custom, key, m) { \
    register_rejections(m);            \
  }
CUSTOM_OPS_REJECT_KEY(SparseCPU)
CUSTOM_OPS_REJECT_KEY(SparseCUDA)
CUSTOM_OPS_REJECT_KEY(SparseCsrCPU)
CUSTOM_OPS_REJECT_KEY(SparseCsrCUDA)
CUSTOM_OPS_REJECT_KEY(MkldnnCPU)
CUSTOM_OPS_REJECT_KEY(NestedTensorCPU)
CUSTOM_OPS_REJECT_KEY(NestedTensorCUDA)
#undef CUSTOM_OPS_REJECT_KEY

}  // namespace custom
