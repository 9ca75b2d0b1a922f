"""fp32 linear layers through oneDNN on CPU (``train.cpu_matmul``).

PyTorch's fp32 ``mm`` on x86 CPUs calls MKL's sgemm. On AMD CPUs MKL takes its AVX2 code path, and on
the skinny shapes of a small model it also streams the weight poorly: on this project's 2-core AMD EPYC
VM, a 2048^2 fp32 matmul runs at ~175 GFLOP/s through MKL and ~410 through oneDNN (AVX-512), and the
decode-step shapes (8 rows) 3.7x faster (bench/RESULTS.md). oneDNN ships inside PyTorch; its fp32
matmul is reachable as ``torch.ops.mkldnn._linear_pointwise`` (the op TorchInductor's CPU backend
emits), which takes a plain dense weight, strided views included.

``OneDNNLinear`` computes ``y = x W^T + b`` and its backward (``dx = dy W``, ``dW = dy^T x``,
``db = sum dy``) with that op. The numbers are the same matmuls summed in another order: equal to
float rounding (about 1e-6 relative, tests/unit/generation/test_onednn.py), not bitwise. ``use_onednn_linears(model)``
routes every fp32 ``nn.Linear`` of a model on CPU through it (LoRA's layers included: they are
``nn.Linear`` too); any other dtype or device goes to ``F.linear`` per call.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial

# oneDNN caches one compiled primitive per new input shape, and PyTorch keeps its own LRU of them: with
# a different row count every step (generation), both grew without bound: ~108 MiB/step on SmolLM2
# (bench/soak.py, bench/RESULTS.md). 64 entries keep the shapes in use; read at the first oneDNN op.
os.environ.setdefault("LRU_CACHE_CAPACITY", "64")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

import torch  # noqa: E402  (the cache sizes above are read when torch first runs a oneDNN op)
import torch.nn.functional as F  # noqa: E402

# What this module relies on in torch, in one place (tests/trainer/test_internals_contract.py pins each against the
# installed torch and fails on a patch or a torch.ops op used anywhere in rlpost but not declared):
# an instance attribute of each routed layer (use_onednn_linears, packed_weights):
PATCHES = ("torch.nn.Linear.forward",)
OPS = {  # private oneDNN ops -> the schema the calls here are written against
    "mkldnn::_linear_pointwise": (
        "mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars, str? algorithm) -> Tensor Y"
    ),
    "mkldnn::_reorder_linear_weight": "mkldnn::_reorder_linear_weight(Tensor self, int? batch_size=None) -> Tensor Y",
}


def _matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [M, K] @ weight[N, K]^T (+ bias [N])`` -> [M, N] by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def available() -> bool:
    """oneDNN's linear op exists here and agrees with ``F.linear`` on a small fp32 product."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        x, w = torch.randn(5, 16, generator=torch.Generator().manual_seed(0)), torch.eye(16)[:7]
        return torch.allclose(_matmul(x, w), x[:, :7])
    except (RuntimeError, NotImplementedError):  # the op is registered but this CPU or build cannot run it
        return False


class OneDNNLinear(torch.autograd.Function):
    """``F.linear(x [..., K], weight [N, K], bias [N] | None)`` -> [..., N] with oneDNN matmuls both ways."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        flat = x.reshape(-1, x.size(-1))
        ctx.save_for_backward(flat, weight)
        ctx.has_bias = bias is not None
        out = _matmul(flat, weight, bias)
        return out.reshape(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad_out):
        flat, weight = ctx.saved_tensors
        grad = grad_out.reshape(-1, weight.size(0))  # [M, N]
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = _matmul(grad, weight.t()).reshape(*grad_out.shape[:-1], weight.size(1)) if need_x else None
        grad_w = _matmul(grad.t(), flat.t()) if need_w else None  # [N, M] @ [M, K]
        grad_b = grad.sum(0) if need_b and ctx.has_bias else None
        return grad_x, grad_w, grad_b


def matmul_nt(a: torch.Tensor, b: torch.Tensor, onednn: bool) -> torch.Tensor:
    """``a [M, K] @ b[N, K]^T`` -> [M, N]; by oneDNN when ``onednn`` and both are fp32 on CPU (no autograd)."""
    if onednn and a.dtype == b.dtype == torch.float32 and a.device.type == "cpu":
        return _matmul(a, b)
    return a @ b.t()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` through oneDNN for fp32 CPU tensors, else ``F.linear`` itself."""
    if weight.dtype == torch.float32 and x.dtype == torch.float32 and weight.device.type == "cpu" and x.numel():
        return OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def _forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, module.weight, module.bias)


def _packed_forward(packed: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.size(-1))
    return _matmul(flat, packed, bias).reshape(*x.shape[:-1], -1)


@contextmanager
def packed_weights(model: torch.nn.Module, rows: int):
    """Within the block (inference only), every routed fp32 CPU linear multiplies by its weight reordered
    once into oneDNN's blocked layout for ``rows``-row inputs. Given a plain weight, oneDNN reorders it
    on every call; a decode step multiplies 8 rows by every weight, so that reorder would be most of the
    cost. The packed copies (one model's worth of memory) are dropped on exit. (Generations of at most 16
    rows can take rlpost's decode kernel instead: ``skinny_matmul.decode_weights``.)"""
    swapped = []
    with torch.no_grad():
        for module in model.modules():
            forward = module.__dict__.get("forward")
            weight = getattr(module, "weight", None)
            if (
                getattr(forward, "func", None) is _forward
                and weight is not None
                and weight.dtype == torch.float32
                and weight.device.type == "cpu"
            ):
                packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)
                module.forward = partial(_packed_forward, packed, module.bias)
                swapped.append((module, forward))
    try:
        yield len(swapped)
    finally:
        for module, forward in swapped:
            module.forward = forward


def use_onednn_linears(model: torch.nn.Module) -> int:
    """Route every ``nn.Linear`` of ``model`` through ``linear`` (an instance-level forward); returns how many."""
    count = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and "forward" not in module.__dict__:
            module.forward = partial(_forward, module)
            count += 1
    return count
