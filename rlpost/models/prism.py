"""PRISM (seed 000 #13): standalone positive policies plus one global negative policy, composed at inference.

"Instead of compositing different rewards, PRISM optimizes a set of standalone positive policies and a
global negative policy ... enabling controllability during inference by flexible policy composition."

Training needs no new component (conf/recipe/prism.yaml, conf/recipe/prism_negative.yaml): positive policy
j is a LoRA adapter trained with GRPO on reward term j alone; the negative policy is a LoRA adapter trained
on the negated sum of all terms (it learns what every reward dislikes). This module composes them:

- logit space, per decode step (``rlpost eval compose.positives=[A,B] compose.negative=N``):
  ``z = z_base + sum_j w_j (z_j - z_base) - gamma (z_neg - z_base)``, where ``z`` are each member's
  log-probabilities of the next token ``[B, V]``, so sampling draws from
  ``p ∝ p_base^(1 - sum_j w_j + gamma) * prod_j p_j^(w_j) * p_neg^(-gamma)``;
- weight space (``rlpost merge method=task_arithmetic model=<base> models=[A,B,N] weights=[w_1,w_2,-gamma]``,
  rlpost/tools/merge.py): each adapter is merged into the base, then task arithmetic with a negated task
  vector for the negative policy.

Choices made where the abstract is silent:
- one LoRA adapter per policy over one frozen base, so all members share the base and its tokenizer and
  compose without loading K + 2 models (one PeftModel holds every adapter; a forward picks one);
- the composition is task arithmetic on next-token log-probabilities, relative to the base ("policy
  composition" with the base as the origin); the weights ``w_j`` are the inference-time preference knobs
  (default 1 each), ``gamma`` (default 0.5) the negative policy's strength; negative ``w_j`` are allowed
  (steer away from a reward), ``gamma`` must be >= 0 (a negative gamma would add the negative policy);
- raw logits and log-probabilities give the same composed distribution (log_softmax subtracts one
  constant per row, and a weighted sum of per-row constants is a per-row constant); log-probabilities
  are used so the composed scores stay on a comparable scale;
- the negative policy is trained on the negated *combined* reward (the weighted sum with every weight
  negated), not one negative per term: the abstract says "a global negative policy";
- each member keeps its own KV cache; greedy decoding takes the argmax of the composed scores, sampling
  divides them by the temperature and applies top-p, as ``generate`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

NEGATIVE = "prism_negative"  # the adapter name of the negative policy inside the PeftModel


@dataclass(frozen=True)
class ComposeSettings:
    """``rlpost eval compose.*``: which LoRA policies to compose over ``model`` (off while ``positives`` is empty)."""

    positives: list[str] = field(default_factory=list)  # LoRA adapter folders or LoRA run directories
    weights: list[float] | None = None  # w_j per positive (None = all 1.0)
    negative: str | None = None  # the global negative policy (a LoRA adapter folder or run directory)
    gamma: Annotated[float, Range(ge=0, why="the negative policy is subtracted")] = 0.5


def compose_logprobs(
    base: torch.Tensor, positives: torch.Tensor, weights: torch.Tensor, negative: torch.Tensor | None, gamma: float
) -> torch.Tensor:
    """``base [B, V] + sum_j weights[j] (positives[j] - base) - gamma (negative - base)``; positives ``[K, B, V]``,
    weights ``[K]``. Any scores work (logits or log-probabilities); the composed scores are ``[B, V]``."""
    out = base + (weights.view(-1, 1, 1).to(base) * (positives - base.unsqueeze(0))).sum(dim=0)
    if negative is not None:
        out = out - gamma * (negative - base)
    return out


def top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Scores ``[B, V]`` with the tokens outside the smallest set of probability mass >= top_p set to -inf
    (the top token always stays)."""
    if top_p >= 1.0:
        return scores
    sorted_scores, order = scores.sort(dim=-1, descending=True)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative - sorted_scores.softmax(dim=-1) >= top_p  # the mass before a token already reaches top_p
    sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
    return torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)


def check_compose(c: ComposeSettings, adapter: str | None, checkpoint: str, model: Any) -> list[Path]:
    """Cheap checks (no model loads) -> the adapter folders: the positives, then the negative if any."""
    from rlpost.models.weights import is_adapter, resolve_checkpoint

    if not c.positives:
        if c.negative is not None or c.weights is not None:
            raise ConfigError(
                "compose.negative and compose.weights need compose.positives=[<LoRA run or adapter>,...]."
            )
        return []
    if adapter is not None:
        raise ConfigError(
            "compose.positives and adapter= (or a LoRA run=) both name LoRA adapters; give every adapter in "
            "compose.positives / compose.negative and the base as model=<choice>."
        )
    if c.weights is not None and len(c.weights) != len(c.positives):
        raise ConfigError(
            f"compose.weights has {len(c.weights)} entries but compose.positives has {len(c.positives)}; give one each."
        )
    if c.gamma < 0:
        raise ConfigError(f"compose.gamma={c.gamma} must be >= 0: the negative policy is subtracted.")
    named = [(f"compose.positives[{i}]", p) for i, p in enumerate(c.positives)]
    named += [("compose.negative", c.negative)] if c.negative is not None else []
    folders = []
    for key, path in named:
        folder = resolve_checkpoint(path, key, checkpoint)
        if not is_adapter(folder):
            raise ConfigError(f"{key}={path!r}: {folder} has no adapter_config.json (PRISM composes LoRA adapters).")
        check_adapter_base(Path(path).expanduser(), key, model)
        folders.append(folder)
    return folders


