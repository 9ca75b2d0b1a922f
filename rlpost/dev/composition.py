"""The composition matrix: every ``reward/combine`` option against every option of the stages after it.

Each cell is decided by the code, not written by hand: the config is composed and built exactly as
``rlpost train`` would (no model loads), and the cell is either ``ok`` or the ``ConfigError`` that
refuses it. Rows are the options found under conf/ (advantage, rollout, correction, bundle,
environment) plus the switches that read or rewrite a reward (safety, shaping); columns are the
combine options. docs/composition.md holds the generated table; tests/config/test_composition.py
keeps it current and checks what an accepted cell means.

    python -m rlpost.dev.composition          # rewrite the generated section of docs/composition.md
    python -m rlpost.dev.composition --check  # exit 1 when docs/composition.md is stale
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.confdir import CONF_DIR
from rlpost.core.errors import ConfigError
from rlpost.run import BuiltRun

DOC = Path(__file__).resolve().parents[2] / "docs" / "composition.md"
BEGIN, END = "<!-- composition matrix: begin (python -m rlpost.dev.composition) -->", "<!-- composition matrix: end -->"

# what an option needs from the rest of the config to build at all (its reward terms, its critic, its episodes)
NEEDS: dict[tuple[str, str], list[str]] = {
    ("reward/combine", "decoupled"): ["reward=math_answer_format"],  # format is its style term
    ("algorithm/advantage", "tiar"): ["reward=ternary_abstention"],
    ("algorithm/advantage", "routed"): ["reward=math_answer_format"],
    ("algorithm/advantage", "segments"): ["reward=math_answer_format"],
    ("algorithm/advantage", "gae"): ["algorithm=ppo"],  # GAE reads the values of PPO's critic
    ("algorithm/advantage", "dpo"): ["algorithm=ed_idpo"],  # DPO's weights need its loss and aggregation
    ("algorithm/advantage", "turn_grpo"): ["data/env=calculator", "reward=env"],
    # ICRL: n >= 1 natural, k = 2 critic and k refined rows per group
    ("algorithm/rollout", "self_critique"): ["train.num_generations=6", "train.completions_per_step=12"],
    ("data/env", "code_repair"): ["data=human_eval", "data.env.allow_unjailed_code=true"],
    ("data/env", "simulated_user"): ["data=booking"],
    ("data/env", "skill_executor"): ["data=skill_families"],
    ("data/env", "python"): ["data.env.allow_unjailed_code=true"],
    # OPD's default teacher, Qwen2.5-Coder-0.5B, needs `make qwen`; the matrix must build without it
    ("algorithm", "opd"): ["algorithm.loss.teacher_model=smollm2-135m"],
    ("algorithm/loss", "opd"): ["algorithm.loss.teacher_model=smollm2-135m"],
}
# an environment's reward term beside the style term `decoupled` needs (its terms replace reward=env's)
ENV_AND_FORMAT = "reward.terms=[{name: env, weight: 1.0}, {name: format, weight: 0.1, params: {tags: [think, answer]}}]"
# left out: user-supplied environments (an import path) and REGEN, which needs recorded replays on disk
# (tests/config/test_compose.py builds it with a stand-in)
# callable/gym need a user class, regen replay folders; frost needs its own reward and data (reward=infill_likelihood
# data=infill), so it composes with the combines in tests/config/test_compose.py instead
SKIP = {
    ("data/env", "callable"),
    ("data/env", "gym"),
    ("data/env", "none"),
    ("algorithm", "regen"),
    ("algorithm/rollout", "frost"),
}
SWITCHES: dict[str, list[tuple[str, list[str]]]] = {  # the switches that read or rewrite a reward
    "safety": [
        ("whiten_rewards", ["algorithm.safety.whiten_rewards.enabled=true"]),
        ("ratio_guard", ["algorithm.safety.ratio_guard.enabled=true"]),
        ("rollback", ["algorithm.safety.rollback.reward_drop_std=3.0"]),
        ("nonfinite", ["algorithm.safety.nonfinite.enabled=true"]),
    ],
    "shaping": [
        ("overlong.soft_penalty", ["algorithm.overlong.soft_penalty=true"]),
        ("overlong.filter", ["algorithm.overlong.filter=true"]),
        ("kl.placement=loss", ["algorithm.kl.coef=0.05", "algorithm.kl.placement=loss"]),
        ("kl.placement=reward", ["algorithm.kl.coef=0.05", "algorithm.kl.placement=reward"]),
        ("dynamic_sampling", ["algorithm.dynamic_sampling=true"]),
    ],
}
GROUPS = {  # row axis -> config group whose yaml files are its options
    "advantage": "algorithm/advantage",
    "rollout": "algorithm/rollout",
    "correction": "algorithm/correction",
    "bundle": "algorithm",
    "environment": "data/env",
}


@dataclass(frozen=True)
class Row:
    axis: str  # advantage, rollout, ..., safety, shaping
    label: str  # the option (or switch) name
    overrides: tuple[str, ...]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if (group, p.stem) not in SKIP)


def columns() -> list[str]:
    return options("reward/combine")


def rows() -> Iterator[Row]:
    for axis, group in GROUPS.items():
        for option in options(group):
            needs = NEEDS.get((group, option), [])
            if group == "data/env":
                needs = ["reward=env", *needs]  # an environment's reward reaches the run through reward=env
            yield Row(axis, option, (f"{group}={option}", *needs))
    for axis, switches in SWITCHES.items():
        for label, overrides in switches:
            yield Row(axis, label, tuple(overrides))


def overrides_of(row: Row, combine: str) -> list[str]:
    """The overrides of one cell: the combine (and what it needs) first, then the row's option."""
    needs = NEEDS.get(("reward/combine", combine), [])
    if row.axis == "environment" and needs:  # the episode's env term joins the combine's terms
        return [f"reward/combine={combine}", *needs, *row.overrides, ENV_AND_FORMAT]
    return [f"reward/combine={combine}", *needs, *row.overrides]


