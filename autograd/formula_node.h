// SPDX-License-Identifier: BSD-3-Clause
// The one graph node class of the library, for every backward formula: written like the nodes
// ATen generates for its own ops (torch/csrc/autograd/generated/Functions.h), with the values the
// formula reads saved on the node (tensors as SavedVariables), a backward that calls dispatcher
// ops which are differentiable themselves (so every order of derivative works, under torch.func
// transforms too), and compiled-autograd support.
//
// FormulaNode<Row, gradients>: Row is the operator differentiated (WeightedSumBackward0 is
// weighted_sum's node); gradients is its formula,
//   variable_list gradients(const variable_list& grads, std::array<bool, N> needed, Saved...)
// one gradient per next edge (N of them), from the saved values only (tensors or plain values, in
// the order the node saves them): both the node's apply and compiled autograd (on the traced
// graph's tensors) run it.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include "node_pointer.h"

namespace custom::autograd {

namespace formula_node_detail {

// A tensor the formula reads is kept as a SavedVariable (version-checked, packable by hooks).
template <class T>
using Stored = std::conditional_t<std::is_same_v<T, at::Tensor>, torch::autograd::SavedVariable, T>;

template <class Saved>
struct StoredTuple;
template <class... T>
struct StoredTuple<std::tuple<T...>> {
  using type = std::tuple<Stored<T>...>;
};

// N and the saved values' types, from the formula's signature.
template <auto Gradients>
struct Signature;
template <
    std::size_t N,
    typename... Args,
    torch::autograd::variable_list (*Gradients)(const torch::autograd::variable_list&, std::array<bool, N>, Args...)>
struct Signature<Gradients> {
  static constexpr std::size_t kOutputs = N;
  using Saved = std::tuple<std::decay_t<Args>...>;
};

template <class T>
constexpr bool kIsSavedVariable = std::is_same_v<T, torch::autograd::SavedVariable>;

inline at::Tensor unpacked(const torch::autograd::SavedVariable& saved) {
  return saved.unpack();
}
template <class T>
T unpacked(const T& value) {
  return value;
}

inline torch::autograd::SavedVariable stored(const at::Tensor& tensor) {
  return torch::autograd::SavedVariable(tensor, /*is_output=*/false);
}
template <class T>
T stored(const T& value) {
  return value;
}

}  // namespace formula_node_detail

template <class Row, auto Gradients>
struct FormulaNode : torch::autograd::TraceableFunction {
  using Formula = formula_node_detail::Signature<Gradients>;
  using Needed = std::array<bool, Formula::kOutputs>;
  using Stored = formula_node_detail::StoredTuple<typename Formula::Saved>::type;

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::apply(
        [&](const auto&... saved) { return Gradients(grads, needed(), formula_node_detail::unpacked(saved)...); },
        saved_);
  }

  std::string name() const override { return node_name(Row::schema_name); }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_saved_variable([](torch::autograd::SavedVariable& saved) { saved.reset_data(); });
  }

  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    std::apply(
        [&](const auto&... saved) {
          const auto collect = [&](const auto& value) {
            if constexpr (formula_node_detail::kIsSavedVariable<std::decay_t<decltype(value)>>) {
              args.collect(value, /*is_output=*/false);
            } else {
              args.collect(value);
            }
          };
          (collect(saved), ...);
        },
        saved_);
  }

  // Compiled autograd: the formula as one opaque call (bound once per process under the node's
  // name) on the mask and the saved values, packed in Saved's order.
  torch::autograd::variable_list apply_with_saved(
      const torch::autograd::variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& swap) override {
    for_each_saved_variable([&](torch::autograd::SavedVariable& saved) { swap.before(saved); });
    torch::dynamo::autograd::PackedArgs packed;
    packed.pack(needed());
    std::apply([&](const auto&... saved) { (packed.pack(formula_node_detail::unpacked(saved)), ...); }, saved_);
    using torch::dynamo::autograd::IValuePacker;
    const auto& compiler = torch::dynamo::autograd::getPyCompilerInterface();
    static std::once_flag bound;
    std::call_once(
        bound, [&] { compiler->bind_function(swap.get_py_compiler(), name(), &gradients_packed, packed_schema()); });
    const auto output_metadata = IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
        torch::dynamo::autograd::get_input_metadata(next_edges()));
    auto result = compiler->call_function(
        swap.get_py_compiler(), "apply_functional", name(), grads, packed.vec(), output_metadata);
    for_each_saved_variable([&](torch::autograd::SavedVariable& saved) { swap.after(saved); });
    return result;
  }

  Stored saved_;

 private:
  Needed needed() const {
    return [&]<std::size_t... i>(std::index_sequence<i...>) {
      return Needed{task_should_compute_output(i)...};
    }(std::make_index_sequence<Formula::kOutputs>());
  }

  template <class F>
  void for_each_saved_variable(F&& f) {
    std::apply(
        [&](auto&... saved) {
          const auto visit = [&](auto& value) {
            if constexpr (formula_node_detail::kIsSavedVariable<std::decay_t<decltype(value)>>) {
              f(value);
            }
          };
          (visit(saved), ...);
        },
        saved_);
  }

  static std::vector<at::TypePtr> packed_schema() {
    using torch::dynamo::autograd::IValuePacker;
    return [&]<class... T>(std::tuple<T...>*) {
      return std::vector<at::TypePtr>{IValuePacker<Needed>::packed_type(), IValuePacker<T>::packed_type()...};
    }(static_cast<Formula::Saved*>(nullptr));
  }

  static torch::autograd::variable_list gradients_packed(
      const torch::autograd::variable_list& grads, const std::vector<c10::IValue>& args) {
    torch::dynamo::autograd::PackedArgs packed(args);
    const auto needed = packed.unpack<Needed>();
    return [&]<class... T>(std::tuple<T...>*) {
      const std::tuple<T...> values{packed.unpack<T>()...};  // a braced list: unpacked in order
      return std::apply([&](const T&... value) { return Gradients(grads, needed, value...); }, values);
    }(static_cast<Formula::Saved*>(nullptr));
  }
};

// Row's node of the formula Gradients with these next edges, saving `saved` (in the formula's
// order).
template <class Row, auto Gradients, class... Saved>
auto make_formula_node(torch::autograd::edge_list next_edges, const Saved&... saved) {
  auto node = make_node<FormulaNode<Row, Gradients>>();
  node->set_next_edges(std::move(next_edges));
  node->saved_ = typename FormulaNode<Row, Gradients>::Stored{formula_node_detail::stored(saved)...};
  return node;
}

}  // namespace custom::autograd