def check_adapter_base(path: Path, key: str, model: Any) -> None:
    """A LoRA run directory records its base model: refuse one trained on another base than ``model``."""
    from rlpost.models.weights import is_run_dir, run_config

    if model is None or not is_run_dir(path):
        return
    saved = run_config(path).get("model") or {}
    trained, given = (saved.get("source"), saved.get("path")), (model.source, model.path)
    if trained != given:
        raise ConfigError(
            f"{key}={str(path)!r} was trained on model source={trained[0]} path={trained[1]}, but the base here is "
            f"source={given[0]} path={given[1]}; choose the run's base model (model=...)."
        )


class ComposedPolicy(torch.nn.Module):
    """The base plus its adapters in one PeftModel, decoding with composed scores; ``generate`` takes and returns
    what ``transformers``' does (left-padded ``input_ids [B, P]`` -> ``[B * n, P + T]``), so rlpost/evaluation/evaluate.py
    runs it unchanged."""

    def __init__(self, peft_model: Any, n_positives: int, negative: bool, weights: list[float], gamma: float, eos):
        super().__init__()
        self.model = peft_model
        self.positives = [f"prism_{j}" for j in range(n_positives)]
        self.negative = NEGATIVE if negative else None
        self.weights = torch.tensor(weights, dtype=torch.float32)
        self.gamma = gamma
        self.eos = {eos} if isinstance(eos, int) else set(eos or [])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _member(self, name: str | None, ids, mask, positions, cache):
        """One member's next-token log-probabilities ``[B, V]`` and its updated cache (``name`` None = the base)."""
        if name is None:
            with self.model.disable_adapter():
                out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                                 use_cache=True)  # fmt: skip
        else:
            self.model.set_adapter(name)
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                             use_cache=True)  # fmt: skip
        return out.logits[:, -1].float().log_softmax(dim=-1), out.past_key_values

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_new_tokens: int, pad_token_id: int, num_return_sequences: int = 1,
                 do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, **_: Any) -> torch.Tensor:  # fmt: skip
        ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
        mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)
        positions = (mask.cumsum(dim=-1) - 1).masked_fill(mask == 0, 1)  # as generate() does
        members = [None, *self.positives, *([self.negative] if self.negative else [])]
        caches: list[Any] = [None] * len(members)
        step_ids, done, new = ids, torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device), []
        for _step in range(max_new_tokens):
            scores = []
            for i, name in enumerate(members):
                logp, caches[i] = self._member(name, step_ids, mask, positions, caches[i])
                scores.append(logp)
            k = len(self.positives)
            negative = scores[-1] if self.negative else None
            z = compose_logprobs(scores[0], torch.stack(scores[1 : 1 + k]), self.weights, negative, self.gamma)
            if do_sample:
                probs = top_p_filter(z / temperature, top_p).softmax(dim=-1)
                token = torch.multinomial(probs, 1).squeeze(1)
            else:
                token = z.argmax(dim=-1)
            token = torch.where(done, torch.full_like(token, pad_token_id), token)
            new.append(token)
            done = done | torch.tensor([int(t) in self.eos for t in token], device=ids.device)
            if bool(done.all()):
                break
            step_ids = token.unsqueeze(1)
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        return torch.cat([ids, torch.stack(new, dim=1)], dim=1)


def load_composed(base_model: torch.nn.Module, folders: list[Path], c: ComposeSettings, eos) -> ComposedPolicy:
    """``base_model`` with the adapters of ``folders`` (positives, then the negative) loaded by name."""
    from peft import PeftModel

    n = len(c.positives)
    names = [f"prism_{j}" for j in range(n)] + ([NEGATIVE] if c.negative is not None else [])
    model = PeftModel.from_pretrained(base_model, str(folders[0]), adapter_name=names[0])
    for name, folder in zip(names[1:], folders[1:]):
        model.load_adapter(str(folder), adapter_name=name)
    weights = list(c.weights) if c.weights is not None else [1.0] * n
    return ComposedPolicy(model.eval(), n, c.negative is not None, weights, c.gamma, eos)
