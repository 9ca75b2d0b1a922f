"""The rollout-strategy base class, its registry, and what every strategy shares.

A rollout strategy (``algorithm/rollout=X``, METHODS.md section 4) changes how the group of
completions of one prompt is produced. It wraps TRL's generation (``GRPOTrainer._generate``) in
``RLPostTrainer._generate`` (stage 1a of trainer.py)::

    rollouts = strategy.generate(prompts, ctx)     # prompts [B]: each prompt G times in a row

``ctx.generate(prompts)`` is TRL's own generation (chat template, transformers or vLLM, tools),
one completion per prompt, returned as ``Rollouts``: per-row lists of equal length B. A strategy
may call it on any list of prompts (a subset, conditioned prompts) and assemble the B rows it
returns; each row keeps a ``kind`` (``natural`` for plain samples, else the strategy's tag) that
the trainer hands back to ``adjust_rewards`` and logs as ``rlpost/rollout/<kind>_frac``.

The context holds narrow callables the trainer gives it (rlpost/trainer/rollouts.py
``_rollout_context``): generation, the policy's token log-probs and metric logging, plus the
tokenizer, EOS id and device. A strategy never sees the trainer; what a call needs changed on the
trainer (G = 1, an episode's rows) the trainer changes itself, for the call.

``RolloutStrategy.adjust_rewards(rewards [N], kinds [N], rows [N], completions [N], G) -> (rewards, metrics)``
runs right after ``combine``, before dynamic sampling and the advantage (RC-GRPO's refusal credit and
over-refusal penalty, CRPO's negative baseline); the base returns the rewards unchanged.

Choices made for every strategy:
- Strategies run on training batches only; evaluation batches are plain sampling.
- A row whose tokens the policy did not sample (a forced refusal, a generic response) has no
  sampling log-probs: under vLLM its ``logprobs`` are ``None`` (TRL reads NaN and leaves those
  tokens out of its importance-sampling correction); on the transformers path TRL has none anyway.
- The group structure is TRL's: rows ``g*G .. g*G+G-1`` share a prompt; a strategy never changes B.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from rlpost.core.activity import changed, share
from rlpost.core.component import Component
from rlpost.core.registry import Registry
from rlpost.losses.base import LossInputs

NATURAL = "natural"


@dataclass
class Rollouts:
    """TRL's ``_generate`` output as per-row lists (B rows), plus each row's kind."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    tool_mask: list[list[int]] | None
    completions: list[Any]
    logprobs: list[list[float | None]] | None
    extra_fields: dict[str, list[Any]]
    images: Any = None
    tool_images: Any = None
    kinds: list[str] = field(default_factory=list)

    @classmethod
    def from_trl(cls, out: tuple, kind: str = NATURAL) -> Rollouts:
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images = out
        if images is not None or any(tool_images or []):
            raise NotImplementedError("rollout strategies support text prompts only (the batch has images)")
        kinds = [kind] * len(completion_ids)
        return cls(
            list(prompt_ids),
            list(completion_ids),
            tool_mask,
            list(completions),
            logprobs,
            dict(extra or {}),
            images,
            tool_images,
            kinds,
        )

    def to_trl(self) -> tuple:
        return (
            self.prompt_ids,
            self.completion_ids,
            self.tool_mask,
            self.completions,
            self.logprobs,
            self.extra_fields,
            self.images,
            self.tool_images,
        )

    def __len__(self) -> int:
        return len(self.completion_ids)

    @classmethod
    def empty(cls, n: int, like: Rollouts) -> Rollouts:
        """n unfilled rows with the same optional fields as ``like``."""
        return cls(
            prompt_ids=[[] for _ in range(n)],
            completion_ids=[[] for _ in range(n)],
            tool_mask=None if like.tool_mask is None else [[] for _ in range(n)],
            completions=[None] * n,
            logprobs=None if like.logprobs is None else [[] for _ in range(n)],
            extra_fields={k: [None] * n for k in like.extra_fields},
            images=like.images,
            tool_images=like.tool_images,
            kinds=[""] * n,
        )

    def put(self, i: int, src: Rollouts, j: int, kind: str | None = None) -> None:
        """Row i <- row j of ``src`` (kind: src's unless given)."""
        self.prompt_ids[i] = src.prompt_ids[j]
        self.completion_ids[i] = src.completion_ids[j]
        self.completions[i] = src.completions[j]
        if self.tool_mask is not None:
            self.tool_mask[i] = src.tool_mask[j] if src.tool_mask is not None else [1] * len(src.completion_ids[j])
        if self.logprobs is not None:
            self.logprobs[i] = src.logprobs[j] if src.logprobs is not None else [None] * len(src.completion_ids[j])
        for key, values in self.extra_fields.items():
            values[i] = src.extra_fields.get(key, [None] * len(src))[j]
        self.kinds[i] = kind or src.kinds[j]

    def force(self, i: int, ids: list[int], completion: Any, kind: str) -> None:
        """Row i's completion <- fixed tokens the policy did not sample (prompt_ids unchanged)."""
        self.completion_ids[i] = list(ids)
        self.completions[i] = completion
        if self.tool_mask is not None:
            self.tool_mask[i] = [1] * len(ids)
        if self.logprobs is not None:
            self.logprobs[i] = [None] * len(ids)  # not sampled: NaN for TRL's IS correction
        self.kinds[i] = kind


