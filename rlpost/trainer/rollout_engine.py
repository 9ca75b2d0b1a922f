"""Where the rollouts come from when they are not the policy's own: a lower-precision copy, a peer model.

``RolloutEngine`` makes the train-inference mismatch real on any machine. With
``rollout_precision=bf16`` it keeps a bf16 copy of the policy, copies the policy's weights into it
before every generation (one ``load_state_dict``, cast on copy), samples the rollouts with it and
scores them with it: those are the behaviour log-probs the corrections compare with the trainer's
fp32 log-probs. With ``rollout_precision=fp8`` the copy is bf16 with its Linear layers in fake FP8
(weights and inputs rounded through e4m3, rlpost/models/fake_fp8.py), re-rounded after every copy: an
FP8 inference engine's mismatch, several times the bf16 one. With ``rollout_precision=fp32`` the copy
is exact, so every weight is exactly 1: the end-to-end check of the plumbing. A peer model (``f_tis``'s ``peer_model``) samples the last
``peer_per_group`` completions of every group and scores them itself.

Choices: a separate copy synced before each generation rather than rounding the policy in place around
generation and restoring it: the behaviour log-probs are computed after generation (stage 3), so an
in-place rounding would have to be redone there and restored twice, and a bitwise restore needs a
full copy of the weights anyway, the memory the copy takes. Behaviour log-probs come from a full forward of the generating model with TRL's own
log-prob function (temperature-scaled, like the trainer's), not from ``generate``'s cached scores,
so train and behaviour differ only by the model and its dtype; the copy is a ``deepcopy`` of the
unwrapped policy (LoRA adapters included), so it is not available under DeepSpeed ZeRO-3, whose
parameters are partitioned. Peers are frozen and must share the policy's tokenizer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import ExitStack

import torch
from trl.trainer.utils import add_fused_lm_head

from rlpost.generation.kv_cache import preallocated_generation
from rlpost.generation.prefix_generation import shared_prefix_generation
from rlpost.models.fake_fp8 import quantize_linears, round_weights
from rlpost.models.options import load_frozen

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.bfloat16}  # fp8: a bf16 copy, fake-FP8 linears


def _fused_head(model, trainer) -> None:
    """TRL's fused log-prob head on ``model`` (the copy: drop the patch inherited from the policy first)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.__dict__.pop("forward", None)  # the policy's patched forward, bound to the policy's own original
    add_fused_lm_head(
        base,
        temperature=trainer.temperature,
        cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32,
        outputs=("log_probs", "entropy"),
    )


@torch.no_grad()
def sample(model, prompt_ids: list[list[int]], trainer) -> list[list[int]]:
    """Left-pad the prompts, sample with the trainer's generation config, cut each completion after its first EOS."""
    if not prompt_ids:
        return []
    device = trainer.accelerator.device
    pad_id = trainer._tokenizer.pad_token_id
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long, device=device)
    attention_mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(prompt_ids):
        input_ids[i, width - len(ids) :] = torch.tensor(ids, device=device)
        attention_mask[i, width - len(ids) :] = 1
    train = trainer.run.settings.train
    with ExitStack() as stack:  # the preallocated cache last: the shared prefill fills it
        if train.shared_prefix:
            stack.enter_context(shared_prefix_generation(model))
        if train.kv_cache == "preallocated":
            stack.enter_context(preallocated_generation(model))
        out = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, generation_config=trainer.generation_config
        )
    eos = set(trainer.eos_token_ids)
    completions = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, token in enumerate(row) if token in eos), len(row))
        completions.append(row[:cut])
    return completions


class RolloutEngine:
    """Generates rollouts with a lower-precision policy copy and/or a peer model, and scores them (behaviour log-probs)."""

    def __init__(self, trainer, precision: str | None, peer_config=None, peer_per_group: int = 0):
        if trainer.tools:  # TRL's tool loop calls _generate_single_turn again on a subset of the rows
            raise ValueError("rollout copies and peer models (algorithm.correction) do not support tool calling")
        policy = trainer.accelerator.unwrap_model(trainer.model)
        self.copy = None
        if precision is not None:
            self.copy = copy.deepcopy(policy).to(DTYPES[precision]).eval().requires_grad_(False)
            _fused_head(self.copy, trainer)
            if precision == "fp8":
                quantize_linears(self.copy)
        self.fp8 = precision == "fp8"
        self.peer = None
        self.peer_per_group = peer_per_group if peer_config is not None else 0
        if peer_config is not None:
            self.peer = load_frozen(
                peer_config,
                tokenizer=trainer._tokenizer,
                device=trainer.accelerator.device,
                temperature=trainer.temperature,
            )
        self.peer_rows: list[bool] = []  # this process's rows of the last generation: sampled by the peer

    def sync(self, trainer) -> None:
        """Copy the policy's current weights into the rollout copy (cast to its dtype; fp8: rounded again)."""
        if self.copy is not None:
            self.copy.load_state_dict(trainer.accelerator.unwrap_model(trainer.model).state_dict())
            if self.fp8:
                round_weights(self.copy)

    def generate(self, trainer, prompt_ids: list[list[int]], num_generations: int, own: Callable) -> list[list[int]]:
        """Completion ids for this process's prompts; ``own(prompt_ids)`` is TRL's generation with the policy itself."""
        self.sync(trainer)
        start = trainer.accelerator.process_index * len(prompt_ids)
        k = self.peer_per_group if trainer.model.training else 0
        self.peer_rows = [(start + i) % num_generations >= num_generations - k for i in range(len(prompt_ids))]
        mine = [ids for ids, p in zip(prompt_ids, self.peer_rows) if not p]
        theirs = [ids for ids, p in zip(prompt_ids, self.peer_rows) if p]
        mine_out = sample(self.copy, mine, trainer) if self.copy is not None else (own(mine) if mine else [])
        theirs_out = iter(sample(self.peer, theirs, trainer))
        mine_iter = iter(mine_out)
        return [next(theirs_out) if p else next(mine_iter) for p in self.peer_rows]

    @torch.no_grad()
    def behaviour_logps(self, trainer, output: dict, train_logps: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of the sampled tokens under the model that sampled each row (train_logps for the policy's own)."""
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        peer = torch.tensor(self.peer_rows, dtype=torch.bool, device=input_ids.device)
        behaviour = train_logps.clone()
        for model, rows in ((self.copy, ~peer), (self.peer, peer)):
            if model is None or not rows.any():
                continue
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model,
                input_ids[rows],
                attention_mask[rows],
                output["completion_ids"].size(1),
                batch_size=trainer.args.per_device_train_batch_size,
            )
            behaviour[rows] = logps.to(behaviour.dtype)
        return behaviour
