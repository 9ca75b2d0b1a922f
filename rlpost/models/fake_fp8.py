"""Fake FP8 (e4m3): a model that computes like an FP8 inference engine, on any machine.

``fake_fp8(x)`` rounds every value through ``torch.float8_e4m3fn`` (4 exponent bits, 3 mantissa bits,
largest finite 448) with one scale per row, then casts back: ``s = amax(|row|) / 448`` (1 for an
all-zero row), ``x_q = float(e4m3(x / s)) * s`` in ``x``'s dtype. The row's largest magnitude maps
to 448 exactly; every other value keeps 3 mantissa bits (relative error up to 1/16) down to the
subnormals (2^-9 * s).

``quantize_linears(model)`` turns every ``nn.Linear`` of ``model`` except the output head into a
W8A8 layer: its weight is rounded once, one scale per output row (channel-wise), and a forward
pre-hook rounds its input, one scale per token (dynamic, per-token). This is the FP8 recipe of
inference engines (vLLM's ``fp8`` online quantization, per-channel weight / per-token activation
scales); the output head, the embeddings and the norms stay in the compute dtype, as vLLM leaves them
(SmolLM2 ties the head to the input embeddings, so rounding it would round those too). The matmuls
themselves run in the compute dtype on the rounded values: on CPU there is no FP8 GEMM, and an FP8
GEMM accumulates in fp32 anyway, so the rounding of the operands is what FP8 changes.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448.0


def fake_fp8(x: torch.Tensor) -> torch.Tensor:
    """``x`` [..., K] rounded through e4m3 with one scale per row (``amax(|x[..., :]|) / 448``), in ``x``'s dtype."""
    amax = x.detach().abs().amax(dim=-1, keepdim=True).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return ((x.float() / scale).to(E4M3).float() * scale).to(x.dtype)


def _round_input(module: torch.nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: the Linear's input [..., in_features], one scale per token."""
    return (fake_fp8(args[0]), *args[1:])


def fp8_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The Linear layers ``quantize_linears`` rounds: all but the output head (``get_output_embeddings``)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head]


@torch.no_grad()
def round_weights(model: torch.nn.Module) -> int:
    """Round the weights [out, in] of ``fp8_linears(model)`` in place (one scale per output row); how many."""
    layers = fp8_linears(model)
    for layer in layers:
        layer.weight.copy_(fake_fp8(layer.weight))
    return len(layers)


def quantize_linears(model: torch.nn.Module) -> int:
    """W8A8 fake FP8 on ``model``: the weights rounded now, the inputs at every forward (a pre-hook per layer).
    Call ``round_weights`` again after loading new weights into it; the hooks stay."""
    for layer in fp8_linears(model):
        layer.register_forward_pre_hook(_round_input)
    return round_weights(model)
