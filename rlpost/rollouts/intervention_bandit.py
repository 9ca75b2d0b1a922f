"""intervention_bandit: RAIL, recoverability-aware intervention learning (seed 000 #8).

"RAIL models intervention selection as an online contextual-bandit problem and trains a recoverability
controller using intervention traces collected through a shadow-to-live procedure." Per group of G rows
(one prompt x), with p = ``probe``:

1. probe: TRL samples the first p rows under x; they are scored with the run's own reward (its terms and
   combination) to give the context x_g [5] (linucb.py ``context``: bias, probe mean reward, probe reward
   std, prompt length, mean probe completion length);
2. choose: a LinUCB bandit (linucb.py) over ``arms`` picks one intervention for the group's k = G - p
   remaining slots; during the first ``shadow_steps`` training steps (shadow mode) the arm is drawn
   uniformly at random and the bandit's would-be choice is only logged; after that (live) the bandit picks;
3. intervene (kind ``intervention_<arm>``, each sampled k times):
   - ``none``: no rollout is spent; the slots hold an empty completion with NaN reward, so they leave the
     GRPO group (advantage 0) and the group trains on its probe alone;
   - ``extra``: k more natural samples under x;
   - ``hint``: a hint in the user message: the data column ``hint_column``, else one written for the
     task by the frozen ``writer`` (rlpost/rewards/rubric_writer.py; it sees ``reference_column``);
   - ``critique``: the writer's critique of the probe's lowest-reward attempt (feedback_refine.py's
     instruction), then a rewrite turn after that attempt (conditioned.py ``revise_prompt``);
   - ``draft``: a draft in the user message (draft_injection.py's template): the first ``draft_fraction``
     of the data column ``draft_column`` (a partial reference solution), else the probe's best attempt;
   conditioned rows (hint, critique, draft) are trained under x, as every conditioned rollout (conditioned.py);
4. reward the bandit (``adjust_rewards``, once the trainer has scored the batch): the improvement the
   intervention caused, ``gain=mean``: mean R(slots) - mean R(probe) (``none``: 0 by definition, nothing
   was done), or ``gain=spread``: std R(probe + slots) - std R(probe) (the learning signal GRPO gets);
   the arm's A, b are updated with x_g.

Choices where the abstract is silent: LinUCB (not Thompson sampling): deterministic given its state, so
every process picks alike and a resumed run continues exactly, and its update is closed-form; the gain
is measured in the run's combined reward (``gain=mean`` is "recoverability": did the intervention recover
what the probe missed); the context is recomputed in ``adjust_rewards`` from the batch's own probe rewards
(identical to the choice-time context for a per-row combine), so the update uses the gathered batch and
every process holds the same bandit; one hint / critique / draft per group, shared by its k slots; a hint
or critique the writer failed to write turns the group into ``extra`` (logged ``written_frac``); the
writer is frozen and separate from the policy; shadow/live is decided by the optimizer step, so it
resumes with the step. Checkpointed: the bandit's A, b, counts and gain sums. Logged per step:
``intervention_bandit/live``, ``pick/<arm>`` (share of groups), ``bandit_pick/<arm>`` (the bandit's
would-be choice), ``ucb/<arm>`` and ``predicted/<arm>`` (mean over groups), ``probe_reward``, and from
the update ``gain/<arm>`` (mean improvement of this batch) and ``gain_avg/<arm>`` (over training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch

from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rewards.rubric_writer import build_writer
from rlpost.rollouts.base import (
    NATURAL,
    ROLLOUTS,
    RolloutContext,
    Rollouts,
    RolloutStrategy,
    completion_like,
    user_text,
)
from rlpost.rollouts.draft_injection import TEMPLATE as DRAFT
from rlpost.rollouts.feedback_refine import INSTRUCTION as CRITIQUE_ASK
from rlpost.rollouts.feedback_refine import NOTE as CRITIQUE
from rlpost.rollouts.interventions import intervened_prompt, write_notes
from rlpost.rollouts.linucb import DIM, LinUCB, context
from rlpost.scoring.score import score

ARMS = ("none", "hint", "critique", "draft", "extra")
PREFIX = "intervention_"  # the kind of an intervened row: intervention_<arm>
HINT_ASK = (
    "Write one short hint that helps solve the task below. Do not state the final answer.\n\nTask: {task}{reference}"
)
HINT = "Hint: {hint}"


@ROLLOUTS.register("intervention_bandit")
class InterventionBandit(RolloutStrategy):
    """RAIL: a probe, then a LinUCB bandit's intervention for the rest of the group, rewarded by its improvement."""

    stateful = True  # the bandit travels with every checkpoint (rlpost/runs/state.py)
    reward_adjustment = "relative"  # the none arm's empty slots leave the group (NaN)

    @dataclass(frozen=True)
    class Config:
        probe: Annotated[int, Range(ge=1)] = 2  # p: natural probe rollouts per group (< train.num_generations)
        arms: list[str] = field(default_factory=lambda: list(ARMS))  # the interventions: none hint critique draft extra
        shadow_steps: Annotated[int, Range(ge=0)] = 4  # training steps of shadow mode (random arms, bandit trained)
        alpha: Annotated[float, Range(ge=0)] = 1.0  # LinUCB exploration width
        ridge: Annotated[float, Range(gt=0)] = 1.0  # LinUCB prior: A_a starts at ridge * I
        gain: Literal["mean", "spread"] = "mean"  # the improvement: mean reward gain | group reward-std gain
        length_scale: Annotated[float, Range(gt=0)] = 500.0  # characters per unit of the length features
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "max_new_tokens": 64})
        reference_column: str | None = None  # a data column the writer also reads (e.g. answer; null: none)
        hint_column: str | None = None  # hint: a data column holding hints (null: the writer writes them)
        hint_instruction: str = HINT_ASK  # the writer's hint prompt; {task} {reference}
        hint_template: str = HINT  # appended to the user message; {hint}
        critique_instruction: str = CRITIQUE_ASK  # the writer's critique prompt; {task} {response} {reference}
        critique_template: str = CRITIQUE  # the turn after the critiqued attempt; {feedback}
        max_note_chars: Annotated[int, Range(ge=1)] = 400  # a hint / critique / attempt is cut to this length
        draft_column: str | None = None  # draft: a reference-solution column (null: the probe's best attempt)
        draft_fraction: Annotated[float, Range(gt=0, le=1)] = 0.5  # draft_column: the share of it shown
        draft_template: str = DRAFT  # the user message with the draft; {prompt} {draft}

        def __post_init__(self):
            bad = [a for a in self.arms if a not in ARMS]
            if bad or not self.arms or len(set(self.arms)) != len(self.arms):
                raise ValueError(f"arms must be distinct names from {list(ARMS)}, got {self.arms}")
            for name, keys in (("hint_template", ["{hint}"]), ("critique_template", ["{feedback}"]),
                               ("draft_template", ["{prompt}", "{draft}"]), ("hint_instruction", ["{task}"]),
                               ("critique_instruction", ["{task}", "{response}"])):  # fmt: skip
                if any(k not in getattr(self, name) for k in keys):
                    raise ValueError(f"{name} must contain {' and '.join(keys)}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.bandit = LinUCB(list(cfg.arms), DIM, cfg.alpha, cfg.ridge)
        needs_writer = "critique" in cfg.arms or ("hint" in cfg.arms and cfg.hint_column is None)
        self.writer = build_writer(cfg.writer) if needs_writer else None
        self._reward: Any = None  # the run's RewardParts, set by check_run
        self.last: list[dict[str, Any]] = []  # per group of the last batch: arm, would-be arm, context, prompt

    def baseline_rows(self, num_generations: int) -> int:
        """The ``probe`` rows: the ``none`` arm's slots leave the group (NaN)."""
        return self.cfg.probe

    def check_run(self, run: Any) -> None:
        g = run.settings.train.num_generations
        if self.cfg.probe >= g:
            raise ConfigError(
                f"algorithm.rollout.probe={self.cfg.probe} must be smaller than train.num_generations={g}: "
                "the intervention needs slots of the group."
            )
        if run.reward.combine.produces == "advantages":
            raise ConfigError(
                f"reward/combine={type(run.reward.combine).registry_name} returns group-centred advantages, but "
                "algorithm/rollout=intervention_bandit measures each intervention's improvement in the combined "
                "reward; use a combine that returns rewards (weighted_sum, focal)."
            )
        if self.writer is not None and self.writer.cfg.backend == "local":
            from rlpost.models.loading import check_weights_available

            check_weights_available(self.writer.cfg.model, "algorithm.rollout.writer.model")
        self._reward = run.reward

    # ---- choose -----------------------------------------------------------------------------
    def probe_rewards(self, ctx: RolloutContext, rows: list[int], out: Rollouts) -> list[float]:
        texts = [completion_text(out.completions[i]) for i in rows]
        terms = score([ctx.rows[i] for i in rows], texts, 1, self._reward.funcs)
        return self._reward.scored(terms)[0].tolist()

    def _choose(self, ctx: RolloutContext, x: list[float]) -> tuple[str, str]:
        """(the arm played, the bandit's choice): shadow mode plays a uniformly random arm."""
        wanted = self.bandit.choose(x)
        live = ctx.step >= self.cfg.shadow_steps
        return (wanted if live else ctx.rng.choice(self.cfg.arms)), wanted

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        p, groups = self.cfg.probe, ctx.groups(len(prompts))
        probe_rows = [i for grp in groups for i in list(grp)[:p]]
        first = ctx.generate([prompts[i] for i in probe_rows])
        out = Rollouts.empty(len(prompts), first)
        for j, i in enumerate(probe_rows):
            out.put(i, first, j)
        rewards = dict(zip(probe_rows, self.probe_rewards(ctx, probe_rows, out)))
        plan: list[dict[str, Any]] = []
        for grp in groups:
            rows = list(grp)[:p]
            r = [rewards[i] for i in rows]
            texts = [completion_text(out.completions[i]) for i in rows]
            x = context(r, texts, user_text(prompts[grp[0]]), self.cfg.length_scale)
            arm, wanted = self._choose(ctx, x)
            order = sorted(rows, key=lambda i: (-math.inf if math.isnan(rewards[i]) else rewards[i], i))
            plan.append({"start": grp[0], "slots": list(grp)[p:], "arm": arm, "wanted": wanted, "x": x,
                         "worst": order[0], "best": order[-1], "note": ""})  # fmt: skip
        write_notes(self.cfg, self.writer, ctx, prompts, out, plan)
        for g in plan:
            if g["note"] is None:  # the writer failed: the slots get natural samples
                g["arm"] = "extra"
        sampled = [(g, slot) for g in plan if g["arm"] != "none" for slot in g["slots"]]
        asked = {id(g): intervened_prompt(self.cfg, g, prompts, ctx, out) for g in plan if g["arm"] != "none"}
        if sampled:
            more = ctx.generate([asked[id(g)] for g, _ in sampled])
            for j, (g, slot) in enumerate(sampled):
                out.put(slot, more, j, kind=PREFIX + g["arm"])
                if g["arm"] != "extra":  # sampled under a conditioned prompt, trained under x
                    out.prompt_ids[slot] = list(out.prompt_ids[g["start"]])
                    if out.logprobs is not None:
                        out.logprobs[slot] = [None] * len(out.completion_ids[slot])
        for g in plan:
            if g["arm"] == "none":  # nothing spent: an empty completion that leaves the group (adjust_rewards)
                for slot in g["slots"]:
                    out.put(slot, out, g["start"])
                    out.force(slot, ctx.completion_ids(""), completion_like("", out.completions[g["start"]]),
                              PREFIX + "none")  # fmt: skip
        self._log_choice(ctx, plan, rewards)
        self.last = [{k: g[k] for k in ("start", "arm", "wanted", "x", "note")} for g in plan]
        return out

    def _log_choice(self, ctx: RolloutContext, plan: list[dict], rewards: dict[int, float]) -> None:
        ctx.log("intervention_bandit/live", float(ctx.step >= self.cfg.shadow_steps))
        scored = [r for r in rewards.values() if not math.isnan(r)]
        ctx.log("intervention_bandit/probe_reward", sum(scored) / len(scored) if scored else float("nan"))
        predicted, ucb = zip(*(self.bandit.scores(g["x"]) for g in plan))
        for k, arm in enumerate(self.cfg.arms):
            ctx.log(f"intervention_bandit/pick/{arm}", sum(g["arm"] == arm for g in plan) / len(plan))
            ctx.log(f"intervention_bandit/bandit_pick/{arm}", sum(g["wanted"] == arm for g in plan) / len(plan))
            ctx.log(f"intervention_bandit/predicted/{arm}", float(torch.stack(predicted)[:, k].mean()))
            ctx.log(f"intervention_bandit/ucb/{arm}", float(torch.stack(ucb)[:, k].mean()))

    # ---- reward the bandit -------------------------------------------------------------------
    def gain(self, rewards: torch.Tensor, probe: list[int], slots: list[int], arm: str) -> float:
        """The improvement the intervention caused (module docstring, step 4); NaN when unscorable."""
        if arm == "none":
            return 0.0
        before, after = rewards[probe], rewards[slots]
        if self.cfg.gain == "mean":
            return float(torch.nanmean(after) - torch.nanmean(before))
        both = torch.cat([before, after])
        return float(spread(both) - spread(before))

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Rewards [N] -> the none arm's slots NaN; each group's (arm, context, gain) updates the bandit."""
        out, gains = rewards.clone(), {arm: list[float]() for arm in self.cfg.arms}
        values = rewards.detach().double().cpu()
        for start in range(0, len(kinds), group_size):
            group = range(start, start + group_size)
            slots = [i for i in group if kinds[i].startswith(PREFIX)]
            if not slots:
                continue
            arm = kinds[slots[0]][len(PREFIX) :]
            probe = [i for i in group if kinds[i] == NATURAL]
            texts = [completion_text(completions[i]) for i in probe]
            x = context(
                [values[i].item() for i in probe], texts, user_text(rows[start]["prompt"]), self.cfg.length_scale
            )
            g = self.gain(values, probe, slots, arm)
            if arm == "none":
                out[slots] = float("nan")
            if not math.isnan(g):
                self.bandit.update(arm, x, g)
                gains[arm].append(g)
        metrics = {f"intervention_bandit/gain/{a}": sum(v) / len(v) for a, v in gains.items() if v}
        for k, arm in enumerate(self.bandit.arms):
            n = self.bandit.counts[k]
            metrics[f"intervention_bandit/gain_avg/{arm}"] = self.bandit.gain_sums[k] / n if n else 0.0
        return out, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"bandit": self.bandit.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bandit.load_state_dict(state["bandit"])

    def describe(self) -> str:
        return (
            f"intervention_bandit (RAIL): {self.cfg.probe} probe rollouts per group, then LinUCB picks one of "
            f"{'/'.join(self.cfg.arms)} for the rest (random for the first {self.cfg.shadow_steps} steps: shadow)"
        )


def spread(r: torch.Tensor) -> torch.Tensor:
    """Population std of the scorable rewards [n] (0 with fewer than 2)."""
    r = r[~torch.isnan(r)]
    return r.std(unbiased=False) if r.numel() > 1 else r.new_zeros(())
