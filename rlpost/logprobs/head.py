"""Per-token log-probabilities of the completion tokens, scored at the completion positions only.

TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``) runs a Triton kernel on GPUs that scores
only labelled positions. Without Triton (CPU) it scores *every* position of the batch, prompts and
padding included, and folds each ``[tokens, 32768]`` vocabulary tile through about ten elementwise
passes (scale, temperature, max, exp, entropy, one-hot in the backward). On SmolLM2-135M with 8
completions of 32 tokens that head is over half of the training phase (bench/RESULTS.md).

``CompletionLogProbs`` computes the same quantities (log p(target) / T-scaled and the entropy of the
next-token distribution) for the completion positions only, ``chunk`` tokens at a time, with
``logsumexp`` + ``gather`` forward and a recomputing backward (with more than one chunk the ``[chunk, V]``
logits are not kept between forward and backward, so memory is bounded by one chunk, as with TRL's
kernel; a batch of at most one chunk keeps its log-softmax and skips the recomputation):

    z = h W^T / T                        [n, V]
    log p_t = z_t - logsumexp(z)         [n]
    H = -sum_v p_v log p_v               [n]
    dL/dz = g_logp (onehot_t - p) - g_H p (log p + H),   dL/dh = dL/dz W / T,   dL/dW = (dL/dz)^T h / T

The choice between this head and TRL's is ``train.logprob_head`` (rlpost/trainer/logprobs.py).
"""

from __future__ import annotations

import torch

from rlpost.generation.onednn import matmul_nt


class CompletionLogProbs(torch.autograd.Function):
    """log p(target) [N] and entropy [N] (None unless asked) of ``hidden [N, H] @ weight[V, H]^T / T``."""

    @staticmethod
    def forward(
        ctx, hidden, weight, targets, temperature: float, chunk: int, with_entropy: bool, fp32: bool, onednn: bool
    ):
        ctx.set_materialize_grads(False)  # entropy is usually logged only: no zero gradient to fold back
        n = hidden.size(0)
        logps = hidden.new_empty(n, dtype=_acc(hidden))
        lse = torch.empty_like(logps)
        entropy = torch.empty_like(logps) if with_entropy else None
        log_p = None
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            z = _logits(hidden[start:end], weight, temperature, fp32, onednn)  # [c, V] fp32
            lse[start:end] = torch.logsumexp(z, dim=-1)
            logps[start:end] = z.gather(1, targets[start:end, None]).squeeze(1) - lse[start:end]
            log_p = z.sub_(lse[start:end, None])  # in place: z is not needed again
            if entropy is not None:
                entropy[start:end] = -(log_p.exp() * log_p).sum(-1)
        # one chunk: keep its log-softmax for the backward (memory stays one chunk), else recompute per chunk
        ctx.log_p = log_p if n <= chunk else None
        ctx.save_for_backward(hidden, weight, targets, lse, lse if entropy is None else entropy)
        ctx.settings = (temperature, chunk, fp32, onednn)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        temperature, chunk, fp32, onednn = ctx.settings
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        acc = _acc(hidden)
        grad_hidden = torch.zeros_like(hidden, dtype=acc) if need_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=acc) if need_weight else None
        w = weight.to(acc) if fp32 else weight
        for start in range(0, hidden.size(0), chunk):
            end = min(start + chunk, hidden.size(0))
            if ctx.log_p is not None:  # the forward's, one chunk (used up: the loop below works in place)
                log_p, ctx.log_p = ctx.log_p, None
            else:
                log_p = _logits(hidden[start:end], weight, temperature, fp32, onednn).sub_(lse[start:end, None])
            p = log_p.exp()
            grad_z = torch.zeros_like(p)
            if grad_logps is not None:  # d log p_t / dz_v = 1[v = t] - p_v
                g = grad_logps[start:end, None].to(acc)
                grad_z.sub_(p * g).scatter_add_(1, targets[start:end, None], g)
            if grad_entropy is not None:  # dH / dz_v = -p_v (log p_v + H)
                grad_z.sub_(p.mul_(log_p.add_(entropy[start:end, None])).mul_(grad_entropy[start:end, None].to(acc)))
            grad_z.div_(temperature)
            h = hidden[start:end].to(acc) if fp32 else hidden[start:end]
            if grad_hidden is not None:
                grad_hidden[start:end] = matmul_nt(grad_z.to(w.dtype), w.t(), onednn)
            if grad_weight is not None:
                grad_weight.add_(matmul_nt(grad_z.t().to(h.dtype), h.t(), onednn))  # bf16: accumulated in fp32
        grad_hidden = grad_hidden.to(hidden.dtype) if grad_hidden is not None else None
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        return grad_hidden, grad_weight, None, None, None, None, None, None


def _acc(hidden: torch.Tensor) -> torch.dtype:
    """Softmax and gradient dtype: fp32 for bf16/fp16/fp32 models (fp64 stays fp64)."""
    return torch.promote_types(hidden.dtype, torch.float32)


def _logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float, fp32: bool, onednn: bool) -> torch.Tensor:
    """``hidden [c, H] @ weight[V, H]^T / T`` as fp32 [c, V] (the matmul in fp32 too when ``fp32``)."""
    acc = _acc(hidden)
    z = matmul_nt(hidden.to(acc), weight.to(acc), onednn) if fp32 else matmul_nt(hidden, weight, onednn).to(acc)
    return z.div_(temperature) if temperature != 1.0 else z


def completion_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int = 1024,
    fp32: bool = False,
    onednn: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs and entropies [B, T] of ``targets [B, T]`` from the hidden states that predict them
    (``hidden [B, T, H]``: the position before each target); zero where ``mask [B, T]`` is 0."""
    mask = mask.bool()
    logps, entropy = CompletionLogProbs.apply(
        hidden[mask], weight, targets[mask], temperature, chunk, with_entropy, fp32, onednn
    )
    full = torch.zeros(mask.shape, dtype=logps.dtype, device=hidden.device)
    return full.masked_scatter(mask, logps), None if entropy is None else full.masked_scatter(mask, entropy)
