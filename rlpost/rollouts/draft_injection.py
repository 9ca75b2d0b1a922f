"""draft_injection: drafts from a weaker model put into the learner's GRPO context (seed 004 #19).

Each prompt of the batch gets one draft, written into its user message with ``template``; the
learner samples its G completions under that context and is trained under it (the prompt ids of
those rows hold the draft). The seed's finding is that *mismatched* drafts (shuffled to other
problems) help most, so ``match`` chooses:

- ``matched``: the draft written for this problem;
- ``shuffled``: a draft written for another problem: from a file, one drawn (seeded, per step)
  from the other keys; from a model, the draft of the next prompt of the step whose problem differs
  (prompt p gets the draft of prompt p+1 mod P, skipping repeats of p's problem), which needs at least
  2 prompts per step; when every prompt of the step is the same problem, a draft of an earlier step's
  other problem is used, and with none yet the group gets no draft (logged): never its own.

``correctness`` (source=model) guarantees what the seed's variants need, judged on each draft's own
problem (its last number against that row's ``answer_column``): ``wrong`` keeps only wrong drafts,
``correct`` only correct ones, ``any`` takes drafts as drawn. A draft of the other kind is drawn again
(up to ``redraws`` times); one still of the other kind is repaired: for ``wrong`` its last number is
replaced by the answer plus a nonzero offset (seeded; "The answer is ..." is appended when it has no
number), for ``correct`` "The answer is <gold>." is appended. Logged per step:
``draft_injection/redrawn_frac`` and ``draft_injection/repaired_frac``.

Draft sources: ``file`` (jsonl, one ``{file_key: <the data column's value>, "draft": text}`` per
line, keyed by the data column ``key_column``) or ``model`` (any rlpost model config, e.g. a
smaller model; it answers the original prompt, sampled at ``draft_temperature``).

Choices where the abstract is silent: one draft per prompt, shared by the whole group (GRPO needs
one context per group); the template labels the draft as possibly wrong; a prompt whose key is not
in the file fails loudly (``missing: error``) or gets no draft (``missing: skip``, logged); the seed
uses no drafts at test time, and neither does rlpost's evaluation. A draft file's drafts are used as
written (write them wrong or right), so ``correctness`` needs source=model.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import PathSpec, Range
from rlpost.models.loading import ModelConfig
from rlpost.rewards.math_answer import NUMBER, gold_number, last_number
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, user_text, with_user_text
from rlpost.rollouts.side_model import SideModel

TEMPLATE = "{prompt}\n\nA draft solution (it may be wrong):\n{draft}\n\nNow solve the problem yourself."
BANK_SIZE = 64  # drafts of earlier steps kept for a step whose prompts are all one problem


def is_correct(draft: str, gold: float | None) -> bool | None:
    """The draft's last number equals the gold answer (to 1e-6 relative); None when there is no gold."""
    if gold is None:
        return None
    answer = last_number(draft)
    return answer is not None and abs(answer - gold) <= 1e-6 * max(1.0, abs(gold))


def format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def make_wrong(draft: str, gold: float, rng: random.Random) -> str:
    """``draft`` with its last number replaced by ``gold + offset`` (offset in +-1..9), or that answer appended."""
    wrong = format_number(gold + rng.choice([-1, 1]) * rng.randint(1, 9))
    found = list(NUMBER.finditer(draft))
    if not found:
        return f"{draft.rstrip()} The answer is {wrong}."
    last = found[-1]
    return draft[: last.start()] + wrong + draft[last.end() :]


def make_correct(draft: str, gold: float) -> str:
    return f"{draft.rstrip()} The answer is {format_number(gold)}."


def next_other(keys: list[str], p: int) -> int | None:
    """The first prompt after p (cyclically) whose problem differs from p's; None when all are p's."""
    for step in range(1, len(keys)):
        q = (p + step) % len(keys)
        if keys[q] != keys[p]:
            return q
    return None


