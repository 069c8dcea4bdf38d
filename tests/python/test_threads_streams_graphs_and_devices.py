# SPDX-License-Identifier: BSD-3-Clause
"""The op under threads, CUDA streams, CUDA graphs and a second GPU.

threads   8 Python threads call every overload at once on different data (the dispatcher
          releases the GIL, so they really run together, also against ATen's own CPU thread
          pool on tensors past its grain size); every result is right.
streams   the kernels run on the current stream, never the default one: work queued on a side
          stream behind a gate the host opens later is waited for, and the default stream, held
          at such a gate, is neither waited for nor used.
graphs    weighted_sum.out and weighted_sum captured into a CUDA graph replay with new data.
devices   tensors on cuda:1 while cuda:0 is current run on cuda:1 (needs two GPUs).
autograd  forward and backward on a side stream give the right gradients.
"""

import functools
import threading

import pytest
import torch

from environment import CUDA_BUILT, HAS_GPU

OPS = torch.ops.custom
THREADS = 8

needs_cuda = pytest.mark.skipif(not (HAS_GPU and CUDA_BUILT), reason="needs a GPU and the CUDA kernels")
needs_two_gpus = pytest.mark.skipif(
    not (HAS_GPU and CUDA_BUILT and torch.cuda.device_count() >= 2), reason="needs two GPUs and the CUDA kernels"
)

# Exact expectations: float32/float64 match `w * x.square()` bitwise; float16/bfloat16 compute in
# float32 and round once.


def expected(x, w):
    dtype = torch.result_type(x, w)
    if dtype in (torch.float16, torch.bfloat16):
        return (w.float() * x.float().square()).to(dtype)
    return w.to(dtype) * x.to(dtype).square()


def expected_gradients(grad, x, w):
    """float64 gradients of sum(grad * w * x**2), summed back to each argument's shape."""
    g, x64, w64 = grad.double(), x.double(), w.double()
    gx = 2 * w64 * x64 * g
    gw = (x64 * x64 * g).sum_to_size(w.shape)
    return gx.sum_to_size(x.shape), gw


