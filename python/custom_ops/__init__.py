# SPDX-License-Identifier: BSD-3-Clause
"""custom_ops: the `custom` PyTorch operators, packaged.

Importing this package loads the bundled libcustom_ops.so into the process (torch.ops.load_library),
which registers torch.ops.custom.weighted_sum and its variants, and
torch.ops.custom.weighted_square_sum, with the dispatcher: after
``import custom_ops`` they work eagerly, under autograd, torch.compile, torch.export, TorchScript
and AOTInductor, on CPU and (when built with CUDA kernels) on CUDA. Two parts are opt-in, each
by importing it: ``custom_ops.sharding`` (DTensor sharding rules) and ``custom_ops.onnx`` (ONNX
export).

The library is C++ against libtorch's ABI, which changes between torch releases: the package only
imports under the torch release it was built against (ImportError otherwise; a local label such as
+cu132 may differ), which its wheel also requires (``torch==X.Y.Z``), so pip and import agree.
``pip install --no-build-isolation .`` builds it against the torch already installed, and never
installs another one.
"""

from __future__ import annotations

import pathlib
import re
import warnings
from collections.abc import Callable, Iterable, Sequence

import torch

from . import _operators

try:
    from . import _build_info
except ImportError as error:  # the sources, not an installed build
    raise ImportError(
        "custom_ops is not built: python/custom_ops holds only its sources. Install the package with "
        "`pip install .` from the repository root."
    ) from error

__version__: str = _build_info.VERSION
#: The torch release the bundled library was built against.
TORCH_VERSION: str = _build_info.TORCH_VERSION
#: Whether the bundled library has CUDA kernels.
WITH_CUDA: bool = _build_info.WITH_CUDA
#: The GPU architectures of those kernels, as TORCH_CUDA_ARCH_LIST was at the build ("" without CUDA).
CUDA_ARCHS: str = _build_info.CUDA_ARCHS

__all__ = [
    "CUDA_ARCHS",
    "TORCH_VERSION",
    "WITH_CUDA",
    "__version__",
    "inductor_decomposition_enabled",
    "library_path",
    "set_inductor_decomposition",
    # and the operators' wrappers, one per row of _operators.OPERATORS (added below)
]

_LIBRARY = pathlib.Path(__file__).resolve().with_name("libcustom_ops.so")


def _release(version: str) -> str:
    """The version without its local label: '2.11.0+cu130' -> '2.11.0', '2.12.0.dev20260101+cpu' ->
    '2.12.0.dev20260101'."""
    return str(version).split("+", 1)[0]


def _same_torch(built: str, running: str) -> bool:
    """The wheel's requirement (scripts/packaging/torch_requirement.py's torch_pin: torch==X.Y.Z):
    the same release, whatever the local labels. A patch release (2.15.1 for 2.15.0) is another
    release: torch does not promise its C++ ABI across them."""
    return _release(built) == _release(running)


def _check_torch_version() -> None:
    if not _same_torch(TORCH_VERSION, torch.__version__):
        raise ImportError(
            f"custom_ops {__version__} was built against torch {TORCH_VERSION}, but torch {torch.__version__} "
            f"is installed ({pathlib.Path(torch.__file__).parent}). Its C++ library only works with the "
            "torch it was built against: reinstall custom_ops with `pip install .` "
            f"under torch {torch.__version__}, or install torch {TORCH_VERSION}."
        )


def _operators_registered() -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw("custom::weighted_sum", "")
    except RuntimeError:
        return False
    return True


def _load() -> None:
    if str(_LIBRARY) in torch.ops.loaded_libraries:
        return
    if _operators_registered():
        # A second copy would replace the first one's kernels with its own (see
        # ops/schema.cpp): two builds in one process are refused here instead.
        others = sorted(path for path in torch.ops.loaded_libraries if "custom_ops" in pathlib.Path(path).name)
        raise ImportError(
            f"the `custom` operators are already registered in this process by another copy of the library "
            f"({', '.join(others) or 'not loaded through torch.ops.load_library'}); custom_ops cannot load "
            f"{_LIBRARY} as well. Load only one of them."
        )
    if not _LIBRARY.is_file():
        raise ImportError(f"custom_ops: the bundled library {_LIBRARY} is missing; reinstall the package")
    try:
        torch.ops.load_library(str(_LIBRARY))
    except OSError as error:
        raise ImportError(f"custom_ops: could not load {_LIBRARY}: {error.__cause__ or error}") from error


