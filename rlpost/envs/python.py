"""The Python tool environment: arithmetic (or any question with a numeric answer) with a ``<python>`` tool
whose code runs in the jail (issue 18, env 1; the code-exec sandbox, rlpost/rewards/sandbox.py).

Episode: as the calculator's (rlpost/envs/calculator.py), but a call is a program: ``<python>print(123 * 456)
</python>`` is answered by one ``role="tool"`` observation with what it printed, ``<result>56088</result>``,
or ``<error>ZeroDivisionError: division by zero</error>`` (its last traceback line), or ``<error>the code
ran past 5 s</error>``. A turn without a call is the final answer: reward 1.0 when its last number equals
the row's ``answer``.

Model-written code never runs unjailed by accident: the code runs in bubblewrap (read-only root, a private
scratch folder, no network, its own pid namespace; rlimits on memory, CPU, file size and processes). Where
bubblewrap is not available, the environment refuses to start (before any model loads) unless
``allow_unjailed_code: true`` says the user accepts that the code runs as them: it could read their files,
write where they can and reach the network (only the rlimits hold). Choices where the issue is silent: the
program's stdout is the result (nothing printed: an empty result), cut to ``max_output_chars``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Message, ToolConfig, ToolEnvironment, row_messages
from rlpost.envs.calculator import final_answer_reward
from rlpost.envs.tags import error_tag, result_tag
from rlpost.rewards.math_answer import gold_number
from rlpost.rewards.sandbox import run_script, sandbox_available
from rlpost.transforms.base import add_note

SYSTEM = (
    "You can run Python. Write <python>code</python> and you will get what it prints as <result>output</result>. "
    "When you know the answer, reply with it and no <python> tag.\n"
    "Example. User: Calculate 12 * 34. You: <python>print(12 * 34)</python> Tool: <result>408</result> You: 408"
)


@dataclass(frozen=True)
class PythonConfig(ToolConfig):
    """The episode limits, the tool's limits and its jail."""

    tool_timeout_s: Annotated[float, Range(gt=0)] = 5.0  # wall-clock seconds per program
    memory_mb: Annotated[int, Range(ge=64)] = 256  # address space of the program (RLIMIT_AS)
    max_output_chars: Annotated[int, Range(ge=1)] = 500  # printed output shown to the policy
    sandbox: Literal["auto", "bwrap", "none"] = "auto"  # the jail when it works / require it / never
    allow_unjailed_code: bool = False  # run model-written code without a jail when there is none (see the risk)
    tag: str = "python"  # the tool-call tag: <python>code</python>


def jail_mode(cfg: Any) -> str:
    """``bwrap`` or ``none`` for an environment config with ``sandbox`` (as ``check_jail`` allowed it)."""
    return "none" if cfg.sandbox == "none" or not sandbox_available() else "bwrap"


def check_jail(cfg: Any, name: str) -> None:
    """Refuse to run model-written code without a jail unless ``allow_unjailed_code`` accepts the risk."""
    jailed = cfg.sandbox != "none" and sandbox_available()
    if cfg.sandbox == "bwrap" and not jailed:
        raise ConfigError(
            "data.env.sandbox=bwrap but bubblewrap is not available here (make setup installs it as root)."
        )
    if not jailed and not cfg.allow_unjailed_code:
        why = "data.env.sandbox=none" if cfg.sandbox == "none" else "bubblewrap is not available here"
        raise ConfigError(
            f"data/env={name} runs model-written code at every turn, and {why}: without a jail that code runs "
            "as you and could read your files, write wherever you can and reach the network (only memory, CPU, "
            "file-size and process limits hold). Install bubblewrap (make setup does, as root), or accept the "
            "risk with data.env.allow_unjailed_code=true."
        )


@ENVS.register("python")
class PythonTool(ToolEnvironment):
    """Questions with a numeric answer and a <python> tool that runs jailed; reward 1.0 for a correct answer."""

    verifiable = True  # the episode reward checks against the row's gold

    Config = PythonConfig
    cfg: PythonConfig
    ARGUMENT, TOOL, SYSTEM, TAG_IN_SYSTEM = "code", "Run a Python program and return what it prints.", SYSTEM, "python"
    ARGUMENT_DOC = "the program"
    runs_code = True

    def __init__(self, cfg: PythonConfig):
        super().__init__(cfg)
        self.gold: float | None = None

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.gold = gold_number(row.get("answer"))
        return add_note(row_messages(row), self.instructions(), "system")

    def use_tool(self, argument: str) -> tuple[bool, str]:
        cfg = self.cfg
        run = run_script(argument, cfg.tool_timeout_s, cfg.memory_mb, jail_mode(cfg), cfg.max_output_chars)
        return (True, result_tag(run.output.strip())) if run.status == "ok" else (False, error_tag(run.output))

    def final_reward(self, message: str) -> float:
        return final_answer_reward(message, self.gold)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        if self.cfg.tool_timeout_s >= self.cfg.step_timeout_s:
            raise ConfigError(
                f"data.env.tool_timeout_s={self.cfg.tool_timeout_s:g} must be below data.env.step_timeout_s="
                f"{self.cfg.step_timeout_s:g}: a step runs every call of its turn"
            )
        check_jail(self.cfg, "python")

    def describe(self) -> str:
        tag = self.cfg.tag
        return (
            f"python: the policy may write <{tag}>code</{tag}>, run in a jail, and gets what it prints back as a "
            "tool message; a turn without a call is the final answer, rewarded 1.0 at the end if it equals the "
            "row's answer, else 0.0"
        )
