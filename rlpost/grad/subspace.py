"""Reference subspaces of weight updates (seed 004 #10): the math and the file format (the command
``rlpost subspace`` is rlpost/tools/subspace.py).

For a 2-D weight ``W [m, n]`` and an update ``X [m, n]`` (``ΔW = W_clean_end - W_clean_start``)::

    X ~ U_k diag(S_k) V_k^T          U_k [m, k], V_k [n, k]: top-k singular vectors
    left  : P(G) = U_k U_k^T G                     (columns of G in span U_k)
    right : P(G) = G V_k V_k^T                     (rows of G in span V_k)
    both  : P(G) = U_k U_k^T G V_k V_k^T           (the k*k-dim span of u_i v_j^T)
    directional change(U_ref, U_cur) = 1 - ||U_ref^T U_cur||_F^2 / min(k_ref, k_cur)   in [0, 1]

``||U_ref^T U_cur||_F^2`` is the sum of cos^2 of the principal angles between the two spans, so
the change is 1 - mean cos^2: 0 when span U_cur lies in span U_ref, 1 when they are orthogonal.

Choices where the abstract is silent:
- Rank: ``rank`` is the cap; ``energy`` (optional) keeps the smallest k whose sum of S_i^2 reaches
  that fraction of ``||X||_F^2`` (exact, not of the truncated spectrum). Directions with
  ``S_i <= RTOL * S_1`` are dropped (an exactly rank-1 update gives k = 1, not 7 noise directions);
  a matrix whose update is 0 gets k = 0 (its projected gradient is 0).
- SVD: ``full`` = ``torch.linalg.svd``; ``lowrank`` = a randomized range finder (q = k + 8 columns,
  ``niter`` power iterations, re-orthonormalized by QR) with its own seeded generator, so it is
  deterministic, identical on every DDP rank and never consumes the global RNG (rollout sampling
  is unchanged by turning the method on); ``auto`` = full when min(m, n) <= 4 (k + 8) (LoRA
  matrices), else lowrank. All SVDs run in float32.
- Names are canonical: a leading ``module.``/``_orig_mod.`` and PEFT's adapter name
  (``lora_A.default.weight`` -> ``lora_A.weight``) are removed, so the keys of a saved
  ``adapter_model.safetensors`` match the live parameters. With LoRA the trainable 2-D params are
  the ``lora_A [r, in]`` / ``lora_B [out, r]`` matrices: their subspaces come from their own updates
  (not from the effective ``B A``) through the same code path.
- File (``torch.save``, loadable with ``weights_only=True``): ``{"format": FORMAT, "meta": {...},
  "matrices": {name: {"U": [m, k], "V": [n, k], "S": [k], "energy": ||ΔW||_F^2 (0-d)}}}``; float32 on CPU.
"""

from __future__ import annotations

import os
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import PathSpec, Range, path_kind, require_file

FORMAT = "rlpost-subspace-v1"


@path_kind("subspace_file", "source=file: a subspace file written by `rlpost subspace`")
def check_subspace_file(path: str, key: str, cfg: Any) -> None:
    """An existing file in ``torch.save``'s zip format (read only when the run starts)."""
    if getattr(cfg, "source", "file") == "file":
        require_file(path, key, hint="build one with `rlpost subspace`")
        if not zipfile.is_zipfile(os.path.expanduser(path)):
            raise ConfigError(f"{key}={path!r} is not a subspace file; build one with `rlpost subspace`.")


RTOL = 1e-4  # singular values <= RTOL * S_1 are numerical zeros
OVERSAMPLE = 8  # extra columns of the randomized range finder
SVD_SEED = 1234  # the randomized SVD's private generator
Basis = dict[str, torch.Tensor]  # {"U": [m, k], "V": [n, k], "S": [k], "energy": []}