def run_in_threads(work, count=THREADS):
    """Runs work(i) for i in range(count) in `count` threads released together; re-raises."""
    barrier = threading.Barrier(count)
    errors = [None] * count

    def target(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as error:
            errors[i] = error

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    for i, error in enumerate(errors):
        if error is not None:
            raise AssertionError(f"thread {i} failed: {error!r}") from error


# Per thread: a different shape, broadcast and dtype pair, so threads share no kernel set-up.
THREAD_CASES = [
    ((64, 1031), (1031,), torch.float32, torch.float32),  # past the CPU grain size: nested parallelism
    ((3, 5, 7), (5, 1), torch.float64, torch.float32),
    ((257,), (), torch.float16, torch.float16),
    ((40, 1000), (40, 1), torch.bfloat16, torch.bfloat16),
    ((9, 9), (9, 9), torch.float16, torch.float32),
    ((2, 33000), (33000,), torch.bfloat16, torch.float64),
    ((0, 4), (4,), torch.float32, torch.float32),
    ((128, 300), (300,), torch.float32, torch.float16),
]
assert len(THREAD_CASES) == THREADS
ITERATIONS = 25


def _thread_inputs(i, device):
    x_shape, w_shape, x_dtype, w_dtype = THREAD_CASES[i]
    g = torch.Generator().manual_seed(1000 + i)
    x = torch.randn(x_shape, generator=g).to(device=device, dtype=x_dtype)
    w = torch.randn(w_shape, generator=g).to(device=device, dtype=w_dtype)
    return x, w


def _functional_and_out_work(device):
    def work(i):
        x, w = _thread_inputs(i, device)
        want = expected(x, w)
        out = torch.empty_like(want)
        for _ in range(ITERATIONS):
            got = OPS.weighted_sum(x, w)
            OPS.weighted_sum.out(x, w, out=out)
            assert torch.equal(got, want), f"thread {i}: functional result wrong"
            assert torch.equal(out, want), f"thread {i}: out= result wrong"

    return work


def test_eight_threads_calling_the_op_at_once_all_get_right_results(device):
    work = _functional_and_out_work(device)
    if device == "cuda":
        # The default stream of every thread: kernels interleave on it, reads are stream-ordered.
        run_in_threads(work)
        torch.cuda.synchronize()
    else:
        run_in_threads(work)


def test_eight_threads_in_place_and_backward_at_once_all_get_right_results(device):
    def work(i):
        x, w = _thread_inputs(i, device)
        x = x.float()
        w = w.float()
        for _ in range(ITERATIONS // 5):
            s = x.clone()
            OPS.weighted_sum_(s, w)
            assert torch.equal(s, expected(x, w)), f"thread {i}: in-place result wrong"

            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            grad = torch.randn(torch.broadcast_shapes(x.shape, w.shape), device=device)
            OPS.weighted_sum(xg, wg).backward(grad)
            want_x, want_w = expected_gradients(grad, x, w)
            torch.testing.assert_close(xg.grad.double(), want_x, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(wg.grad.double(), want_w, rtol=1e-4, atol=1e-3)

    run_in_threads(work)


@needs_cuda
def test_eight_threads_each_on_its_own_cuda_stream_all_get_right_results():
    streams = [torch.cuda.Stream() for _ in range(THREADS)]
    work = _functional_and_out_work("cuda")

    def on_stream(i):
        with torch.cuda.stream(streams[i]):
            work(i)  # torch.equal syncs the current (side) stream before it answers
        streams[i].synchronize()

    run_in_threads(on_stream)


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------

# Cycles for torch.cuda._sleep: a few hundred milliseconds at any H100/H200 clock, long next to
# the microseconds the op's own work takes. Where the host only queues work during the sleep (the
# two-GPU and autograd tests below), a host slower than the sleep makes the test weaker, never fail.
SLEEP_CYCLES = 1_000_000_000

# A gate: one GPU thread spinning on a flag in pinned host memory, which holds its stream until the
# host opens it, however long the host takes (a sleep's end races the host thread, which may be
# descheduled at any point). A kernel, not a stream wait (cuStreamWaitValue32): a wait would also
# block the streams that share its hardware queue. It opens by itself after GATE_TIMEOUT_S, so an
# op that waits for it fails the test instead of hanging it.
GATE_TIMEOUT_S = 300
GATE_SOURCE = r"""
extern "C" __global__ void hold_until_opened(volatile int* state) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (state[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > TIMEOUT_NSull) {
      state[1] = 1;
      return;
    }
    __nanosleep(1000);
  }
}
""".replace("TIMEOUT_NS", str(GATE_TIMEOUT_S * 10**9))


@functools.cache
def _gate_kernel():
    return torch.cuda._compile_kernel(GATE_SOURCE, "hold_until_opened")


class Gate:
    """hold() queues the gate on the current stream; open() lets the stream pass it; expired(),
    once the stream has passed, whether it opened by itself after GATE_TIMEOUT_S."""

    def __init__(self):
        self.state = torch.zeros(2, dtype=torch.int32).pin_memory()  # [opened, expired]

    def hold(self):
        _gate_kernel()(args=[self.state])

    def open(self):
        self.state[0] = 1

    def expired(self):
        return bool(self.state[1])


def _warm_up(x, w):
    """Loads every kernel the stream tests use, so no lazy module load synchronizes mid-test (while
    a gate holds a stream, a load that waits for the device would wait for the gate)."""
    out = torch.empty_like(expected(x, w))
    OPS.weighted_sum.out(x, w, out=out)
    OPS.weighted_sum(x, w)
    OPS.weighted_sum_(x.clone(), w)
    out.fill_(float("nan"))
    host = torch.empty(out.shape, dtype=out.dtype).pin_memory()
    host.copy_(out, non_blocking=True)
    out.copy_(host, non_blocking=True)
    torch.cuda._sleep(1000)
    gate = Gate()
    gate.open()
    gate.hold()
    torch.cuda.synchronize(x.device)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_op_on_a_side_stream_waits_for_that_streams_earlier_work(dtype):
    """Inputs are written on the side stream behind a gate, which opens once the default stream
    has run all it was given: run there (or anywhere else), the op would read the NaNs they held."""
    side = torch.cuda.Stream()
    host_x = torch.randn(1000, 257).to(dtype).pin_memory()
    host_w = torch.randn(257).to(dtype).pin_memory()
    x = torch.full(host_x.shape, float("nan"), dtype=dtype, device="cuda")
    w = torch.full(host_w.shape, float("nan"), dtype=dtype, device="cuda")
    _warm_up(x, w)
    side.wait_stream(torch.cuda.current_stream())
    gate = Gate()
    try:
        with torch.cuda.stream(side):
            gate.hold()
            x.copy_(host_x, non_blocking=True)
            w.copy_(host_w, non_blocking=True)
            result = OPS.weighted_sum(x, w)
            out = torch.empty_like(result)
            OPS.weighted_sum.out(x, w, out=out)
            s = x.clone()
            OPS.weighted_sum_(s, w)
        torch.cuda.default_stream().synchronize()
    finally:
        gate.open()
    side.synchronize()
    assert not gate.expired(), f"the op blocked the host until the gate opened by itself ({GATE_TIMEOUT_S} s)"
    want = expected(host_x, host_w)
    assert torch.equal(result.cpu(), want)
    assert torch.equal(out.cpu(), want)
    assert torch.equal(s.cpu(), want)


@needs_cuda
def test_op_on_a_side_stream_never_waits_for_or_runs_on_the_default_stream():
    """The default stream is held at a gate that the host opens only once the side stream's work
    is done: the op must finish there without it."""
    side = torch.cuda.Stream()
    x = torch.randn(1000, 257, device="cuda")
    w = torch.randn(257, device="cuda")
    want = expected(x, w).cpu()
    _warm_up(x, w)
    out = torch.full(want.shape, float("nan"), device="cuda")
    host_result = torch.empty(want.shape).pin_memory()
    host_out = torch.empty(want.shape).pin_memory()
    torch.cuda.synchronize()

    default = torch.cuda.default_stream()
    assert torch.cuda.current_stream() == default
    gate = Gate()
    try:
        gate.hold()  # on the default stream
        with torch.cuda.stream(side):
            result = OPS.weighted_sum(x, w)
            OPS.weighted_sum.out(x, w, out=out)
            host_result.copy_(result, non_blocking=True)
            host_out.copy_(out, non_blocking=True)
        side.synchronize()
    finally:
        gate.open()
    torch.cuda.synchronize()

    assert not gate.expired(), (
        f"the side stream's work finished only when the default stream's gate opened by itself ({GATE_TIMEOUT_S} s): "
        "the op waited for the default stream (or the device)"
    )
    assert torch.equal(host_result, want), "the op's kernel did not run on the side stream"
    assert torch.equal(host_out, want), "the out= kernel did not run on the side stream"


# ---------------------------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("weight_shape", [(257,), (1000, 257), ()], ids=["row", "full", "0dim"])
def test_out_variant_captured_in_a_cuda_graph_is_right_on_every_replay(dtype, weight_shape):
    static_x = torch.zeros(1000, 257, device="cuda", dtype=dtype)
    static_w = torch.zeros(weight_shape, device="cuda", dtype=dtype)
    static_out = torch.full((1000, 257), float("nan"), device="cuda", dtype=dtype)

    # Warm up on a side stream, as torch.cuda.graphs asks, then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            OPS.weighted_sum.out(static_x, static_w, out=static_out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        OPS.weighted_sum.out(static_x, static_w, out=static_out)

    for step in range(4):
        g = torch.Generator().manual_seed(step)
        new_x = torch.randn(static_x.shape, generator=g).to(dtype)
        new_w = torch.randn(static_w.shape, generator=g).to(dtype)
        static_x.copy_(new_x)
        static_w.copy_(new_w)
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out.cpu(), expected(new_x, new_w)), f"replay {step} is wrong"


@needs_cuda
def test_functional_op_captured_in_a_cuda_graph_is_right_on_every_replay():
    static_x = torch.zeros(33, 65, device="cuda")
    static_w = torch.zeros(65, device="cuda", dtype=torch.float64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            OPS.weighted_sum(static_x, static_w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_result = OPS.weighted_sum(static_x, static_w)
    assert static_result.dtype == torch.float64

    for step in range(4):
        new_x, new_w = torch.randn(33, 65), torch.randn(65, dtype=torch.float64)
        static_x.copy_(new_x)
        static_w.copy_(new_w)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_result.cpu(), expected(new_x, new_w)), f"replay {step} is wrong"


@needs_cuda
def test_in_place_op_captured_in_a_cuda_graph_is_right_on_every_replay():
    static_s = torch.zeros(16, 128, device="cuda", dtype=torch.bfloat16)
    static_w = torch.zeros(16, 1, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        OPS.weighted_sum_(static_s, static_w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        OPS.weighted_sum_(static_s, static_w)

    for step in range(3):
        new_s = torch.randn(16, 128).bfloat16()
        new_w = torch.randn(16, 1).bfloat16()
        static_s.copy_(new_s)
        static_w.copy_(new_w)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_s.cpu(), expected(new_s, new_w)), f"replay {step} is wrong"


# ---------------------------------------------------------------------------------------------
# A second GPU
# ---------------------------------------------------------------------------------------------


@needs_two_gpus
def test_tensors_on_cuda1_while_cuda0_is_current_run_on_cuda1():
    torch.cuda.set_device(0)
    x = torch.randn(300, 301, device="cuda:1")
    w = torch.randn(301, device="cuda:1")
    want = expected(x.cpu(), w.cpu())

    result = OPS.weighted_sum(x, w)
    assert result.device == torch.device("cuda:1")
    out = torch.full_like(result, float("nan"))
    OPS.weighted_sum.out(x, w, out=out)
    s = x.clone()
    OPS.weighted_sum_(s, w)
    torch.cuda.synchronize(1)

    assert torch.cuda.current_device() == 0, "the op left another device current"
    assert torch.equal(result.cpu(), want)
    assert torch.equal(out.cpu(), want)
    assert torch.equal(s.cpu(), want)


@needs_two_gpus
def test_backward_on_cuda1_while_cuda0_is_current_is_right():
    torch.cuda.set_device(0)
    x = torch.randn(50, 60, device="cuda:1", dtype=torch.float64, requires_grad=True)
    w = torch.randn(60, device="cuda:1", dtype=torch.float64, requires_grad=True)
    grad = torch.randn(50, 60, device="cuda:1", dtype=torch.float64)
    OPS.weighted_sum(x, w).backward(grad)
    want_x, want_w = expected_gradients(grad.cpu(), x.detach().cpu(), w.detach().cpu())
    assert x.grad.device == w.grad.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    torch.testing.assert_close(x.grad.cpu(), want_x)
    torch.testing.assert_close(w.grad.cpu(), want_w)


@needs_two_gpus
def test_op_on_cuda1_uses_cuda1s_current_stream():
    """A side stream of cuda:1, current there while cuda:0 is the current device: the op's
    kernels must wait for work queued on it (a sleep, then the inputs' data)."""
    torch.cuda.set_device(0)
    side = torch.cuda.Stream(device=1)
    host_x = torch.randn(500, 129).pin_memory()
    host_w = torch.randn(129).pin_memory()
    x = torch.full(host_x.shape, float("nan"), device="cuda:1")
    w = torch.full(host_w.shape, float("nan"), device="cuda:1")
    with torch.cuda.device(1):
        _warm_up(x, w)
    side.wait_stream(torch.cuda.current_stream(1))
    # Nested on purpose: each context's effect on the current device and stream is the point.
    with torch.cuda.stream(side):  # noqa: SIM117  makes `side` current on cuda:1 (and cuda:1 current for the block)
        with torch.cuda.device(0):  # cuda:0 current again, side still cuda:1's current stream
            with torch.cuda.device(1):
                torch.cuda._sleep(SLEEP_CYCLES)
                x.copy_(host_x, non_blocking=True)
                w.copy_(host_w, non_blocking=True)
            assert torch.cuda.current_device() == 0
            result = OPS.weighted_sum(x, w)
    side.synchronize()
    assert result.device == torch.device("cuda:1")
    assert torch.equal(result.cpu(), expected(host_x, host_w))


# ---------------------------------------------------------------------------------------------
# Autograd on a side stream
# ---------------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("weight_shape", [(257,), (64, 257)], ids=["broadcast", "same_shape"])
def test_forward_and_backward_on_a_side_stream_give_right_gradients(weight_shape):
    side = torch.cuda.Stream()
    host_x = torch.randn(64, 257, dtype=torch.float64).pin_memory()
    host_w = torch.randn(weight_shape, dtype=torch.float64).pin_memory()
    host_g = torch.randn(64, 257, dtype=torch.float64).pin_memory()
    warm_x = torch.randn(64, 257, device="cuda", dtype=torch.float64, requires_grad=True)
    warm_w = torch.randn(weight_shape, device="cuda", dtype=torch.float64, requires_grad=True)
    OPS.weighted_sum(warm_x, warm_w).sum().backward()
    torch.cuda.synchronize()

    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = torch.full(host_x.shape, float("nan"), device="cuda", dtype=torch.float64)
        w = torch.full(host_w.shape, float("nan"), device="cuda", dtype=torch.float64)
        g = torch.full(host_g.shape, float("nan"), device="cuda", dtype=torch.float64)
        torch.cuda._sleep(SLEEP_CYCLES)  # the data arrives late, and only on this stream
        x.copy_(host_x, non_blocking=True)
        w.copy_(host_w, non_blocking=True)
        g.copy_(host_g, non_blocking=True)
        x.requires_grad_()
        w.requires_grad_()
        y = OPS.weighted_sum(x, w)
        y.backward(g)
        grad_x = x.grad.clone()
        grad_w = w.grad.clone()
    side.synchronize()

    want_x, want_w = expected_gradients(host_g, host_x, host_w)
    torch.testing.assert_close(grad_x.cpu(), want_x)
    torch.testing.assert_close(grad_w.cpu(), want_w)