def cell(row: Row, combine: str) -> BuiltRun | ConfigError:
    """The built run when the cell builds; the ConfigError that refuses it otherwise."""
    try:
        return build_run(compose(overrides_of(row, combine)))
    except ConfigError as err:
        return err


def matrix() -> dict[Row, dict[str, BuiltRun | ConfigError]]:
    """Every row x every combine option (about 250 builds, 1-2 minutes on 2 cores)."""
    return {row: {combine: cell(row, combine) for combine in columns()} for row in rows()}


def section(result: dict[Row, dict[str, BuiltRun | ConfigError]]) -> str:
    """The generated markdown: one table (rows x combine options), then the numbered refusal reasons."""
    combines = columns()
    reasons: list[str] = []
    lines = [BEGIN, "", "| stage | option | " + " | ".join(combines) + " |", "|---|---|" + "---|" * len(combines)]
    for row, cells in result.items():
        marks = []
        for combine in combines:
            built = cells[combine]  # the combine's own name becomes <combine>, so one reason serves every column
            reason = re.sub(rf"\b{combine}\b", "<combine>", str(built)) if isinstance(built, ConfigError) else None
            if reason is None:
                marks.append("ok")
                continue
            if reason not in reasons:
                reasons.append(reason)
            marks.append(f"refused ({reasons.index(reason) + 1})")
        lines.append(f"| {row.axis} | {row.label} | " + " | ".join(marks) + " |")
    lines += ["", "Refusals, as `rlpost train` prints them:", ""]
    lines += [f"{i}. {reason.replace(chr(10), ' ')}" for i, reason in enumerate(reasons, 1)]
    return "\n".join([*lines, "", END])


def updated_doc(text: str, generated: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + generated + tail


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    new = updated_doc(text, section(matrix()))
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is stale: run python -m rlpost.dev.composition", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