@dataclass(frozen=True)
class SubspaceSettings:
    """Where the reference comes from and how it is cut (shared by trusted_projection and direction_monitor)."""

    source: Literal["file", "warmup"] = "warmup"  # a saved subspace, or the first warmup_steps of this run
    # the subspace file (source=file), from `rlpost subspace`
    path: Annotated[str | None, PathSpec("subspace_file")] = None
    warmup_steps: Annotated[int, Range(ge=1)] = 4  # source=warmup: ΔW = W[step K] - W[step 0]
    rank: Annotated[int, Range(ge=1)] = 8  # top-k singular directions per matrix (the cap when energy is set)
    # keep the smallest k with sum S_i^2 >= energy * ||ΔW||_F^2
    energy: Annotated[float | None, Range(gt=0, le=1)] = None
    side: Literal["left", "right", "both"] = "both"  # U U^T G | G V V^T | U U^T G V V^T
    include: str | None = None  # regex on parameter names (re.search); null = every trainable param
    exclude: str | None = "embed_tokens|lm_head"  # regex of names left untouched; null = none
    svd: Literal["auto", "full", "lowrank"] = "auto"  # exact or randomized SVD
    niter: Annotated[int, Range(ge=0)] = 2  # power iterations of the randomized SVD

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if self.energy is not None and not 0.0 < self.energy <= 1.0:
            raise ValueError(f"energy must be in (0, 1], got {self.energy}")
        if self.warmup_steps < 1:
            raise ValueError(f"warmup_steps must be >= 1, got {self.warmup_steps}")
        if self.niter < 0:
            raise ValueError(f"niter must be >= 0, got {self.niter}")
        if self.source == "file" and not self.path:
            raise ValueError("source=file needs path=<subspace file> (build one with `rlpost subspace`)")
        for key in ("include", "exclude"):
            try:
                re.compile(getattr(self, key) or "")
            except re.error as err:
                raise ValueError(f"{key}={getattr(self, key)!r} is not a valid regex: {err}") from None

    def selects(self, name: str) -> bool:
        """Is the (canonical) parameter name governed by the method?"""
        if self.include is not None and not re.search(self.include, name):
            return False
        return self.exclude is None or not re.search(self.exclude, name)


def canonical_name(name: str) -> str:
    """``module.base_model...lora_A.default.weight`` -> ``base_model...lora_A.weight``."""
    name = re.sub(r"^(module\.|_orig_mod\.)+", "", name)
    return re.sub(r"(lora_(?:A|B|embedding_A|embedding_B))\.(?!weight$)[^.]+\.", r"\1.", name)


def top_singular(x: torch.Tensor, k: int, svd: str = "auto", niter: int = 2):
    """``x [m, n]`` -> ``U [m, k'], S [k'], V [n, k']`` (float32), k' <= k after dropping zeros."""
    return tracked_top_singular(x, k, svd, niter)[:3]


def tracked_top_singular(x: torch.Tensor, k: int, svd: str = "auto", niter: int = 2, start: torch.Tensor | None = None):
    """``top_singular`` plus the randomized SVD's whole basis ``[m, q]`` (None on the full-SVD path).

    ``start`` (that basis from the previous call on a slowly changing ``x``) replaces the random
    start, and a single power iteration then refines it (subspace iteration carried across steps)."""
    x = x.detach().float()
    m, n = x.shape
    k = min(k, m, n)
    basis = None
    if svd == "full" or (svd == "auto" and min(m, n) <= 4 * (k + OVERSAMPLE)):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
    else:
        if start is None:
            q = min(k + OVERSAMPLE, m, n)
            generator = torch.Generator().manual_seed(SVD_SEED)
            basis = torch.linalg.qr(x @ torch.randn(n, q, generator=generator).to(x.device)).Q  # [m, q]
        else:
            basis, niter = start, 1
        for _ in range(niter):
            basis = torch.linalg.qr(x @ torch.linalg.qr(x.T @ basis).Q).Q
        ub, s, vh = torch.linalg.svd(basis.T @ x, full_matrices=False)  # [q, n]
        u = basis = basis @ ub
    keep = int((s[:k] > RTOL * s[0]).sum()) if k > 0 and s.numel() and s[0] > 0 else 0
    return u[:, :keep], s[:keep], vh[:keep].T, basis


def select_rank(s: torch.Tensor, energy_total: float, rank: int, energy: float | None) -> int:
    """How many of the singular values ``s [k]`` (descending) to keep."""
    k = min(rank, s.numel())
    if energy is None or k == 0:
        return k
    reached = (torch.cumsum(s[:k].double() ** 2, 0) >= energy * energy_total * (1 - 1e-9)).nonzero()
    return int(reached[0]) + 1 if reached.numel() else k


def project(g: torch.Tensor, u: torch.Tensor, v: torch.Tensor, side: str) -> torch.Tensor:
    """``g [m, n]``, ``u [m, k]``, ``v [n, k]`` -> P(g) [m, n]; never forms an m x m projector."""
    if side == "left":
        return u @ (u.T @ g)
    if side == "right":
        return (g @ v) @ v.T
    return u @ ((u.T @ g) @ v) @ v.T


