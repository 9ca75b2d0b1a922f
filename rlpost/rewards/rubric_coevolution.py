"""The co-evolving rubric writer of dynamic_rubric (seed 000 #24): the writer learns from the score gaps it creates.

DynamicRubric is "a response-set-conditioned evaluator--policy co-evolution framework"; the abstract's
principle is that "evaluators should evolve with the policies they supervise", and its analysis names
the signal: "the directional gain of shifting probability mass from one response to another is exactly
the evaluator score gap between them". Reading: the writer is trained by RL at the same steps as the
policy, rewarded by the gap its rubric opens between better and worse candidates. Per training group:

1. The writer samples K rubrics (``rubrics_per_group``, ``temperature``) for the candidate set.
2. Each rubric k that parses scores the G candidates, ``s_ik`` (the judge's weighted pass rate). The
   policy's reward is ``r_i = mean_k s_ik`` over those rubrics; the reference below never reaches it.
3. A reference reward term (``reference``, default ``math_answer`` against the row's gold answer) orders
   the candidates. The writer's reward for rubric k is the signed gap over the ordered pairs::

       R_k = mean_{(i, j): ref_i > ref_j} (s_ik - s_jk)      in [-1, 1]

   0 when the reference orders no pair (nothing to learn about direction), ``unparsed_reward`` (-1)
   for a rubric with no parseable item (the writer learns the format too).
4. When the batch is scored, one GRPO step on the writer: ``A_k = (R_k - mean_K R) / (std_K R + 1e-4)``
   within each group's K rubrics (unbiased std; a group whose K rewards are equal gives no gradient),
   ``loss = -mean_groups mean_k A_k * mean_t log pi_w(z_kt | request)`` over the sampled rubric tokens
   (the answer prefix excluded), AdamW at ``learning_rate``, gradient norm clipped to ``max_grad_norm``.
   LoRA adapters on the writer when ``writer.model.lora.enabled`` (the default), else all its weights.

Choices where the abstract is silent: the reference signal (the paper trains its evaluator on its own
data; here any reward term, typically a verifiable one on the training rows); score first, then update
(no rubric is rewarded on the very batch it was written for after the step); the writer is in eval
mode for sampling and for the update, so the gradient is taken at the sampling distribution; one
process only (copies on several processes would diverge: refused by dynamic_rubric's check); the state
(trainable weights, optimizer, update count) travels with every checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.schema import Range
from rlpost.rewards.rubric_writer import RubricWriter


@dataclass(frozen=True)
class CoEvolveConfig:
    enabled: bool = True  # train the writer on the score gaps of its rubrics (false: a frozen, greedy writer)
    rubrics_per_group: Annotated[int, Range(ge=2)] = 2  # K sampled rubrics per group (the writer's GRPO group)
    temperature: Annotated[float, Range(gt=0)] = 1.0  # the writer's sampling temperature while training
    learning_rate: Annotated[float, Range(gt=0)] = 1e-4  # AdamW learning rate of the writer
    max_grad_norm: Annotated[float, Range(gt=0)] = 1.0  # the writer's gradient norm clip
    unparsed_reward: Annotated[float, Range(ge=-1, le=0)] = -1.0  # the writer's reward for a rubric with no item
    # the reward term {name, params} that orders candidates (null: none; a co-evolving writer needs one)
    reference: dict[str, Any] | None = field(default_factory=lambda: {"name": "math_answer"})

    def __post_init__(self) -> None:
        if self.rubrics_per_group < 2 or self.temperature <= 0 or self.learning_rate <= 0:
            raise ValueError("rubrics_per_group must be >= 2, temperature and learning_rate > 0")


def signed_gap(scores: list[float | None], reference: list[float | None]) -> float | None:
    """scores [G], reference [G] -> mean of s_i - s_j over the pairs with ref_i > ref_j (None: no such pair)."""
    gaps = [
        si - sj
        for si, ri in zip(scores, reference)
        for sj, rj in zip(scores, reference)
        if si is not None and sj is not None and ri is not None and rj is not None and ri > rj
    ]
    return sum(gaps) / len(gaps) if gaps else None


def writer_rewards(
    rubric_scores: list[list[float | None] | None], reference: list[float | None], unparsed_reward: float
) -> list[float]:
    """[K] rubrics' candidate scores ([G] each, None: the rubric had no item) -> the writer's reward [K]."""
    rewards = []
    for scores in rubric_scores:
        gap = signed_gap(scores, reference) if scores is not None else None
        rewards.append(unparsed_reward if scores is None else gap if gap is not None else 0.0)
    return rewards


def mean_over_rubrics(rubric_scores: list[list[float | None] | None], size: int) -> list[float | None]:
    """[K] rubrics' candidate scores -> [G]: each candidate's mean over the rubrics that scored it."""
    out: list[float | None] = []
    for i in range(size):
        values = [v for v in (s[i] for s in rubric_scores if s is not None) if v is not None]
        out.append(sum(values) / len(values) if values else None)
    return out


@dataclass
class Draft:
    """One request's sampled rubrics: prompt ids [P], rubric token ids [K, L], their mask [K, L]."""

    prompt: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor


