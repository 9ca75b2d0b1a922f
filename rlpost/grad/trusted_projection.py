"""``trusted_projection``: gradients projected onto a clean reference subspace per weight matrix.

Seed 004 #10 (trusted-direction projection): reward hacking shows up as drift away from the
dominant singular directions of clean parameter updates; constraining the gradients to the clean
subspace delays shortcut exploitation. Per selected 2-D parameter ``W [m, n]`` with gradient
``G [m, n]`` and reference ``ΔW = U S V^T`` (top-k, rlpost/grad/subspace.py)::

    side=both  (default)  G <- U U^T G V V^T
    side=left             G <- U U^T G
    side=right            G <- G V V^T
    G <- G + strength * (P(G) - G)         strength=1: the projection itself (idempotent)

Choices where the abstract is silent:
- Reference: ``source=file`` reads a subspace saved by ``rlpost subspace --from A --to B`` (two
  checkpoints of a clean run); ``source=warmup`` snapshots the parameters at the first step and at
  step ``warmup_steps`` = K builds the subspace from ``W_K - W_0``: steps 0..K-1 are unconstrained
  (the early phase is taken as clean: DESIGN.md saw a format bonus hacked within 12 steps), the
  gradient of step K is the first projected. The subspace (and the snapshot, while pending) is in
  every checkpoint (``state_dict``), so a resumed run projects onto the same subspace.
- ``side=both`` by default: the update then stays in the span of ``u_i v_j^T`` (row and column
  spaces both trusted), the strictest reading of "remain within the reference subspace".
- The transform runs on the accumulated gradient before clipping (trainer stage 6), so the clipped
  and logged norm is the projected one. The optimizer is not changed: with AdamW the applied
  update is the elementwise-preconditioned projected gradient, close to but not exactly inside the
  subspace (exactly inside with SGD). Projection shrinks the gradient norm; no rescaling is done.
- Which params: ``include``/``exclude`` regexes on canonical names select them (default: all but
  ``embed_tokens|lm_head``, whose rows are token-sparse); unselected params are untouched. Selected
  non-2-D params (norms, biases) pass (``vectors=pass``) or get a zero gradient (``vectors=zero``,
  from step K on; AdamW's momentum and weight decay may still move them).
- LoRA: the trainable 2-D params are ``lora_A`` / ``lora_B``; each gets its subspace from its own
  update, through the same path (not from the effective ``B A``). A selected matrix whose reference
  update is 0 gets k = 0 (zero gradient, with a warning): with ``source=warmup`` use K >= 2, since
  ``lora_A`` gets no gradient while ``lora_B`` is still 0. A selected matrix missing from a subspace
  file is an error, not a silent pass.
- Not compatible with DeepSpeed ZeRO (``check_compatible(hardware)``, also a method of both
  components): there gradients are flattened, partitioned buffers and ``p.grad`` is not the whole
  matrix. A step where no selected 2-D parameter has a gradient raises instead of doing nothing.
- The seam runs inside the trainer's ``_clip_grad_norm``, which transformers calls only when
  ``train.max_grad_norm > 0``.
Metrics (logged as ``grad/<key>``): ``projection/active`` (0 during warmup, then 1),
``projection/kept_norm_ratio`` (||P(G)|| / ||G|| over all projected matrices),
``projection/kept_norm_ratio_min`` (the smallest per matrix), ``projection/rank_mean`` (mean k).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.grad.base import GRAD_TRANSFORMS, GradTransform
from rlpost.grad.subspace import Reference, SubspaceSettings, project_

if TYPE_CHECKING:
    from rlpost.core.config import HardwareConfig


def check_compatible(hardware: HardwareConfig, component: str = "trusted_projection") -> None:
    """Raise ConfigError for hardware profiles whose ``p.grad`` is not the whole matrix (DeepSpeed ZeRO)."""
    name, stage = str(hardware.name), hardware.zero_stage
    if stage or re.search(r"zero[-_]?\d", name, re.IGNORECASE):
        raise ConfigError(
            f"algorithm/grad={component} needs each weight matrix's whole gradient, but hardware={name} runs "
            "DeepSpeed ZeRO, where gradients are flattened, partitioned buffers (ZeRO-2/3 shard them across "
            "processes) and p.grad is not the matrix: use hardware=cpu or gpu (DDP also works), or drop algorithm/grad."
        )


@GRAD_TRANSFORMS.register("trusted_projection")
class TrustedProjection(GradTransform):
    """Project gradients onto the top singular directions of a clean reference update (per matrix)."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    seed = "seed 004 #10"

    @dataclass(frozen=True)
    class Config(SubspaceSettings):
        vectors: Literal["pass", "zero"] = "pass"  # selected 1-D params (norms, biases): unchanged | zero grad
        # 1 = full projection; s in (0, 1) removes only s of the out-of-subspace part
        strength: Annotated[float, Range(gt=0, le=1)] = 1.0

        def __post_init__(self) -> None:
            super().__post_init__()
            if not 0.0 < self.strength <= 1.0:
                raise ValueError(f"strength must be in (0, 1], got {self.strength}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.reference = Reference(self.cfg)

    @torch.no_grad()
    def __call__(self, named_params: list[tuple[str, torch.nn.Parameter]], step: int) -> dict[str, float]:
        """Modifies ``p.grad`` [m, n] of the selected params in place; returns metrics."""
        mats, others = self.reference.select([(n, p) for n, p in named_params if p.grad is not None])
        if not mats:
            raise ConfigError(no_gradients_message("trusted_projection", named_params))
        if not self.reference.update(mats, step):
            return {"projection/active": 0.0}
        kept2 = total2 = 0.0
        ratios, ranks = [], []
        for name, p in mats:
            u, v = self.reference.basis(name, p)
            before, after = project_(p.grad, u, v, self.cfg.side, self.cfg.strength)
            total2, kept2 = total2 + before, kept2 + after
            if before > 0:
                ratios.append((after / before) ** 0.5)
            ranks.append(u.size(1))
        if self.cfg.vectors == "zero":
            for _, p in others:
                p.grad.zero_()
        return {
            "projection/active": 1.0,
            "projection/kept_norm_ratio": (kept2 / total2) ** 0.5 if total2 > 0 else 1.0,
            "projection/kept_norm_ratio_min": min(ratios) if ratios else 1.0,
            "projection/rank_mean": sum(ranks) / len(ranks),
        }

    def check_compatible(self, hardware: HardwareConfig) -> None:
        check_compatible(hardware, "trusted_projection")

    def state_dict(self) -> dict[str, Any]:
        return self.reference.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reference.load_state_dict(state)

    def describe(self) -> str:
        c = self.cfg
        where = (
            f"file {c.path}"
            if c.source == "file"
            else f"W[{c.warmup_steps}] - W[0] (steps 0..{c.warmup_steps - 1} free)"
        )
        cut = f"rank <= {c.rank}" + (f", energy {c.energy:g}" if c.energy is not None else "")
        formula = {"both": "U U^T G V V^T", "left": "U U^T G", "right": "G V V^T"}[c.side]
        return f"G <- {formula} per 2-D weight; U, V: top singular vectors of ΔW from {where}; {cut}"


def no_gradients_message(component: str, named_params: list) -> str:
    names = [n for n, _ in named_params][:3]
    return (
        f"algorithm/grad={component}: no selected 2-D trainable parameter has a gradient "
        f"({len(named_params)} params with gradients, e.g. {names}); check algorithm.grad.{component}.include / exclude. "
        "Under DeepSpeed ZeRO p.grad is not populated: this method needs plain (DDP) gradients."
    )