def project_(
    g: torch.Tensor, u: torch.Tensor, v: torch.Tensor, side: str, strength: float = 1.0
) -> tuple[float, float]:
    """``g <- g + strength * (P(g) - g)`` in place; returns (||g||^2 before, after). Three passes over ``g``:
    the norm, the thin product with U or V, and the product written into ``g`` (||P(g)|| is read off the
    small core: ||U^T g V|| = ||U U^T g V V^T|| for orthonormal U, V)."""
    x = g.float()
    before = float(torch.linalg.vector_norm(x)) ** 2
    if side == "left":
        core = u.T @ x  # [k, n]
        a, b = u, core
    elif side == "right":
        core = x @ v  # [m, k]
        a, b = core, v.T
    else:
        core = (u.T @ x) @ v  # [k, k]
        a, b = u, core @ v.T
    if strength == 1.0 and x is g:
        torch.matmul(a, b, out=g)
        return before, float(torch.linalg.vector_norm(core)) ** 2
    new = x + strength * (a @ b - x)
    g.copy_(new)
    return before, float(torch.linalg.vector_norm(new)) ** 2


def kept_energy(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, side: str) -> float:
    """||P(x)||_F^2 without forming P(x)."""
    core = u.T @ x if side == "left" else x @ v if side == "right" else (u.T @ x) @ v
    return float(torch.linalg.vector_norm(core)) ** 2


def directional_change(ref: torch.Tensor, cur: torch.Tensor) -> float:
    """``ref [m, k1]``, ``cur [m, k2]`` orthonormal -> 1 - ||ref^T cur||_F^2 / min(k1, k2)."""
    k = min(ref.size(1), cur.size(1))
    if k == 0:
        return 1.0
    return float(1.0 - (ref.T @ cur).pow(2).sum() / k)


