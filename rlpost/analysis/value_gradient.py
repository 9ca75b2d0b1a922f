"""The value-gradient signal of seed 004 #13, measured for ``rlpost diagnose`` next to the reward headroom.

The seed shows that a critic-free actor update (GRPO's) is value-gradient-like *in expectation*: the
policy gradient ``g = E[A * grad log pi(y | x)]`` estimates the gradient of the expected reward, with an
error controlled by the sampling gap and the policy's entropy. So the measurable signal is the part of
the sampled policy gradient that is reproducible across independent prompt samples, not its raw norm
(which sampling noise inflates). On ``P`` prompts with ``n`` samples each::

    A_ij   = (r_ij - mean_j r_i.) / (std_j r_i. + eps)                 GRPO's group advantage
    g_h    = 1 / (|h| n) * sum_{i in h} sum_j A_ij * grad sum_t log pi(y_ijt | x_i, y_ij<t)
             for the two halves h = even / odd prompts (independent samples of the same expectation)
    signal    = sqrt(max(g_1 . g_2, 0))      E[g_1 . g_2] = ||E g||^2: an estimate of the value-gradient norm
    agreement = g_1 . g_2 / (||g_1|| ||g_2||)   cosine of the two halves: > 0 when a direction is shared
    noise     = ||g_1 - g_2|| / 2               the sampling part of one half's estimate

Choices where the abstract is silent: the two-half split (the simplest unbiased estimate of ||E g||^2),
GRPO's advantage (the update the run will make), gradients of every trainable parameter in fp32,
and the mean token entropy of the samples reported beside (the abstract's error control).
"""

from __future__ import annotations

import math

import torch


def split_half_stats(g1: torch.Tensor, g2: torch.Tensor) -> dict[str, float]:
    """Flat gradients of the two halves [D] -> signal, agreement and noise (module docstring)."""
    dot = float(torch.dot(g1.double(), g2.double()))
    norms = float(g1.double().norm()) * float(g2.double().norm())
    return {
        "value_gradient_signal": math.sqrt(max(dot, 0.0)),
        "value_gradient_agreement": dot / norms if norms > 0 else 0.0,
        "value_gradient_noise": float((g1.double() - g2.double()).norm()) / 2,
    }


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """rewards [P, n] (NaN = unscorable, counted as the group mean) -> GRPO advantages [P, n]."""
    mean = torch.nanmean(rewards, dim=1, keepdim=True)
    filled = torch.where(torch.isnan(rewards), mean, rewards)
    std = filled.std(dim=1, keepdim=True) if rewards.size(1) > 1 else torch.zeros_like(mean)
    return ((filled - mean) / (std + eps)).nan_to_num(0.0)


def accumulate_policy_gradient(
    model: torch.nn.Module, prompt_ids: list[int], samples: list[list[int]], advantages: list[float], scale: float
) -> tuple[float, int]:
    """One prompt's samples: adds grad of ``scale * sum_j A_j sum_t log pi(y_jt | x, y_j<t)`` to the parameters'
    ``.grad`` (one sample at a time, no padding); returns the samples' summed token entropy and token count."""
    entropy, tokens = 0.0, 0
    device = next(model.parameters()).device
    for ids, a in zip(samples, advantages):
        if not ids:
            continue
        x = torch.tensor([prompt_ids + ids], device=device)
        with torch.set_grad_enabled(a != 0.0):  # a zero advantage adds nothing: its entropy only
            logits = model(input_ids=x).logits[0, len(prompt_ids) - 1 : -1].float()  # [T, V] predicting the sample
            logp = torch.log_softmax(logits, dim=-1)
            if a != 0.0:
                (scale * a * logp.gather(1, torch.tensor(ids, device=device)[:, None]).sum()).backward()
        with torch.no_grad():
            entropy += float(-(logp.exp() * logp).sum(-1).sum())
        tokens += len(ids)
    return entropy, tokens


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    """Every trainable parameter's .grad, flattened in fp32 [D] (zeros where a parameter has none)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1) for p in params]
    )
