// The public C++ API: each function looks its operator up once and calls it through the
// dispatcher, never a kernel directly, so C++ callers get autograd and every dispatch key.
#include <custom_ops/weighted_sum.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace custom {

at::Tensor weighted_sum(const at::Tensor& input, const at::Tensor& weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("custom::weighted_sum", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(input, weight);
}

at::Tensor weighted_sum(const at::Tensor& input, const at::Scalar& weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("custom::weighted_sum", "Scalar")
                             .typed<at::Tensor(const at::Tensor&, const at::Scalar&)>();
  return op.call(input, weight);
}

at::Tensor& weighted_sum_out(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("custom::weighted_sum", "out")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(input, weight, out);
  return out;
}

at::Tensor& weighted_sum_(at::Tensor& self, const at::Tensor& weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("custom::weighted_sum_", "")
                             .typed<void(const at::Tensor&, const at::Tensor&)>();
  op.call(self, weight);
  return self;
}

std::tuple<at::Tensor, at::Tensor> weighted_sum_backward(
    const at::Tensor& grad,
    const at::Tensor& input,
    const at::Tensor& weight,
    std::array<bool, 2> output_mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("custom::weighted_sum_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, std::array<bool, 2>)>();
  return op.call(grad, input, weight, output_mask);
}

}  // namespace custom
