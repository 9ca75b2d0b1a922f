"""An ensemble of K LoRA adapters over one frozen base model, with a switch for which adapter runs (UG-TTT).

Each target ``nn.Linear`` W gets K low-rank updates; the layer computes, for adapter k::

    y = W x + s * B_k A_k x                 A_k [r, in], B_k [out, r], s = alpha / r

The adapters are not wrapped modules: a forward hook on each target linear adds the update, and the
parameters live in one ``LoraEnsemble`` registered on the model as ``rlpost_ensemble``. So the base's
parameter names (and its saved ``model.safetensors``) stay those of the plain model, while the
optimizer, gradient clipping and DDP see the adapters as the model's only trainable parameters.

``use(k)`` selects adapter k for every forward inside it. Outside it the layers run the ensemble
mean ``s * mean_k B_k A_k x`` (the average of the K hypotheses in weight space): greedy evaluation and
anything else that does not pick an adapter sees that one policy. ``use(None)`` turns the adapters off
(the frozen base).

Choices where the seed (004 #28) is silent:
- ``A_k`` is initialised like LoRA (Kaiming-uniform) with its own random draw per adapter; ``B_k`` is
  not zero but Normal(0, ``init_std``): with B = 0 all adapters would equal the base, their
  disagreement (the exploration signal) would be exactly 0 and their distinctness undefined. The
  default ``init_std`` keeps each adapter within a tiny perturbation of the base.
- Distinctness (``distinctness``) is measured on what the adapters do to the batch, not on their weights:
  per layer, the K updates' outputs on the layer's token inputs X [N, in], ``U_k = X (B_k A_k)^T`` [N, out],
  stacked as rows vec(U_k), row-normalised; its nuclear norm (``sum_i sqrt(lambda_i(C))``, C the K x K cosine
  matrix) over K: 1 when the adapters' outputs are orthogonal, 1/sqrt(K) when they are one direction. The mean
  over layers is what the regularizer maximises; it never rewards larger updates, only different ones. X is the
  last generation batch's real tokens, recorded while the adapters score it for MI (``recording``): only its
  second moment ``S = X^T X`` [in, in] is kept, and ``<U_k, U_l>_F = sum (B_k^T B_l) * (A_k S A_l^T)`` in
  r x r blocks (no [N, out] output or [out, in] update is materialised). Before anything is recorded S = I,
  the cosine of the weight updates themselves.
  Why not the weights (issue 48): K independent random A_k span near-orthogonal row spaces (two random r-dim
  subspaces of R^in overlap by ~r/in), and every update B_k A_k stays in the row space of its own A_k (its
  gradient is ``dL/dy (A_k x)^T A_k``), so the updates' cosines are ~0 by construction: weight-space distinctness
  read 1.000 at every step of the bench run (in = 896), where the term sits at its maximum and its gradient is 0,
  whatever the adapters did to the tokens. On the batch's inputs, updates in different row spaces that move the
  layer's outputs the same way have cosine ~1 (``test_lora_ensemble.py::test_distinctness_on_the_inputs_by_hand``).
- Each eigenvalue enters as ``lambda / sqrt(lambda + eps)``, smooth at 0: clamping it at ``eps`` before the
  square root would cut the gradient of the vanishing eigenvalues and push nearly identical adapters together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import torch
from torch import nn

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

ATTRIBUTE = "rlpost_ensemble"  # the ensemble's name on the model (its parameters' prefix)
ENSEMBLE_FILE = "ensemble.safetensors"  # the adapters, next to the frozen base's model.safetensors


@dataclass(frozen=True)
class EnsembleConfig:
    """``algorithm.ensemble``: present = UG-TTT (the trainer is algorithms.ug_ttt.UGTTTTrainer)."""

    adapters: Annotated[int, Range(ge=2, why="disagreement needs two hypotheses")] = 3  # K LoRA adapters
    rank: Annotated[int, Range(ge=1)] = 8  # r of every adapter
    alpha: Annotated[float, Range(gt=0)] = 16.0  # LoRA scale alpha / r
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])  # linears that get adapters
    init_std: Annotated[float, Range(gt=0)] = 1e-3  # std of the random B_k at start (B = 0 would make them identical)
    mi_coef: Annotated[float, Range(ge=0)] = 0.1  # beta: advantage bonus per unit of per-token MI (nats)
    nuclear_coef: Annotated[float, Range(ge=0)] = 0.01  # lambda: weight of -distinctness (outputs on the batch)

    def __post_init__(self) -> None:
        if not self.target_modules:
            raise ValueError("algorithm.ensemble.target_modules must name at least one linear")


def check_ensemble(run) -> None:
    """What UG-TTT cannot be combined with (ConfigError before any model loads)."""
    cfg, settings = run.algorithm.ensemble, run.settings
    if cfg is None:
        return
    why = {
        "model.lora.enabled=true": (run.model.lora.enabled, "the ensemble is the run's LoRA; a second adapter stack "
                                    "would train under it (drop model.lora.enabled)"),
        f"hardware={run.hardware.name}": (run.hardware.use_vllm, "vLLM samples with its own copy of the weights, "
                                          "which has no adapters to pick from"),
        "hardware ZeRO-3": (run.hardware.zero_stage == 3, "the adapters' forward hooks need whole weights"),
        f"algorithm/correction={type(run.algorithm.correction).registry_name}": (
            run.algorithm.correction.cfg.rollout_precision is not None or run.algorithm.correction.peer is not None,
            "a rollout copy or peer model samples instead of the chosen adapter"),
        f"algorithm/rollout={type(run.algorithm.rollout).registry_name}": (
            type(run.algorithm.rollout).registry_name != "none",
            "rollout strategies rebuild the prompt rows, so a row's adapter would be lost"),
    }  # fmt: skip
    for key, (refused, reason) in why.items():
        if refused:
            raise ConfigError(f"algorithm.ensemble (UG-TTT) and {key} cannot be combined: {reason}.")
    if settings.train.num_generations < cfg.adapters:
        raise ConfigError(
            f"algorithm.ensemble.adapters={cfg.adapters} but train.num_generations={settings.train.num_generations}: "
            "each group spreads its completions over the adapters, so every adapter needs at least one "
            "(raise num_generations or lower adapters)."
        )


def describe_ensemble(cfg: EnsembleConfig) -> str:
    return (
        f"{cfg.adapters} LoRA adapters (r={cfg.rank}, alpha={cfg.alpha:g}, on {', '.join(cfg.target_modules)}) over "
        f"a frozen base; completion i of a group samples with adapter i mod {cfg.adapters}; advantage + "
        f"{cfg.mi_coef:g} x MI_t per token; loss - {cfg.nuclear_coef:g} x distinctness (nuclear norm)"
    )


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict keys cannot hold dots


class LoraEnsemble(nn.Module):
    """K LoRA adapters on the target linears of ``model``; ``use(k)`` picks the one that runs."""

    MEAN = "mean"  # the selection outside ``use``: the ensemble mean

    def __init__(
        self,
        model: nn.Module,
        adapters: int,
        rank: int,
        alpha: float,
        target_modules: list[str],
        init_std: float,
        seed: int,
    ):
        super().__init__()
        self.adapters, self.rank, self.scale = adapters, rank, alpha / rank
        self.active: int | str | None = self.MEAN
        self.inputs: dict[str, torch.Tensor] = {}  # per layer S = X^T X [in, in] of the last recorded batch
        self._record: torch.Tensor | None = None  # while recording: the token mask [b, L] of the forward in flight
        self.lora_A, self.lora_B = nn.ParameterDict(), nn.ParameterDict()
        generator = torch.Generator().manual_seed(seed)
        self.targets = [
            (name, module)
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules
        ]
        if not self.targets:
            raise ValueError(f"no nn.Linear named any of {target_modules} in the model")
        for name, module in self.targets:
            weight = module.weight
            bound = 1.0 / math.sqrt(module.in_features)  # Kaiming-uniform with a = sqrt(5), as LoRA's A
            a = (torch.rand(adapters, rank, module.in_features, generator=generator) * 2 - 1) * bound
            b = torch.randn(adapters, module.out_features, rank, generator=generator) * init_std
            self.lora_A[_key(name)] = nn.Parameter(a.to(weight.device, weight.dtype))
            self.lora_B[_key(name)] = nn.Parameter(b.to(weight.device, weight.dtype))
        for name, module in self.targets:
            module.register_forward_hook(self._hook(_key(name)))

    @classmethod
    def attach(cls, model: nn.Module, **kwargs) -> LoraEnsemble:
        """Freeze ``model`` and register a new ensemble on it as ``model.rlpost_ensemble``."""
        model.requires_grad_(False)
        ensemble = cls(model, **kwargs)
        model.add_module(ATTRIBUTE, ensemble)
        return ensemble

    def _hook(self, key: str):
        def add_update(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            if self.active is None:
                return output
            x = args[0]  # [..., in]
            if self._record is not None:
                self._accumulate(key, x)
            a, b = self.lora_A[key], self.lora_B[key]  # [K, r, in], [K, out, r]
            if self.active == self.MEAN:
                update = torch.einsum("kor,...kr->...o", b, torch.einsum("kri,...i->...kr", a, x)) / self.adapters
            else:
                update = (x @ a[self.active].T) @ b[self.active].T
            return output + self.scale * update.to(output.dtype)

        return add_update

    @contextmanager
    def use(self, adapter: int | None) -> Iterator[None]:
        """Run adapter ``adapter`` (None: the frozen base) for every forward inside."""
        if adapter is not None and not 0 <= adapter < self.adapters:
            raise ValueError(f"adapter {adapter} out of range: the ensemble has {self.adapters}")
        previous, self.active = self.active, adapter
        try:
            yield
        finally:
            self.active = previous

    @contextmanager
    def recording(self, mask: torch.Tensor) -> Iterator[None]:
        """Add every target layer's token inputs of the forwards inside to its S = X^T X (``inputs``); ``mask``
        [b, L] (the forward's attention mask) picks the real tokens. ``inputs.clear()`` starts a new batch."""
        previous, self._record = self._record, mask
        try:
            yield
        finally:
            self._record = previous

    @torch.no_grad()
    def _accumulate(self, key: str, x: torch.Tensor) -> None:
        assert self._record is not None
        if x.shape[:-1] != self._record.shape:
            raise RuntimeError(f"recording the inputs of {tuple(x.shape)}, but the mask is {tuple(self._record.shape)}")
        rows = x.detach().float()[self._record.bool()]  # [N, in] the real tokens
        moment = rows.T @ rows
        self.inputs[key] = moment if key not in self.inputs else self.inputs[key] + moment

    def save(self, folder: str | Path) -> None:
        """The K adapters as ``ensemble.safetensors`` in ``folder``, with the scale in its metadata."""
        from safetensors.torch import save_file

        weights = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        meta = {"adapters": str(self.adapters), "rank": str(self.rank), "scale": repr(self.scale)}
        save_file(weights, str(Path(folder) / ENSEMBLE_FILE), metadata=meta)

    def distinctness(self, eps: float = 1e-6) -> torch.Tensor:
        """Mean over layers of nuclear_norm(row-normalised [vec(X (B_k A_k)^T)]_k) / K, in [1/sqrt(K), 1], X the
        recorded batch's inputs to the layer (none recorded: the weight updates themselves)."""
        values = []
        for name, _ in self.targets:
            key = _key(name)
            values.append(update_distinctness(self.lora_A[key], self.lora_B[key], self.inputs.get(key), eps))
        return torch.stack(values).mean()


def update_gram(a: torch.Tensor, b: torch.Tensor, moment: torch.Tensor | None = None) -> torch.Tensor:
    """A [K, r, in], B [K, out, r], S = X^T X [in, in] (None: the identity) -> G [K, K], the Frobenius inner
    products of the updates' outputs on X: G_kl = <X (B_k A_k)^T, X (B_l A_l)^T>_F = tr(B_k A_k S A_l^T B_l^T)
    = sum_ij (B_k^T B_l)_ij (A_k S A_l^T)_ij. With S = I: <B_k A_k, B_l A_l>_F, the weight updates'."""
    a, b = a.float(), b.float()
    btb = torch.einsum("kor,los->klrs", b, b)  # [K, K, r, r]
    left = a if moment is None else a @ moment.to(a.device)  # A_k S [K, r, in]
    asa = torch.einsum("kri,lsi->klrs", left, a)  # [K, K, r, r]
    return (btb * asa).sum(dim=(-1, -2))


def update_distinctness(
    a: torch.Tensor, b: torch.Tensor, moment: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Nuclear norm of the row-normalised stack of the K updates' outputs on X (``update_gram``), / K:
    sum_i sqrt(lambda_i(C)) / K, C the K x K cosine matrix, in [1/sqrt(K), 1]. ``eigvalsh`` has stable
    gradients even for repeated eigenvalues (C = I); each eigenvalue enters as lambda / sqrt(lambda + eps)
    (sqrt(lambda) to O(eps) away from 0), whose gradient is finite and positive at lambda = 0 (coinciding
    adapters are pushed apart, not held)."""
    gram = update_gram(a, b, moment)
    norms = gram.diagonal().clamp(min=torch.finfo(gram.dtype).tiny).sqrt()  # updates start tiny (init_std)
    cosines = gram / (norms[:, None] * norms[None, :])
    values = torch.linalg.eigvalsh(cosines).clamp(min=0.0)
    return (values / (values + eps).sqrt()).sum() / gram.size(0)


def mutual_information(logits: torch.Tensor) -> torch.Tensor:
    """Per-token disagreement of the ensemble, logits [K, B, T, V] -> MI [B, T] in nats:

    MI = H(mean_k p_k) - mean_k H(p_k)   (the total entropy minus the expected entropy, >= 0)

    It is 0 when the adapters predict the same distribution, whatever its entropy (aleatoric
    uncertainty), and at most log K."""
    logp = logits.float().log_softmax(-1)  # [K, B, T, V]
    p = logp.exp()
    log_mean = torch.logsumexp(logp, dim=0) - math.log(logits.size(0))  # log mean_k p_k [B, T, V]
    total = -(log_mean.exp() * log_mean).sum(-1)  # H(mean p) [B, T]
    expected = -(p * logp).sum(-1).mean(0)  # mean_k H(p_k) [B, T]
    return (total - expected).clamp(min=0.0)


@torch.no_grad()
def merge_saved_ensemble(model: nn.Module, folder: str | Path) -> bool:
    """Merge a saved ensemble's mean update into ``model``: ``W += s * mean_k B_k A_k`` on each target linear
    (the policy UG-TTT evaluates with). Returns False when ``folder`` holds no ``ensemble.safetensors``."""
    from safetensors import safe_open

    path = Path(folder) / ENSEMBLE_FILE
    if not path.is_file():
        return False
    modules = dict(model.named_modules())
    with safe_open(str(path), framework="pt") as f:
        scale = float(f.metadata()["scale"])
        for key in [k for k in f.keys() if k.startswith("lora_A.")]:
            name = key.removeprefix("lora_A.")
            a, b = f.get_tensor(key), f.get_tensor(f"lora_B.{name}")  # [K, r, in], [K, out, r]
            weight = modules[name.replace("__", ".")].weight
            update = torch.einsum("kor,kri->oi", b.float(), a.float()) / a.size(0)
            weight += (scale * update).to(weight.device, weight.dtype)
    return True