def _architectures_cover(archs: str, major: int, minor: int) -> bool:
    """The rule of kernels/cuda/architecture_coverage.h: a cubin runs on its major version from its
    minor up (8.0 on 8.6), an arch-specific one ("9.0a") on its own GPU only, PTX on its own and
    every newer GPU."""
    device = major * 10 + minor
    for entry in re.split(r"[ ;]+", archs.strip()):
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", entry)
        if match is None:
            continue
        arch = int(match[1]) * 10 + int(match[2])
        same_family = match[3] != "a" and int(match[1]) == major and arch <= device
        if arch == device or same_family or (match[4] and arch <= device):
            return True
    return False


def _warn(messages: Callable[[], Iterable[str]]) -> None:
    """Each of messages() as a warning. A failing check stays silent: it runs when CUDA initializes,
    and must not make that fail."""
    try:
        found = list(messages())
    except Exception:
        return
    for message in found:
        warnings.warn(message, stacklevel=3)


def _warn_for_gpus_without_kernels(archs: str = CUDA_ARCHS) -> None:
    """One warning per visible GPU the CUDA kernels were not built for, instead of CUDA's "no kernel
    image" at the first call. Runs when CUDA initializes, so importing does not initialize it."""

    def messages():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            if not _architectures_cover(archs, major, minor):
                yield (
                    f"custom_ops: libcustom_ops.so has no kernels for cuda:{index} "
                    f"({torch.cuda.get_device_name(index)}, compute capability {major}.{minor}): it was built "
                    f'with TORCH_CUDA_ARCH_LIST="{archs}". Rebuild it with TORCH_CUDA_ARCH_LIST="{major}.{minor}" '
                    "in the environment (pip install ., make install)."
                )

    _warn(messages)


def _warn_without_cuda_kernels() -> None:
    """One warning when the library has no CUDA kernels and a GPU is visible: its ops would only
    fail on CUDA tensors ("no kernel for CUDA"), and the build said so only in its configure log."""

    def messages():
        count = torch.cuda.device_count()
        if count:
            yield (
                f"custom_ops: libcustom_ops.so has no CUDA kernels, but {count} GPU(s) are visible "
                f"({torch.cuda.get_device_name(0)}): its ops run on CPU tensors only. It was built without "
                f"nvcc or with CUSTOM_OPS_CUDA=OFF; rebuild it with a CUDA {torch.version.cuda} toolkit: "
                "pip install --no-build-isolation . -C cmake.define.CUSTOM_OPS_CUDA=ON"
            )

    _warn(messages)


_check_torch_version()
_load()
# When CUDA starts (at once if it already has): importing does not initialize CUDA, which would
# break a later fork's use of it.
if WITH_CUDA:
    torch.cuda._lazy_call(_warn_for_gpus_without_kernels)
elif torch.version.cuda:
    torch.cuda._lazy_call(_warn_without_cuda_kernels)


def library_path() -> str:
    """The absolute path of the bundled libcustom_ops.so, loaded into this process on import.

    Pass it to ``torch.ops.load_library`` in processes that load TorchScript or AOTInductor files
    without importing this package, or link against it from C++.
    """
    return str(_LIBRARY)


# --- the typed wrappers: one per operator of _operators.OPERATORS (two for an elementwise one) ----


def _formula(term: _operators.Term) -> str:
    """The term's value as an expression of ``input`` and ``weight``, for the docstrings."""
    text = _operators.expression(term.value)
    if text is None:
        return f"{term.name}(input, weight)"
    return re.sub(r"\bw\b", "weight", re.sub(r"\bx\b", "input", text))