class RolloutContext:
    """What a strategy may use: generation, the batch's dataset rows, G, the tokenizer, the policy's token
    log-probs and logging; built by the trainer from narrow callables (rlpost/trainer/rollouts.py)."""

    def __init__(
        self,
        generate: Callable[[list, list[dict] | None], tuple],
        rows: list[dict],
        num_generations: int,
        *,
        tokenizer: Any,
        eos_token_id: int,
        device: Any,
        step: int,
        seed: int,
        policy_logprobs: Callable[[list[list[int]], list[list[int]]], tuple[torch.Tensor, torch.Tensor]],
        prompt_ids: Callable[[list], list[list[int]]],
        log: Callable[[str, float], None],
    ):
        # (prompts [M], rows [M] or None) -> TRL's _generate output for one completion per prompt
        self._generate = generate
        self.rows = rows  # [B] the dataset row of each prompt
        self.num_generations = num_generations  # G
        self.tokenizer = tokenizer  # the policy's
        self.eos_token_id = eos_token_id  # the first of the policy's EOS ids
        self.device = device  # the policy's torch.device (a side model generates there)
        self.step = step  # the trainer's global step
        self.rng = random.Random(seed * 1_000_003 + self.step)
        # (prompt_ids [M] lists, completion_ids [M] lists) -> (logps [M, T], mask [M, T]): one no-grad forward of the
        # policy, each completion after its prompt (left-padded), T the longest completion
        self.policy_logprobs = policy_logprobs
        # prompts [M] (texts or message lists) -> their token ids [M] as the trainer renders a prompt for generation
        # (the run's chat template with the assistant header): a context to score tokens after, without sampling
        self.prompt_ids = prompt_ids
        self._log = log  # (metric name, value): the trainer's training metrics

    def generate(self, prompts: list, kind: str = NATURAL, rows: list[dict] | None = None) -> Rollouts:
        """TRL's generation on ``prompts`` [M] (one completion each) -> M rows of ``kind``.

        A strategy passes any list (a subset, conditioned prompts): the trainer samples one completion
        per prompt (G is 1 for the call). With ``data/env`` each prompt is an episode whose environment
        starts from its dataset row (``reset`` reads the row's ``prompt``): ``rows`` [M] are those rows
        (a conditioned one with its new prompt).
        """
        return Rollouts.from_trl(self._generate(prompts, rows), kind)

    def completion_ids(self, text: str) -> list[int]:
        """Token ids of a fixed completion: the text, then the first EOS (a finished completion)."""
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_token_id]

    def groups(self, n: int) -> list[range]:
        g = self.num_generations
        if n % g:
            raise RuntimeError(f"rollout strategy: {n} rows are not whole groups of {g}")
        return [range(s, s + g) for s in range(0, n, g)]

    def log(self, name: str, value: float) -> None:
        """Logged as ``rlpost/rollout/<name>`` (training metrics)."""
        self._log(f"rlpost/rollout/{name}", float(value))


