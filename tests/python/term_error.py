# SPDX-License-Identifier: BSD-3-Clause
"""How far a term's value, computed by the kernels in a float type, may be from its exact value:
a running error bound, carried through the term's own formula.

Not a test module: the oracle and the gallery's tests import it. The kernels evaluate a term in
its op-math type (float32 for float16, bfloat16 and float32; float64 for float64), each operation
rounding once, each function within its documented error (FUNCTIONS' ulps, on the CPU or CUDA).
Evaluating the formula on `Bounded` values (a float64 value and a bound of its absolute error)
propagates those errors through every later operation, so a subtraction that cancels or a
function that amplifies is accounted for where it happens, with no per-operator tolerance.
"""

import torch

# The unit roundoff of each op-math type.
UNIT = {torch.float32: 2.0**-24, torch.float64: 2.0**-53}
TINY = {torch.float32: 2.0**-149, torch.float64: 2.0**-1074}
# device_kind "inductor": the C++ code torch.compile generates on the CPU calls ATen's Vectorized
# functions, not always what the kernels call (on 2M points of [-6, 6]: sin and cos within 2.2 ulps;
# Vectorized<float>::erf is a polynomial up to 5.1e-7 off in absolute terms, millions of ulps near
# 0). Its bound: twice the larger of a function's documented ulps, and for float erf that error.
INDUCTOR_FLOAT_ERF_ERROR = 2.0**-20

# A rounding to each dtype: (unit roundoff, absolute floor, half the smallest subnormal).
ROUNDING = {
    torch.float16: (2.0**-11, 2.0**-25),
    torch.bfloat16: (2.0**-8, 2.0**-134),
    torch.float32: (2.0**-24, 2.0**-150),
    torch.float64: (2.0**-53, 2.0**-1074),  # 2**-1075 is no float64: the smallest subnormal bounds it
}


class Bounded:
    """A float64 value and the bound of its absolute error, both tensors."""

    def __init__(self, value, error, unit, tiny, device_kind):
        self.value, self.error = value, error
        self.unit, self.tiny, self.device_kind = unit, tiny, device_kind

    def _new(self, value, error):
        # The result of one operation rounds once more (an absolute floor for subnormals).
        return Bounded(value, error + self.unit * value.abs() + self.tiny, self.unit, self.tiny, self.device_kind)

    def _lift(self, other):
        if isinstance(other, Bounded):
            return other
        value = torch.as_tensor(float(other), dtype=torch.float64)
        # number<T>(c) rounds c to the op-math type once.
        return Bounded(value, self.unit * value.abs(), self.unit, self.tiny, self.device_kind)

    def __add__(self, other):
        other = self._lift(other)
        return self._new(self.value + other.value, self.error + other.error)

    def __sub__(self, other):
        other = self._lift(other)
        return self._new(self.value - other.value, self.error + other.error)

    def __mul__(self, other):
        other = self._lift(other)
        error = self.value.abs() * other.error + other.value.abs() * self.error + self.error * other.error
        return self._new(self.value * other.value, error)

    def __truediv__(self, other):
        other = self._lift(other)
        quotient = self.value / other.value
        margin = other.value.abs() - other.error
        error = torch.where(
            margin > 0, (self.error + quotient.abs() * other.error) / margin, torch.full_like(quotient, torch.inf)
        )
        return self._new(quotient, error)

    def __radd__(self, other):
        return self._lift(other) + self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rtruediv__(self, other):
        return self._lift(other) / self

    def __neg__(self):
        return Bounded(-self.value, self.error, self.unit, self.tiny, self.device_kind)

    def __pos__(self):
        return self

    def term_function(self, function, *constant):
        """f(e) within the function's documented ulps of f, plus e's error times the largest slope
        of f over [e - error, e + error] (read at its ends and middle)."""
        value = function.tensor(self.value, *constant)
        slope = _largest_slope(function, self, constant)
        absolute = 0.0
        if self.device_kind == "inductor":
            ulps = 2 * max(function.ulps)
            if function.name == "erf" and self.unit == UNIT[torch.float32]:
                absolute = INDUCTOR_FLOAT_ERF_ERROR
        else:
            ulps = function.ulps[1 if self.device_kind == "cuda" else 0]
        propagated = torch.where(self.error > 0, slope * self.error, torch.zeros_like(value))
        error = propagated + (ulps * self.unit) * value.abs() + absolute
        return Bounded(value, error + self.tiny, self.unit, self.tiny, self.device_kind)


def _largest_slope(function, e, constant):
    points = (e.value - e.error, e.value, e.value + e.error)
    slopes = [torch.as_tensor(function.derivative_at(p, *constant)).abs() for p in points]
    largest = torch.maximum(torch.maximum(slopes[0], slopes[1]), slopes[2]).expand_as(e.value)
    # A function with a jump at 0 (sign, step) may move by its jump where e's error reaches 0.
    if function.name in ("sign", "step"):
        crosses = (e.value - e.error <= 0) & (e.value + e.error >= 0) & (e.error > 0)
        return torch.where(crosses, torch.full_like(largest, torch.inf), largest)
    return torch.nan_to_num(largest, nan=torch.inf)


def value_error(term, x, w, opmath, device_kind):
    """(the exact float64 value of term.value at x, w, and the bound of the error of computing it in
    `opmath` on `device_kind`: "cpu", "cuda" or "inductor"); x and w float64 tensors holding the
    operands' values."""
    unit, tiny = UNIT[opmath], TINY[opmath]
    result = term.value(
        Bounded(x, torch.zeros_like(x), unit, tiny, device_kind),
        Bounded(w, torch.zeros_like(w), unit, tiny, device_kind),
    )
    if not isinstance(result, Bounded):  # a constant term
        value = torch.as_tensor(float(result), dtype=torch.float64)
        return value, unit * value.abs()
    return result.value, result.error


def result_error(term, x, w, dtype, device_kind, cast=None):
    """(the exact float64 value, the bound of the error of the op's result of `dtype`): the term in
    dtype's op-math type (value_error), rounded once to dtype, and once more to `cast` (an out=
    tensor's dtype) where that differs."""
    reference, error = value_error(term, x, w, torch.float64 if dtype == torch.float64 else torch.float32, device_kind)
    for rounding in dict.fromkeys((dtype, cast or dtype)):
        unit, tiny = ROUNDING[rounding]
        error = error + unit * (reference.abs() + error) + tiny
    return reference, error
