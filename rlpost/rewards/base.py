"""The reward base class and its registry.

A reward is a callable with TRL's reward-function signature::

    reward(prompts: list, completions: list, completion_ids: list, **row_columns) -> list[float | None]

so an existing TRL reward function plugs in unchanged (``reward.terms=[{name: callable,
params: {path: my_pkg.my_reward}}]``, rewards/callable.py). A registered rlpost reward is a
``Reward`` subclass with a nested ``Config``; an instance is such a callable. ``None`` means "not
applicable to this sample".

A ``reward.terms[i]`` node is a ``RewardTerm``; ``parse_term`` validates one and ``build_term`` builds its
reward (rlpost/scoring/terms.py turns the whole list into TRL reward functions).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from rlpost.core.chat import answer_text
from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry
from rlpost.core.schema import FieldError, Range, build_config, check_paths, to_container


class Reward(Component):
    """One reward term: TRL's reward-function signature, one value (or None) per completion.

    Optional members, each with its default below; ``check_run``, ``describe``, ``state_dict``, ...:
    ``Component``.
    """

    # scores a completion against the other completions of its prompt (rewards/group.py): the
    # trainer sets ``group_size`` before each call; the failure guard never retries it per sample
    is_group_reward: ClassVar[bool] = False
    # checks the answer against a gold reference, so a score at the threshold means "correct": the
    # default criterion of eval/accuracy (rlpost/scoring/correctness.py); judged or learned scores are not
    verifiable: ClassVar[bool] = False
    group_size: int | None = None  # G, set by the trainer for group rewards (None: runs of equal prompts)
    learning: bool = False  # set by the trainer: True while scoring a training batch (online rewards learn then)
    # set by rlpost/train.py: the run directory on the main process (None on other ranks and outside a run), where a
    # term writes its own run files (the rubric reward's evaluation memory and revised rubrics)
    run_dir: Path | None = None
    # extra rollout columns the trainer adds to the reward inputs: "logprob" -> rlpost_logprob [N],
    # each completion's mean token log-prob under the rollout policy; "policy_logprobs" -> rlpost_policy_logprobs
    # [N], per sample the summed log-probs under the rollout policy of the (context, text) pairs of policy_targets
    rollout_fields: tuple[str, ...] = ()
    # a row column whose values weight this term's held-out mean (None: every prompt counts once), e.g.
    # IFEval's instruction count: its instruction-level accuracy is a share of instructions, not of prompts
    mean_weights: str | None = None

    def __init__(self, cfg: Any) -> None:  # cfg: the subclass's own Config
        super().__init__(cfg)
        # TRL logs a reward function under its __name__; reward_terms.build_reward_terms sets the term
        # name (``format_2`` for a repeated term), else it is the registry name
        self.__name__ = self.registry_name

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """Prompts [N], completions [N] and the batch's dataset columns -> one reward (or None) per completion."""
        raise NotImplementedError

    def policy_targets(self, prompt: Any, row: dict[str, Any]) -> list[tuple[Any, str]] | None:
        """With ``"policy_logprobs"`` in ``rollout_fields``: the ``(context prompt, text)`` pairs whose summed token
        log-probs under the rollout policy the trainer computes for a sample of ``prompt`` from ``row`` (None: none
        for this sample). Default: none."""
        return None

    def is_verifiable(self, env: Any = None) -> bool:
        """Whether this term's score says a completion is right (``verifiable``); ``env`` is the run's
        environment (None without episodes), for a term that passes on what an environment decided."""
        return self.verifiable

    def data_columns(self) -> list[tuple[str, str]]:
        """``(param, column)`` for each dataset column this term reads from every row: by default each set
        ``column`` / ``*_column`` param of its Config. The trainer checks them against the data before any model
        loads (a typo would otherwise fail every sample at run time); a term reading a column only when present
        overrides this."""
        found = []
        for f in fields(self.cfg) if is_dataclass(self.cfg) else []:
            value = getattr(self.cfg, f.name)
            if (f.name == "column" or f.name.endswith("_column")) and isinstance(value, str) and value:
                found.append((f.name, value))
        return found

    def score_range(self) -> tuple[float, float] | None:
        """``(lo, hi)``: every score this term gives lies in [lo, hi] (e.g. ``(0, 1)`` for a judged score, ``(1, 10)``
        for a rubric with ``tiers: 10``); None: not declared. What a combine with fixed score levels (ODRPO's
        thresholds) is checked against before any model loads."""
        return None

    def abstention(self, completions: list, **columns: Any) -> list[tuple[bool, bool] | None] | None:
        """A term that scores abstention (``ternary_abstention``): per sample ``(abstained, should have
        abstained)`` (None: the row cannot say), what held-out abstention precision / recall / F1 count
        (rlpost/evaluation/abstention.py); None: this term declares no abstention."""
        return None

    def output_columns(self) -> list[tuple[str, float]] | None:
        """``[(name, weight)]`` when the term scores several reward columns (e.g. a rubric's criteria:
        rlpost/scoring/columns.py makes one TRL reward function of each), else None: one column."""
        return None

    def column_mean_weights(self, c: int) -> str | None:
        """With ``output_columns()``: column ``c``'s ``mean_weights`` (None: every prompt counts once)."""
        return None

    def column_scores(self, prompts: list, completions: list, **kwargs: Any) -> list[list[float | None]]:
        """With ``output_columns()``: ``[N][C]`` scores (None: not scored), column c = ``output_columns()[c]``."""
        raise NotImplementedError


