"""Step-dependent rewards and a recording callback for the safety-kit trainer tests."""

import zlib

import torch
from transformers import TrainerCallback

from rlpost.core.chat import completion_text


def _hash(c) -> float:
    return (zlib.crc32(completion_text(c).encode()) % 1000) / 1000


def collapsing_reward(prompts, completions, trainer_state=None, **kwargs):
    """The hash reward in [0, 1) for the first 3 optimizer steps, then 10 lower (a reward collapse)."""
    drop = 10.0 if trainer_state is not None and trainer_state.global_step >= 3 else 0.0
    return [_hash(c) - drop for c in completions]


def params_of(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """torch.equal on every parameter."""
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


class Recorder(TrainerCallback):
    """Weights at the start (W_s, before step s's update) and end of every step s (0-based)."""

    def __init__(self, optimizer_state: bool = False):
        self.begin: list[dict] = []
        self.end: list[dict] = []
        self.opt_begin: list[dict] = []
        self.opt_end: list[dict] = []
        self.optimizer_state = optimizer_state

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.begin.append(params_of(model))
        if self.optimizer_state:
            self.opt_begin.append(_opt_copy(optimizer))

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.end.append(params_of(model))
        if self.optimizer_state:
            self.opt_end.append(_opt_copy(optimizer))


def _opt_copy(optimizer) -> dict:
    inner = getattr(optimizer, "optimizer", optimizer)
    return {i: {k: v.clone() for k, v in s.items()} for i, s in inner.state_dict()["state"].items()}