class WriterLearner:
    """Samples K rubrics per request and takes one GRPO step on the writer per batch (module docstring)."""

    def __init__(self, writer: RubricWriter, cfg: CoEvolveConfig):
        self.writer, self.cfg = writer, cfg
        self.optimizer: torch.optim.Optimizer | None = None
        self.updates = 0
        self.drafts: list[Draft] = []  # sampled since the last update
        self._saved: dict[str, Any] | None = None  # a checkpoint's state, applied once the writer is loaded

    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.writer.load()[0].named_parameters() if p.requires_grad]

    def _ready(self) -> tuple[Any, Any]:
        """The writer made trainable (LoRA adapters or all weights) with its optimizer, on first use."""
        model, tok = self.writer.load()
        if self.optimizer is None:
            if self.writer.cfg.model.lora.enabled:
                from peft import get_peft_model

                from rlpost.models.loading import peft_config

                model = get_peft_model(model, peft_config(self.writer.cfg.model))
                self.writer.model = model.eval()
            else:
                model.requires_grad_(True)
            params = [p for _, p in self.trainable()]
            self.optimizer = torch.optim.AdamW(params, lr=self.cfg.learning_rate, weight_decay=0.0)
            if self._saved is not None:
                self._apply(self._saved)
                self._saved = None
        return self.writer.model, tok

    def sample(self, request: str, prefix: str = "") -> list[str]:
        """One request -> K sampled rubric texts (each starting with ``prefix``); kept for ``update``."""
        model, tok = self._ready()
        text = self.writer.chat_texts([request], prefix)[0]
        inputs = tok([text], return_tensors="pt", add_special_tokens=False).to(model.device)
        with torch.no_grad():
            out = model.generate(
                **inputs,
                do_sample=True,
                temperature=self.cfg.temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=self.writer.cfg.max_new_tokens,
                num_return_sequences=self.cfg.rubrics_per_group,
                pad_token_id=tok.pad_token_id,
            )
        tokens = out[:, inputs["input_ids"].size(1) :]
        ended = (tokens == tok.eos_token_id).int().cumsum(1)
        mask = ((ended == 0) | ((ended == 1) & (tokens == tok.eos_token_id))).float()  # up to and with the EOS
        self.drafts.append(Draft(inputs["input_ids"][0], tokens, mask))
        return [prefix + t for t in tok.batch_decode(tokens, skip_special_tokens=True)]

    def sequence_logps(self, draft: Draft) -> torch.Tensor:
        """Token-mean log pi_w of each sampled rubric: [K] (with grad)."""
        model = self.writer.model
        k = draft.tokens.size(0)
        ids = torch.cat([draft.prompt.expand(k, -1), draft.tokens], dim=1)
        logits = model(input_ids=ids).logits[:, draft.prompt.size(0) - 1 : -1].float()  # [K, L, V]
        logps = torch.log_softmax(logits, -1).gather(-1, draft.tokens.unsqueeze(-1)).squeeze(-1)
        return (logps * draft.mask).sum(1) / draft.mask.sum(1).clamp(min=1.0)

    def update(self, rewards: list[list[float]]) -> dict[str, float]:
        """rewards [requests][K] (the order of ``sample``) -> one optimizer step; metrics."""
        drafts, self.drafts = self.drafts, []
        if len(drafts) != len(rewards):
            raise ValueError(f"{len(rewards)} reward rows for {len(drafts)} sampled requests")
        self._ready()
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)
        loss_total, used = 0.0, 0
        for draft, r in zip(drafts, rewards):
            r_t = torch.tensor(r, dtype=torch.float32, device=draft.tokens.device)
            std = r_t.std()
            if not float(std) > 0:
                continue  # equal rewards: no direction for the writer in this group
            advantages = (r_t - r_t.mean()) / (std + 1e-4)
            loss = -(advantages * self.sequence_logps(draft)).mean() / len(drafts)
            loss.backward()
            loss_total, used = loss_total + float(loss.detach()), used + 1
        grad_norm = 0.0
        if used:
            params = [p for _, p in self.trainable()]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
            self.optimizer.step()
            self.updates += 1
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "writer/loss": loss_total,
            "writer/signal_frac": used / max(len(drafts), 1),
            "writer/grad_norm": grad_norm,
            "writer/updates": float(self.updates),
        }

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer is None:  # never used since it was made or restored: what it holds
            return dict(self._saved) if self._saved is not None else {"updates": self.updates}
        return {
            "updates": self.updates,
            "weights": {n: p.detach().cpu().clone() for n, p in self.trainable()},
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state.get("updates", 0))
        if "weights" not in state:
            return
        if self.optimizer is None:
            self._saved = dict(state)  # applied when the writer is first loaded (it loads lazily)
        else:
            self._apply(state)

    def _apply(self, state: dict[str, Any]) -> None:
        own = dict(self.trainable())
        if set(own) != set(state["weights"]):
            raise ValueError(
                "the saved rubric writer's trainable weights do not match this run's writer (LoRA setting?)"
            )
        with torch.no_grad():
            for name, value in state["weights"].items():
                own[name].copy_(value.to(own[name].device))
        assert self.optimizer is not None
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
