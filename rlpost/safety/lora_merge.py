"""LoRA merge-and-reinitialize every K steps (seed 000 #16).

The seed found "silent LoRA parameter freezing in standard PEFT/TRL pipelines" and fixes it by
merging the adapter into the base weights and re-initializing it. Every K optimizer steps, for each
LoRA layer and adapter ``a``::

    W_base <- W_base + scale_a * B_a @ A_a         (peft's ``get_delta_weight``: fan-in/out and scaling)
    A_a    <- kaiming-uniform (peft's default init),   B_a <- 0
    optimizer state of A_a, B_a <- empty            (AdamW moments and step count start over)

so the function the model computes is unchanged at the merge (B = 0 makes the new adapter a no-op)
while the adapter restarts from a fresh, trainable point.

Choices where the abstract is silent: the merge runs at the end of an optimizer step (after the
update, before logging) when ``global_step % K == 0``; the new ``A`` is drawn from torch's global
RNG (seeded by the run); with fp32 master weights the adapter's masters are re-set too; the base
weights are written in their own dtype. With LoRA, TRL's reference model is the base model with
the adapter disabled, so after a merge a KL term is measured against the merged weights.
Metric ``safety/lora_merges`` (cumulative count).
"""

from __future__ import annotations

import torch

from rlpost.safety.fp32_updates import MasterWeights


def lora_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from peft.tuners.lora.layer import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def lora_base_weights(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The (frozen) base weights a merge writes into, named as in ``model.named_parameters``."""
    layers = {id(m) for m in lora_layers(model)}
    named = []
    for name, module in model.named_modules():
        if id(module) in layers:
            named.append((f"{name}.base_layer.weight", module.get_base_layer().weight))
    return named


@torch.no_grad()
def merge_and_reinit(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, masters: MasterWeights | None = None
) -> int:
    """Merge every LoRA adapter into its base weight and re-initialize it; returns the layers merged."""
    merged = 0
    for layer in lora_layers(model):
        for adapter in list(layer.lora_A.keys()):
            base = layer.get_base_layer().weight
            base.add_(layer.get_delta_weight(adapter).to(base.dtype))
            layer.reset_lora_parameters(adapter, init_lora_weights=True)
            for param in (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight):
                if masters is not None:
                    masters.write(param, param.detach().float())
                if optimizer is not None:
                    target = masters.master_of(param) if masters is not None else param
                    optimizer.state.pop(target, None)
            merged += 1
    return merged