def load_checkpoint_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint folder (``model*.safetensors`` or ``adapter_model.safetensors``) or one file."""
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_file():
        files = [path]
    else:
        files = sorted(path.glob("adapter_model.safetensors")) or sorted(path.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no model.safetensors or adapter_model.safetensors found")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update({canonical_name(k): v for k, v in load_file(str(file)).items()})
    return tensors


def parameter_deltas(a, b) -> dict[str, torch.Tensor]:
    """``b - a`` (float32) for every 2-D tensor the two share; ``a``/``b``: dicts or checkpoint paths."""
    a = load_checkpoint_tensors(a) if isinstance(a, (str, Path)) else a
    b = load_checkpoint_tensors(b) if isinstance(b, (str, Path)) else b
    deltas = {}
    for name in sorted(set(a) & set(b)):
        if a[name].dim() != 2:
            continue
        if a[name].shape != b[name].shape:
            raise ValueError(f"{name}: shapes differ ({tuple(a[name].shape)} vs {tuple(b[name].shape)})")
        deltas[name] = b[name].float() - a[name].float()
    if not deltas:
        raise ValueError("the two checkpoints share no 2-D weight (a full model vs a LoRA adapter?)")
    return deltas


def build_subspace(
    deltas: dict[str, torch.Tensor],
    rank: int,
    energy: float | None = None,
    settings: SubspaceSettings | None = None,
) -> dict[str, Basis]:
    """``{name: ΔW [m, n]}`` -> ``{name: {"U", "V", "S", "energy"}}`` for the names ``settings`` selects."""
    settings = settings or SubspaceSettings(exclude=None)
    out = {}
    for name, delta in deltas.items():
        if delta.dim() != 2 or not settings.selects(name):
            continue
        u, s, v = top_singular(delta, rank, settings.svd, settings.niter)
        total = delta.detach().float().pow(2).sum()
        k = select_rank(s, float(total), rank, energy)
        out[name] = {"U": u[:, :k].contiguous(), "V": v[:, :k].contiguous(), "S": s[:k].clone(), "energy": total}
    return out


def save_subspace(subspace: dict[str, Basis], path: str | Path, **meta) -> None:
    cpu = {n: {k: t.detach().float().cpu() for k, t in b.items()} for n, b in subspace.items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "meta": meta, "matrices": cpu}, path)


def load_subspace(path: str | Path) -> dict[str, Basis]:
    saved = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ValueError(f"{path}: not an rlpost subspace file (expected format {FORMAT!r})")
    return saved["matrices"]


class Reference:
    """The reference subspace of a run and the snapshot it needs: loaded from ``path``, or built at
    step ``start + warmup_steps`` from ``W_now - W_start`` (``start`` = the first call's step).

    ``keep_start`` keeps the start snapshot after the build (direction_monitor's cumulative update).
    Memory: the snapshot is one copy of the selected matrices, on their device, while it is kept.
    """

    def __init__(self, cfg: SubspaceSettings, keep_start: bool = False):
        self.cfg, self.keep_start = cfg, keep_start
        self.subspace: dict[str, Basis] | None = None
        self.start: dict[str, torch.Tensor] | None = None
        self.start_step: int | None = None
        self._bases: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._checked = False

    def select(self, named: list[tuple[str, torch.nn.Parameter]]) -> tuple[list, list]:
        """-> (2-D selected [(canonical name, p)], other-shaped selected [(name, p)])."""
        chosen = [(canonical_name(n), p) for n, p in named if self.cfg.selects(canonical_name(n))]
        return [(n, p) for n, p in chosen if p.dim() == 2], [(n, p) for n, p in chosen if p.dim() != 2]

    def update(self, mats: list[tuple[str, torch.Tensor]], step: int) -> bool:
        """Snapshot / load / build as due at ``step``; True once the subspace exists."""
        cfg = self.cfg
        if self.start_step is None and (cfg.source == "warmup" or self.keep_start):
            self.start = {n: p.detach().clone() for n, p in mats}
            self.start_step = step
        if self.subspace is None and cfg.source == "file":
            assert cfg.path is not None  # source=file requires a path (SubspaceSettings.__post_init__)
            self._set(load_subspace(cfg.path))
        elif self.subspace is None and self.start_step is not None and step - self.start_step >= cfg.warmup_steps:
            deltas = {n: p.detach().float() - self.start_of(n, p) for n, p in mats}
            self._set(build_subspace(deltas, cfg.rank, cfg.energy, cfg))
            if not self.keep_start:
                self.start = None
        if self.subspace is not None and not self._checked:
            self._check(mats)
        return self.subspace is not None

    def start_of(self, name: str, p: torch.Tensor) -> torch.Tensor:
        if self.start is None or name not in self.start:
            raise ConfigError(f"algorithm.grad: no start snapshot of {name} (parameters changed mid-run?)")
        return self.start[name].to(p.device, torch.float32)

    def basis(self, name: str, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U [m, k], V [n, k]) float32 on p's device, cached."""
        if name not in self._bases:
            assert self.subspace is not None, "basis() before the subspace exists"
            b = self.subspace[name]
            self._bases[name] = (b["U"].to(p.device, torch.float32), b["V"].to(p.device, torch.float32))
        return self._bases[name]

    def _set(self, subspace: dict[str, Basis]) -> None:
        cut = {}
        for name, b in subspace.items():
            k = select_rank(b["S"], float(b["energy"]), self.cfg.rank, self.cfg.energy)
            cut[name] = {"U": b["U"][:, :k], "V": b["V"][:, :k], "S": b["S"][:k], "energy": b["energy"]}
        self.subspace, self._bases, self._checked = cut, {}, False
        still = sorted(name for name, b in cut.items() if b["S"].numel() == 0)
        if still:
            warnings.warn(
                f"algorithm.grad: {len(still)} matrices have no reference update (e.g. {still[0]}): their subspace is "
                "empty (projected gradient 0). With LoRA and source=warmup use warmup_steps >= 2: lora_A gets no "
                "gradient while lora_B is still 0.",
                UserWarning,
                stacklevel=2,
            )

    def _check(self, mats: list[tuple[str, torch.Tensor]]) -> None:
        where = self.cfg.path if self.cfg.source == "file" else "the warmup subspace"
        assert self.subspace is not None, "_check() before the subspace exists"
        for name, p in mats:
            b = self.subspace.get(name)
            if b is None:
                some = ", ".join(sorted(self.subspace)[:3])
                raise ConfigError(
                    f"algorithm.grad: {where} has no matrix for parameter {name} ({len(self.subspace)} matrices, "
                    f"e.g. {some}). Build it from checkpoints of the same model and LoRA setup, or narrow "
                    "algorithm.grad.<name>.include / exclude."
                )
            if (b["U"].size(0), b["V"].size(0)) != tuple(p.shape):
                raise ConfigError(
                    f"algorithm.grad: {name} is {tuple(p.shape)} but {where} has {(b['U'].size(0), b['V'].size(0))}"
                )
        self._checked = True

    def state_dict(self) -> dict[str, Any]:
        return {
            "subspace": self.subspace or {},
            "start": self.start or {},
            "start_step": -1 if self.start_step is None else self.start_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.subspace = state["subspace"] or None
        self.start = state["start"] or None
        self.start_step = None if state["start_step"] < 0 else int(state["start_step"])
        self._bases, self._checked = {}, False