def completion_like(text: str, example: Any) -> Any:
    """A completion in the batch's format: chat messages when ``example`` is, else the string."""
    return [{"role": "assistant", "content": text}] if isinstance(example, list) else text


def user_text(prompt: Any) -> str:
    """The last user message of a chat prompt, or the prompt string."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)


def with_user_text(prompt: Any, text: str) -> Any:
    """``prompt`` with its last user message (or the whole string) replaced by ``text``."""
    if not isinstance(prompt, list):
        return text
    last = max(i for i, m in enumerate(prompt) if m.get("role") == "user")
    return [*prompt[:last], {**prompt[last], "content": text}, *prompt[last + 1 :]]


class RolloutStrategy(Component):
    """Produces the B rows of a generation batch (each prompt's group of G) from the prompts [B].

    Optional members: ``adjust_rewards``, ``loss_term`` and ``activity`` (below); ``check_run``, ``describe``, ...:
    ``Component``.
    """

    # what adjust_rewards does: "none" (the default: rewards unchanged); "relative" (new values from the
    # group's own rewards, e.g. its minimum minus a margin: meaningful per reward term too, so it also runs on
    # each term before a combine that returns advantages); "absolute" (fixed values such as 1.0 / 0.0, on the
    # scale of one reward: refused with such a combine)
    reward_adjustment: ClassVar[Literal["none", "relative", "absolute"]] = "none"
    # whether the strategy runs with data/env (episodes), so episodes do not refuse it: it passes every generate
    # call its rows (RolloutContext), whole groups run through the environment loop
    episodes: ClassVar[bool] = False

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        """Prompts [B] (each prompt G times in a row) -> the B rows, each with its kind."""
        raise NotImplementedError

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Combined rewards [N] of a training batch, each row's kind, dataset row and completion [N], G ->
        adjusted rewards [N] and float metrics; runs right after ``combine``. Default: unchanged, no metrics."""
        return rewards, {}

    def loss_term(self, x: LossInputs) -> tuple[torch.Tensor | None, dict[str, float]]:
        """An extra per-token loss term [B, T] on the rows this strategy shaped (RISE-RL's auxiliary objective on
        its guided rollouts), added before the run's aggregation, and metrics. Default: none."""
        return None, {}

    def activity(self, kinds: list[str], before: torch.Tensor, after: torch.Tensor) -> float | None:
        """``active/rollout/<name>`` of one training batch (rlpost/core/activity.py). The no-op is plain sampling:
        the figure is the share of rows [N] whose kind is not ``natural`` (rows this strategy produced or rewrote)
        or whose reward ``adjust_rewards`` changed (``before`` -> ``after``, [N], or [N, R] per reward term before
        a combine that returns advantages; a row set to NaN, leaving its group, counts as changed)."""
        rows = changed(after, before)
        if rows.dim() == 2:
            rows = rows.any(dim=1)
        produced = torch.tensor([kind != NATURAL for kind in kinds], dtype=torch.bool, device=rows.device)
        return share(produced | rows)

    def baseline_rows(self, num_generations: int) -> int:
        """Of each group of G rows, how many plain samples always stay in the group's baseline; rows the strategy
        produces and takes out of the group (NaN reward: rubric_guidance's kept privileged rows, hindsight_critique's
        retries) do not. Default: every row."""
        return num_generations

    def config_warnings(self, run: Any) -> list[str]:
        """A group left with fewer than 2 plain samples (``baseline_rows``) has no baseline: their advantage is 0."""
        g = run.settings.train.num_generations
        n = self.baseline_rows(g)
        if n >= 2:
            return []
        return [
            f"algorithm/rollout={self.registry_name} takes rows out of each group of train.num_generations={g}, "
            f"leaving {n} plain sample(s) for the group's baseline: a group needs 2 to compare, so the natural rows "
            "get advantage 0. Raise train.num_generations."
        ]


ROLLOUTS: Registry[RolloutStrategy] = Registry("rollout", RolloutStrategy)
