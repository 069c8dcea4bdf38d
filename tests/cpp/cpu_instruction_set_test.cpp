// SPDX-License-Identifier: BSD-3-Clause
// Which instruction set runs a term's CPU loops (kernels/cpu/cpu_loops.h): whether the term calls
// functions, read off its formulas, and the set chosen from that and ATen's own.
#include <gtest/gtest.h>

#include <custom_ops/term.h>
#include <custom_ops/terms/weighted_square.h>

#include "kernels/cpu/cpu_loops.h"

namespace {

using custom::number;
using custom::cpu::calls_functions;
using custom::cpu::cpu_set_for;
using custom::cpu::CpuSet;
namespace fn = custom::fn;

// Arithmetic only, with every operator a formula may use: a constant, unary minus, division.
struct ArithmeticTerm {
  template <typename T>
  static T value(const T& x, const T& w) {
    return -(x * w) / (number<T>(2) - x) + w;
  }
  template <typename T>
  static T dx(const T& x, const T& w) {
    return x - w;
  }
  template <typename T>
  static T dw(const T& x, const T& w) {
    return x * w;
  }
};

// A function deep in a formula, in one formula only, or of a constant.
struct TanhGate : ArithmeticTerm {
  template <typename T>
  static T value(const T& x, const T& w) {
    return w * (number<T>(1) + fn::tanh(x));
  }
};

struct FunctionInWeightGradientOnly : ArithmeticTerm {
  template <typename T>
  static T dw(const T& x, const T& w) {
    return x * fn::sigmoid(w);
  }
};

struct PowerTerm : ArithmeticTerm {
  template <typename T>
  static T value(const T& x, const T& w) {
    return w * fn::pow(x, 1.5);
  }
};

TEST(CpuInstructionSet, TermsThatCallFunctionsAreReadOffTheirFormulas) {
  EXPECT_FALSE(calls_functions<ArithmeticTerm>());
  EXPECT_FALSE(calls_functions<custom::terms::WeightedSquare>());
  EXPECT_TRUE(calls_functions<TanhGate>());
  EXPECT_TRUE(calls_functions<FunctionInWeightGradientOnly>());
  EXPECT_TRUE(calls_functions<PowerTerm>());
}

TEST(CpuInstructionSet, AvxFiveTwelveOnlyForTermsBoundByTheirFunctions) {
  EXPECT_EQ(cpu_set_for("AVX512", true), CpuSet::Avx512);
  EXPECT_EQ(cpu_set_for("AVX512", false), CpuSet::Avx2);
  EXPECT_EQ(cpu_set_for("AVX2", true), CpuSet::Avx2);
  EXPECT_EQ(cpu_set_for("AVX2", false), CpuSet::Avx2);
  for (const bool compute_bound : {true, false}) {
    EXPECT_EQ(cpu_set_for("DEFAULT", compute_bound), CpuSet::Default);
    EXPECT_EQ(cpu_set_for("NEON", compute_bound), CpuSet::Default);
  }
}

}  // namespace
