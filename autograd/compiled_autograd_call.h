// SPDX-License-Identifier: BSD-3-Clause
// How a node's apply_with_saved hands itself to compiled autograd: as one opaque call of its
// formula (bound once per process under the node's name) on the saved values it packs, as the
// nodes ATen generates do.
#pragma once

#include <mutex>
#include <optional>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

namespace custom::autograd {

inline torch::autograd::variable_list call_traced(
    const torch::autograd::Node& node,
    torch::dynamo::autograd::SwapSavedVariables& saved,
    const torch::autograd::variable_list& grads,
    const torch::dynamo::autograd::PackedArgs& packed,
    std::once_flag& bound,
    torch::autograd::functional_apply_t formula,
    const std::vector<at::TypePtr>& schema) {
  using torch::dynamo::autograd::IValuePacker;
  const auto& compiler = torch::dynamo::autograd::getPyCompilerInterface();
  std::call_once(bound, [&] { compiler->bind_function(saved.get_py_compiler(), node.name(), formula, schema); });
  const auto output_metadata = IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
      torch::dynamo::autograd::get_input_metadata(node.next_edges()));
  return compiler->call_function(
      saved.get_py_compiler(), "apply_functional", node.name(), grads, packed.vec(), output_metadata);
}

}  // namespace custom::autograd
