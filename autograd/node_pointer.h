// SPDX-License-Identifier: BSD-3-Clause
// How a graph node is created and handed to autograd: the one thing that differs between the
// torch releases we build against. Until 2.12 nodes are std::shared_ptr<Node> (created with
// deleteNode, which unlinks long chains without recursing); from 2.13 they are
// c10::intrusive_ptr<Node>, and the code that attaches a node also runs the Python
// node-creation hooks (torch.autograd.graph), as ATen's generated kernels do.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

#include <type_traits>

#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/function.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define CUSTOM_OPS_INTRUSIVE_NODES 1
#else
#define CUSTOM_OPS_INTRUSIVE_NODES 0
#endif

#if CUSTOM_OPS_INTRUSIVE_NODES && __has_include(<torch/csrc/autograd/node_creation_hook.h>)
#define CUSTOM_OPS_NODE_CREATION_HOOKS 1
#else
#define CUSTOM_OPS_NODE_CREATION_HOOKS 0
#endif

namespace custom::autograd {

template <class NodeType>
auto make_node() {
#if CUSTOM_OPS_INTRUSIVE_NODES
  return c10::make_intrusive<NodeType>();
#else
  return std::shared_ptr<NodeType>(new NodeType(), torch::autograd::deleteNode);
#endif
}

// Called once the node is fully set up and attached to its outputs.
template <class NodePointer>
void node_attached(const NodePointer& node) {
#if CUSTOM_OPS_NODE_CREATION_HOOKS
  torch::autograd::fire_node_creation_hooks(node);
#else
  (void)node;
#endif
}

// set_history for an out-of-place op's outputs (a tensor or a variable_list), then the creation
// hooks on the node.
template <class Outputs, class NodePointer>
void set_history_and_attach(const Outputs& outputs, const NodePointer& node) {
  torch::autograd::set_history(outputs, node);
  node_attached(node);
}

// rebase_history for an in-place op's output, then the creation hooks on the node autograd
// attached (a CopySlices when self is a view). Releases whose rebase_history returns nothing
// have no such hooks.
template <class NodePointer>
void rebase_history_and_attach(const at::Tensor& self, NodePointer node) {
  if constexpr (std::is_void_v<decltype(torch::autograd::rebase_history(self, node))>) {
    torch::autograd::rebase_history(self, std::move(node));
  } else {
    node_attached(torch::autograd::rebase_history(self, std::move(node)));
  }
}

// A node's name as ATen names its generated ones: the operator's name in CamelCase, then
// "Backward0" (weighted_sum -> WeightedSumBackward0).
inline std::string node_name(std::string_view op) {
  std::string name;
  bool upper = true;
  for (const char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name + "Backward0";
}

}  // namespace custom::autograd