def _example(compute, x: str, w: str, call: str) -> str:
    """A docstring example: the call and what it returns, computed from the term (float32, tiny)."""
    try:
        with torch.no_grad():
            shown = repr(compute(eval(x, {"torch": torch}), eval(w, {"torch": torch})))
    except Exception:  # a term undefined at the sample: no example rather than a failing import
        return ""
    return f"\n\n    Example::\n\n        >>> import torch, custom_ops\n        >>> {call}\n        {shown}\n"


_ELEMENTWISE_DOC = """Elementwise ``{formula}``, computed by the custom::{name} operator.

    Args:
        input: a float16, bfloat16, float32 or float64 tensor of any shape, on CPU or on CUDA (CUDA
            needs the library built with CUDA kernels, see ``WITH_CUDA``).
        weight: a tensor of one of those dtypes, broadcastable with ``input``, on the same device;
            or, without ``out``, a Python number (``custom::{name}.Scalar``), which like
            ``input * 2.5`` keeps a float input's dtype (bfloat16 times 2.5 stays bfloat16).
        out: where to write the result (``custom::{name}.out``), as ATen's ``out=``: resized
            with ATen's warning when its shape is wrong; a dtype the result cannot be cast to is an
            error. Not differentiable: inputs that require grad are an error.

    Returns:
        ``out`` when given; else a new tensor of the broadcast shape of ``input`` and ``weight``
        and their promoted dtype, laid out as ``{formula}`` lays out its result
        (channels_last stays channels_last). float16 and bfloat16 compute in float32.

    Differentiable with respect to both arguments (without ``out``), and traceable by
    torch.compile (fullgraph, dynamic shapes), torch.export and AOTInductor. Same as
    ``torch.ops.custom.{name}(input, weight)`` and
    ``torch.ops.custom.{name}.out(input, weight, out=out)``, which return nothing."""

_INPLACE_DOC = """In place: ``self`` becomes ``{formula}`` of ``self`` (``custom::{name}_``); returns ``self``.

    ``weight`` must broadcast to ``self``'s shape (``self`` cannot grow). Recorded by autograd on a
    non-leaf ``self``; on a leaf that requires grad it raises, as ATen's in-place ops do. Same as
    ``torch.ops.custom.{name}_(self, weight)``, which returns nothing.
    """

_REDUCTION_DOC = """``({formula}).sum(dim, keepdim, dtype=dtype)``, computed by custom::{name}.

    Args:
        input: a float16, bfloat16, float32 or float64 tensor of any shape, on CPU or on CUDA (CUDA
            needs the library built with CUDA kernels, see ``WITH_CUDA``).
        weight: a tensor of one of those dtypes, broadcastable with ``input``, on the same device.
            The sum runs over their broadcast shape.
        dim: the dimension or dimensions of the broadcast shape to sum over (negative ones count
            from the end), as ``torch.sum``'s; ``None`` or ``[]`` sums over all of them.
        keepdim: keep each summed dimension as a dimension of size 1, as ``torch.sum``'s.
        dtype: the result's dtype (float16, bfloat16, float32 or float64); by default
            ``torch.result_type(input, weight)``. ``torch.float64`` also computes in float64.

    Returns:
        A new contiguous tensor: the sum of ``{formula}`` over ``dim``. Each term is
        computed as ``{formula}`` and the terms are added in float32 (in float64
        when ``torch.result_type(input, weight)`` or ``dtype`` is float64); a float16 or bfloat16
        result is rounded once, at the end. Sums over empty dimensions are 0.

    Differentiable with respect to both arguments (reverse and forward mode; the backward is
    ``custom::{backward}`` of the grad broadcast over the summed dimensions), works
    under ``torch.vmap``, is traceable by torch.compile (fullgraph, dynamic shapes), torch.export
    and AOTInductor, and runs on DTensors after ``import custom_ops.sharding``. Same as
    ``torch.ops.custom.{name}(input, weight, dim, keepdim, dtype=dtype)``."""


def _name(function, name: str, doc: str):
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