def read_drafts(path: str, file_key: str) -> dict[str, str]:
    """The drafts file -> {key: draft}; ConfigError naming the line on bad input."""
    from rlpost.core.schema import resolve_data_path

    drafts: dict[str, str] = {}
    if not os.path.isfile(resolve_data_path(path)):
        raise ConfigError(f"algorithm.rollout.path={path!r}: no such file.")
    with open(resolve_data_path(path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                drafts[str(row[file_key])] = str(row["draft"])
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ConfigError(
                    f"algorithm.rollout.path={path!r} line {number}: need a JSON object with {file_key!r} and "
                    f"'draft' ({err})."
                ) from None
    if not drafts:
        raise ConfigError(f"algorithm.rollout.path={path!r}: no drafts.")
    return drafts


@ROLLOUTS.register("draft_injection")
class DraftInjection(RolloutStrategy):
    """Drafts (file or draft model) in the learner's context, matched to the problem or shuffled."""

    @dataclass(frozen=True)
    class Config:
        source: Literal["file", "model"] = "file"  # where drafts come from
        path: Annotated[str | None, PathSpec("jsonl_file")] = None  # source=file: jsonl of {file_key: ..., draft: ...}
        file_key: str = "question"  # source=file: the field of a line that keys its draft
        key_column: str = "question"  # data column whose value is looked up in the file
        model: ModelConfig | None = None  # source=model: the draft model (any rlpost model config)
        draft_max_tokens: Annotated[int, Range(ge=1)] = 128  # source=model: max new tokens of a draft
        # source=model: sampling temperature of drafts (0 = greedy)
        draft_temperature: Annotated[float, Range(ge=0, why="0 = greedy")] = 1.0
        match: Literal["matched", "shuffled"] = "shuffled"  # draft of this problem, or of another one
        template: str = TEMPLATE  # the user message with the draft; {prompt} {draft}
        missing: Literal["error", "skip"] = "error"  # a prompt whose key the file lacks: fail, or no draft
        # source=model: drafts as drawn, or only wrong / only correct ones for their own problem (module docstring)
        correctness: Literal["any", "wrong", "correct"] = "any"
        answer_column: str = "answer"  # correctness: the data column holding each problem's gold answer
        redraws: Annotated[int, Range(ge=0)] = 2  # correctness: extra draws before a draft is repaired

        def __post_init__(self):
            if self.source == "file" and not self.path:
                raise ValueError("source=file needs path (a jsonl of drafts)")
            if self.source == "model" and self.model is None:
                raise ValueError("source=model needs model (an rlpost model config, e.g. {source: smollm2})")
            if "{prompt}" not in self.template or "{draft}" not in self.template:
                raise ValueError("template must contain {prompt} and {draft}")
            if self.correctness != "any" and self.source != "model":
                raise ValueError(
                    f"correctness={self.correctness} needs source=model (a file's drafts are used as written)"
                )

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.drafts: dict[str, str] = read_drafts(cfg.path, cfg.file_key) if cfg.source == "file" and cfg.path else {}
        self.side = SideModel(cfg.model, cfg.draft_max_tokens, cfg.draft_temperature) if cfg.model else None
        self.last: list[tuple[str | None, str | None]] = []  # per row: (draft, the key it was written for)
        self.bank: dict[str, str] = {}  # source=model, shuffled: recent drafts by the problem they were written for

    def check_run(self, run: Any) -> None:
        if self.cfg.source == "model" and self.cfg.match == "shuffled" and run.plan.prompts_per_step < 2:
            raise ConfigError(
                "algorithm.rollout: match=shuffled with source=model rotates drafts between the prompts of a "
                f"step; it needs >= 2 (train.completions_per_step / train.num_generations = {run.plan.prompts_per_step})."
            )

    def _keys(self, ctx: RolloutContext, starts: list[int], prompts: list) -> list[str]:
        col = self.cfg.key_column
        if self.cfg.source == "model":
            return [user_text(prompts[s]) for s in starts]
        if col not in ctx.rows[starts[0]]:
            raise KeyError(f"rollout 'draft_injection': no data column {col!r} (set algorithm.rollout.key_column)")
        return [str(ctx.rows[s][col]) for s in starts]

    def _model_drafts(self, prompts: list, golds: list[float | None], ctx: RolloutContext) -> list[str]:
        """One draft per prompt from the draft model, of the asked correctness (redrawn, then repaired)."""
        assert self.side is not None  # source=model requires model (Config.__post_init__)
        device = ctx.device
        texts = self.side.generate(prompts, device)
        want = self.cfg.correctness
        if want == "any":
            return texts

        def off(p: int) -> bool:  # the draft is not of the asked kind (a row without a gold answer never is)
            ok = is_correct(texts[p], golds[p])
            return ok is not None and ok != (want == "correct")

        first_off = [p for p in range(len(texts)) if off(p)]
        for _ in range(self.cfg.redraws):
            todo = [p for p in range(len(texts)) if off(p)]
            if not todo:
                break
            for p, text in zip(todo, self.side.generate([prompts[p] for p in todo], device)):
                texts[p] = text
        repaired = [p for p in range(len(texts)) if off(p)]
        for p in repaired:
            gold = golds[p]
            assert gold is not None  # off() is False without a gold answer
            texts[p] = make_wrong(texts[p], gold, ctx.rng) if want == "wrong" else make_correct(texts[p], gold)
        ctx.log("draft_injection/redrawn_frac", len(first_off) / len(texts))
        ctx.log("draft_injection/repaired_frac", len(repaired) / len(texts))
        return texts

    def _mismatched(
        self, texts: list[str], keys: list[str], ctx: RolloutContext
    ) -> list[tuple[str | None, str | None]]:
        """Each prompt gets the draft of another problem: the next different one of the step, else a banked one."""
        chosen: list[tuple[str | None, str | None]] = []
        for p, key in enumerate(keys):
            q = next_other(keys, p)
            if q is not None:
                chosen.append((texts[q], keys[q]))
                continue
            others = [k for k in self.bank if k != key]
            other = ctx.rng.choice(others) if others else None
            chosen.append((self.bank[other], other) if other is not None else (None, None))
        for text, key in zip(texts, keys):
            self.bank.pop(key, None)
            self.bank[key] = text
        while len(self.bank) > BANK_SIZE:
            self.bank.pop(next(iter(self.bank)))
        return chosen

    def _choose(
        self, keys: list[str], prompts: list, golds: list[float | None], ctx: RolloutContext
    ) -> list[tuple[str | None, str | None]]:
        """One (draft, key it was written for) per prompt of the batch."""
        if self.cfg.source == "model":
            texts = self._model_drafts(prompts, golds, ctx)
            if self.cfg.match == "matched":
                return list(zip(texts, keys))
            return self._mismatched(texts, keys, ctx)
        chosen: list[tuple[str | None, str | None]] = []
        for key in keys:
            if key not in self.drafts:
                if self.cfg.missing == "error":
                    raise KeyError(f"rollout 'draft_injection': no draft for {key!r} in {self.cfg.path}")
                chosen.append((None, None))
            elif self.cfg.match == "matched":
                chosen.append((self.drafts[key], key))
            else:
                others = [k for k in self.drafts if k != key]
                other = ctx.rng.choice(others) if others else key
                chosen.append((self.drafts[other], other))
        return chosen

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        groups = ctx.groups(len(prompts))
        starts = [g[0] for g in groups]
        keys = self._keys(ctx, starts, prompts)
        golds = [gold_number(ctx.rows[s].get(self.cfg.answer_column)) for s in starts]
        chosen = self._choose(keys, [prompts[s] for s in starts], golds, ctx)
        injected, self.last = list(prompts), []
        for group, (draft, source) in zip(groups, chosen):
            for i in group:
                if draft is not None:
                    text = self.cfg.template.format(prompt=user_text(prompts[i]), draft=draft)
                    injected[i] = with_user_text(prompts[i], text)
                self.last.append((draft, source))
        ctx.log("draft_injection/with_draft_frac", sum(d is not None for d, _ in chosen) / len(chosen))
        ctx.log("draft_injection/matched_frac", sum(s == k for (_, s), k in zip(chosen, keys)) / len(chosen))
        kind = f"draft_{self.cfg.match}"
        out = ctx.generate(injected, kind)
        out.kinds = [kind if d is not None else "natural" for d, _ in self.last]
        return out
