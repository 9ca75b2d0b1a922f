"""``direction_monitor``: directional change of the update's top singular directions vs a reference.

Seed 004 #10's diagnostic (reward-hacking runs show a much larger directional change than clean
runs). It only measures; gradients are never changed. Per selected 2-D parameter with update
``X [m, n]`` and reference ``ΔW = U_ref S V_ref^T`` (rlpost/grad/subspace.py)::

    U_cur, V_cur   = top-k singular vectors of X           k = rank (after dropping zero directions)
    change_left    = 1 - ||U_ref^T U_cur||_F^2 / min(k_ref, k_cur)     = 1 - mean cos^2(principal angles)
    change         = change_left | change_right | (left + right) / 2   (side = left | right | both)
    outside_energy = 1 - ||P(X)||_F^2 / ||X||_F^2                      (P: trusted_projection's projector)

Choices where the abstract is silent:
- The update ``X`` (``update``): ``cumulative`` (default) = ``W_now - W_start`` (start = the first
  step seen), the run's trajectory so far; ``step`` = ``W_now - W_prev``, the last optimizer step's
  actual change (AdamW included); ``grad`` = this step's accumulated gradient (before clipping).
  Cumulative is the default because the paper's "stable low-dimensional learning trajectory" is the
  accumulated update, while one AdamW step is shaped by elementwise normalization (close to a sign
  step early on; an expectation, not measured here), which blurs its spectrum.
  With ``source=warmup`` the cumulative change is 0 at step K by construction and grows with drift.
- The reference comes from the same settings as trusted_projection (``source=file|warmup``,
  ``rank``, ``energy``, ``side``, ``include``/``exclude``); nothing is logged before it exists.
- Matrices whose update is 0 are left out of the means; an empty reference (k_ref = 0) counts as 1.
- Cost: one top-k SVD per matrix per measured step (randomized for large matrices), ``every`` N
  steps. With ``cumulative`` the randomized SVD starts from the previous step's basis and does one
  power iteration (subspace iteration carried across steps: the cumulative update moves slowly), about
  half the cost of a cold start; the first measurement and ``step``/``grad`` start cold (``niter``).
  ``cumulative`` keeps one copy of the selected matrices; ``step`` copies them every step.
Metrics (logged as ``grad/<key>``), over matrices: ``direction/change_mean``, ``direction/change_max``,
``direction/outside_energy_mean``, ``direction/matrices`` (how many were measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.grad.base import GRAD_TRANSFORMS, GradTransform
from rlpost.grad.subspace import Reference, SubspaceSettings, directional_change, kept_energy, tracked_top_singular
from rlpost.grad.trusted_projection import check_compatible, no_gradients_message

if TYPE_CHECKING:
    from rlpost.core.config import HardwareConfig


@GRAD_TRANSFORMS.register("direction_monitor")
class DirectionMonitor(GradTransform):
    """Log the directional change of the update's top singular directions vs a clean reference (no grad change)."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)
    measures_only = True  # never changes p.grad: no activity figure (GradTransform.apply)

    seed = "seed 004 #10"

    @dataclass(frozen=True)
    class Config(SubspaceSettings):
        update: Literal["cumulative", "step", "grad"] = "cumulative"  # W - W_start | W - W_prev | gradient
        every: Annotated[int, Range(ge=1)] = 1  # measure every N steps

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.every < 1:
                raise ValueError(f"every must be >= 1, got {self.every}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.reference = Reference(self.cfg, keep_start=self.cfg.update == "cumulative")
        self.previous: dict[str, torch.Tensor] = {}  # update=step: the parameters at the last call
        self.warm: dict[str, torch.Tensor] = {}  # update=cumulative: last randomized-SVD basis per matrix

    @torch.no_grad()
    def __call__(self, named_params: list[tuple[str, torch.nn.Parameter]], step: int) -> dict[str, float]:
        """Reads p [m, n] (and p.grad for update=grad) of the selected params; returns metrics."""
        mats, _ = self.reference.select(named_params)
        if not mats:
            raise ConfigError(no_gradients_message("direction_monitor", named_params))
        measure = self.reference.update(mats, step) and step % self.cfg.every == 0
        previous = self.previous
        if self.cfg.update == "step":  # the snapshot moves every step, measured or not
            self.previous = {n: p.detach().clone() for n, p in mats}
        if not measure or (self.cfg.update == "step" and not previous):
            return {}
        changes, outside = [], []
        for name, p in mats:
            x = self._update(name, p, previous)  # [m, n] float32, one matrix at a time
            norm2 = float(torch.linalg.vector_norm(x)) ** 2
            if norm2 == 0.0:
                continue
            u_ref, v_ref = self.reference.basis(name, p)
            start = self.warm.get(name) if self.cfg.update == "cumulative" else None
            u, _, v, basis = tracked_top_singular(x, self.cfg.rank, self.cfg.svd, self.cfg.niter, start)
            if self.cfg.update == "cumulative" and basis is not None:
                self.warm[name] = basis
            left, right = directional_change(u_ref, u), directional_change(v_ref, v)
            changes.append({"left": left, "right": right, "both": (left + right) / 2}[self.cfg.side])
            outside.append(1.0 - kept_energy(x, u_ref, v_ref, self.cfg.side) / norm2)
        if not changes:
            return {}
        return {
            "direction/change_mean": sum(changes) / len(changes),
            "direction/change_max": max(changes),
            "direction/outside_energy_mean": sum(outside) / len(outside),
            "direction/matrices": float(len(changes)),
        }

    def _update(self, name: str, p: torch.Tensor, previous: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.cfg.update == "grad":
            return p.grad.float()
        if self.cfg.update == "step":
            return p.float() - previous[name].to(p.device, torch.float32)
        return p.float() - self.reference.start_of(name, p)

    def check_compatible(self, hardware: HardwareConfig) -> None:
        check_compatible(hardware, "direction_monitor")

    def state_dict(self) -> dict[str, Any]:
        return {"reference": self.reference.state_dict(), "previous": self.previous, "warm": self.warm}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reference.load_state_dict(state["reference"])
        self.previous = dict(state["previous"])
        self.warm = dict(state.get("warm", {}))

    def describe(self) -> str:
        c = self.cfg
        where = f"file {c.path}" if c.source == "file" else f"W[{c.warmup_steps}] - W[0]"
        return (
            f"measures only: 1 - ||U_ref^T U_cur||_F^2 / k of the {c.update} update's top-{c.rank} "
            f"singular directions ({c.side}) vs ΔW from {where}, every {c.every} step(s)"
        )