REWARDS: Registry[Reward] = Registry("reward", Reward)


class ParamError(FieldError):
    """A bad reward param found while building the reward (e.g. an unimportable ``path``).

    Raised from a reward's ``__init__`` (or its Config's ``__post_init__``); ``build_reward_terms``
    (``build_config``) rewrites it to name the full key, ``reward.terms[i].params.<key>``, which the
    reward itself does not know.
    """


def tag_content(text: str, tag: str) -> str | None:
    """The content of the last ``<tag>...</tag>`` block of ``text``, stripped; None when there is none."""
    blocks = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return blocks[-1].strip() if blocks else None


def column(kwargs: dict[str, Any], name: str, n: int, reward: str) -> list[Any]:
    """The dataset column ``name`` from TRL's reward kwargs: one value per completion (``[N]``)."""
    if name not in kwargs:
        cols = sorted(k for k in kwargs if k not in ("completion_ids", "trainer_state", "log_extra", "log_metric"))
        raise KeyError(
            f"reward {reward!r} reads the dataset column {name!r}, which the batch lacks. "
            f"Columns present: {', '.join(cols) or '(none)'}. Set the reward's `column` param."
        )
    values = list(kwargs[name])
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {n} completions")
    return values


def answers_and_references(reward: Reward, completions: list, kwargs: dict) -> list[tuple[str, list[str]] | None]:
    """completions [N] + the reference column ``reward.cfg.column`` [N] -> (answer, references) per sample,
    None without a reference; the answer is stripped of ``<think>`` when ``reward.cfg.strip_think``
    (token_f1, chrf, bleu). A list-valued reference is several references."""
    refs = column(kwargs, reward.cfg.column, len(completions), reward.registry_name)
    out: list[tuple[str, list[str]] | None] = []
    for completion, ref in zip(completions, refs):
        if ref is None:
            out.append(None)
            continue
        text = answer_text(completion, reward.cfg.strip_think)
        out.append((text.strip(), [str(r) for r in ref] if isinstance(ref, (list, tuple)) else [str(ref)]))
    return out


@dataclass(frozen=True)
class RewardTerm:
    """One ``reward.terms[i]`` node."""

    name: str  # registry name of the reward
    weight: Annotated[float, Range()] = 1.0  # its weight in the combination
    params: dict[str, Any] = field(default_factory=dict)  # the reward's own Config fields
    on_failure: str | None = None  # skip | zero | abort on an exception/timeout (null: reward.on_failure)
    # per batch call (null: reward.timeout_s); see reward_guard.py
    timeout_s: Annotated[float | None, Range(gt=0)] = None


def parse_term(node: Any, where: str) -> RewardTerm:
    node = to_container(node)
    if not isinstance(node, Mapping) or "name" not in node:
        raise ConfigError(
            f"{where} must be a mapping like {{name: math_answer, weight: 1.0, params: {{}}}}; "
            f"reward names: {', '.join(REWARDS.names())}."
        )
    node = dict(node)
    if node.get("params") is None:  # `params:` left empty in YAML
        node.pop("params", None)
    return build_config(RewardTerm, node, where)


def build_term(term: RewardTerm, where: str) -> Reward:
    """Look up ``term.name`` and instantiate it from its validated params."""
    try:
        cls = REWARDS.get(term.name)
    except ConfigError as err:
        raise ConfigError(f"{where}.name: {err}") from None
    cfg = build_config(cls.Config, term.params, f"{where}.params")
    check_paths(cfg, f"{where}.params")  # files and folders it names, before the reward reads them
    try:
        return cls(cfg)
    except ParamError as err:
        raise ConfigError(f"{where}.params.{err.key}: {err.message}") from None
