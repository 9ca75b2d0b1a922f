"""code_exec: run the completion's code against the row's tests; reward = fraction passed (or all-pass).

The execution reward of METHODS.md section 3 (issue 9: "code execution"). The child process, its limits
and its statuses are in ``sandbox.py`` / ``code_runner.py``; this module extracts the code and scores.

Choices where nothing dictated one:
- Code: with ``extract: auto``, the first fenced block (```` ```python ````, ```` ```py ```` or untagged;
  an unclosed fence, i.e. a generation cut off, keeps what follows it) and otherwise the whole answer
  (after ``</think>``); ``fenced`` requires a block (none: status ``no_code``, reward 0); ``whole``
  always takes the whole answer.
- The row's ``prompt_column`` (HumanEval's function signature + docstring, kept as ``code_prompt`` by
  ``data=human_eval``) is put before the code, so both a completion that writes only the function body
  and one that writes the whole function (which redefines it) run; ``prompt_column: null`` runs the code
  alone.
- Tests (``tests_column``) are Python; with ``entry_point_column`` they define ``check(candidate)``
  (HumanEval), and each top-level statement containing an ``assert`` is one test (``code_runner.py``).
- Reward: ``score: fraction`` = passed / total tests; ``all_pass`` = 1.0 only when every test passes.
  A timeout, a crash while loading, a memory blow-up, a syntax error or no code scores 0.0 (a
  timeout gives no partial credit: the child is killed before it reports); the run never stops.
  A row whose tests are empty/None is unscorable (``None``).
- Completions run in parallel threads (``workers`` children at a time).
- Logged through TRL's ``log_metric`` per call: ``<term>/<status>`` = the fraction of completions
  with that status (``ok``, ``syntax_error``, ``crash``, ``memory``, ``timeout``, ``no_entry_point``,
  ``no_code``) and ``<term>/all_pass`` = the fraction passing every test.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.sandbox import STATUSES, Outcome, execute

_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(text: str, how: str) -> str | None:
    """The code of an answer (module docstring), or None when ``fenced`` finds no block."""
    if how in ("auto", "fenced"):
        for match in _FENCE.finditer(text):
            return match.group(2)
        if how == "fenced":
            return None
    return text


@REWARDS.register("code_exec")
class CodeExec(Reward):
    """Fraction (or all) of the row's tests the completion's code passes, run in a limited child process."""

    verifiable = True  # eval/accuracy's default criterion (rlpost/scoring/correctness.py)

    @dataclass(frozen=True)
    class Config:
        tests_column: str = "test"  # dataset column holding the test code
        entry_point_column: str | None = "entry_point"  # column naming the tested function (null: plain asserts)
        prompt_column: str | None = "code_prompt"  # column whose code goes before the completion (null: none)
        extract: Literal["auto", "fenced", "whole"] = "auto"  # first fenced block else whole answer / block / whole
        score: Literal["fraction", "all_pass"] = "fraction"  # passed/total tests, or 1.0 only if all pass
        timeout_s: Annotated[float, Range(gt=0)] = 5.0  # wall-clock limit per completion (a timeout scores 0)
        memory_mb: Annotated[int, Range(ge=1)] = 1024  # address-space limit of the child (RLIMIT_AS)
        workers: Annotated[int, Range(ge=1)] = 4  # completions executed at the same time
        sandbox: Literal["auto", "bwrap", "none"] = "auto"  # bwrap when installed / require it / plain child
        strip_think: bool = True  # run only the text after </think>

    def __init__(self, cfg: Config):
        if cfg.timeout_s <= 0:
            raise ParamError("timeout_s", f"must be > 0, got {cfg.timeout_s}")
        if cfg.memory_mb < 64:
            raise ParamError(
                "memory_mb", f"must be >= 64 (the Python interpreter alone needs ~30 MB), got {cfg.memory_mb}"
            )
        if cfg.workers < 1:
            raise ParamError("workers", f"must be >= 1, got {cfg.workers}")
        super().__init__(cfg)

    def run_one(self, completion: Any, tests: Any, entry_point: Any, prefix: Any) -> Outcome:
        code = extract_code(answer_text(completion, self.cfg.strip_think), self.cfg.extract)
        if code is None or not code.strip():
            return Outcome("no_code")
        program = f"{prefix}\n{code}\n" if prefix else code
        entry = str(entry_point) if entry_point else None
        cfg = self.cfg
        return execute(program, str(tests), entry, cfg.timeout_s, cfg.memory_mb, cfg.sandbox)

    def reward(self, outcome: Outcome) -> float:
        if outcome.status != "ok" or outcome.total == 0:
            return 0.0
        if self.cfg.score == "all_pass":
            return float(outcome.passed == outcome.total)
        return outcome.passed / outcome.total

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` + tests (and entry point, prompt code) columns ``[N]`` -> rewards ``[N]`` in [0, 1]."""
        n, name = len(completions), self.registry_name
        tests = column(kwargs, self.cfg.tests_column, n, name)
        entries = column(kwargs, self.cfg.entry_point_column, n, name) if self.cfg.entry_point_column else [None] * n
        prefixes = column(kwargs, self.cfg.prompt_column, n, name) if self.cfg.prompt_column else [None] * n
        todo = [i for i in range(n) if tests[i] is not None and str(tests[i]).strip()]
        with ThreadPoolExecutor(max_workers=self.cfg.workers) as pool:
            outcomes = list(pool.map(lambda i: self.run_one(completions[i], tests[i], entries[i], prefixes[i]), todo))
        rewards: list[float | None] = [None] * n
        for i, outcome in zip(todo, outcomes):
            rewards[i] = self.reward(outcome)
        log = kwargs.get("log_metric")
        if callable(log) and outcomes:
            label = self.__name__
            for status in STATUSES:
                log(f"{label}/{status}", sum(o.status == status for o in outcomes) / len(outcomes))
            passed_all = sum(o.status == "ok" and o.total > 0 and o.passed == o.total for o in outcomes)
            log(f"{label}/all_pass", passed_all / len(outcomes))
        return rewards