def _elementwise_wrappers(name: str, term: _operators.Term) -> list:
    functional_op, inplace_op = getattr(torch.ops.custom, name), getattr(torch.ops.custom, f"{name}_")

    def functional(
        input: torch.Tensor, weight: torch.Tensor | float, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        if out is None:
            return functional_op(input, weight)
        if not isinstance(weight, torch.Tensor):
            raise TypeError(
                f"custom_ops.{name}: out= needs a tensor weight, got {type(weight).__name__} "
                f"(custom::{name}.out has no Scalar overload)"
            )
        functional_op.out(input, weight, out=out)
        return out

    def inplace(self: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(
                f"custom_ops.{name}_: needs a tensor weight, got {type(weight).__name__} "
                f"(custom::{name}_ has no Scalar overload)"
            )
        inplace_op(self, weight)
        return self

    formula = _formula(term)
    example = _example(
        term.value,
        "torch.tensor([1.0, 2.0, 3.0])",
        "torch.tensor(2.0)",
        f"custom_ops.{name}(torch.tensor([1.0, 2.0, 3.0]), torch.tensor(2.0))",
    )
    return [
        _name(functional, name, _ELEMENTWISE_DOC.format(name=name, formula=formula) + example),
        _name(inplace, f"{name}_", _INPLACE_DOC.format(name=name, formula=formula)),
    ]


def _reduction_wrapper(name: str, term: _operators.Term):
    op = getattr(torch.ops.custom, name)

    def reduction(
        input: torch.Tensor,
        weight: torch.Tensor,
        dim: int | Sequence[int] | None = None,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        if isinstance(dim, int):
            dim = [dim]
        return op(input, weight, dim, keepdim, dtype=dtype)

    doc = _REDUCTION_DOC.format(name=name, formula=_formula(term), backward=term.backward)
    example = _example(
        lambda x, w: term.value(x, w).sum(1),
        "torch.tensor([[1.0, 2.0], [3.0, 4.0]])",
        "torch.tensor([1.0, 0.5])",
        "x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])\n"
        f"        >>> custom_ops.{name}(x, torch.tensor([1.0, 0.5]), dim=1)",
    )
    return _name(reduction, name, doc + example)


def _wrappers() -> list:
    wrappers = []
    for operator in _operators.OPERATORS:
        if operator.kind == _operators.ELEMENTWISE:
            wrappers += _elementwise_wrappers(operator.name, operator.term)
        else:
            wrappers.append(_reduction_wrapper(operator.name, operator.term))
    return wrappers


for _wrapper in _wrappers():
    globals()[_wrapper.__name__] = _wrapper
    __all__.append(_wrapper.__name__)
del _wrapper


def set_inductor_decomposition(enabled: bool) -> None:
    """Whether torch.compile (Inductor) decomposes the ops into ATen math it can fuse (default on).

    On, Inductor replaces ``weighted_sum``, its out= and in-place forms and ``weighted_sum_backward``
    with ATen math in our kernels' operation order (same forward values, bit for bit), and
    ``weighted_square_sum`` with that math and a sum in its accumulation dtype (equal to our
    kernel's up to the order of the additions), and fuses them with the neighbouring ops. Off,
    compiled graphs call our kernels, as eager code does: for AOTInductor packages that must
    contain our kernel. The environment variable
    ``CUSTOM_OPS_INDUCTOR_DECOMPOSE=0`` turns it off from the start.

    Applies to compiles that start afterwards (``torch._dynamo.reset()`` recompiles functions
    already compiled). The state and the library version are part of the compile cache key
    (appended to ``torch.compiler.config.cache_key_tag``), so cached code of the other state is not
    reused. Eager calls, TorchScript, the C++ API and torch.export graphs always keep the op.
    """
    _inductor.set_enabled(enabled)


def inductor_decomposition_enabled() -> bool:
    """Whether torch.compile decomposes the op (see ``set_inductor_decomposition``)."""
    return _inductor.is_enabled()


from . import _inductor, _post_import  # noqa: E402  (cheap: torch._inductor is imported only by a compile)

_inductor.install(__version__, _post_import.when_imported)
