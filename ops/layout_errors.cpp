// Sparse, sparse-CSR, mkldnn and nested tensors dispatch to their own keys, where the dispatcher
// would only say "could not run ... with arguments from the 'SparseCPU' backend". These kernels
// name the argument and its layout instead, for every operator of the library.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

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
  for (const char* name :
       {"weighted_sum", "weighted_sum.out", "weighted_sum_", "weighted_sum_backward", "weighted_square_sum"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&reject_non_strided>());
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
