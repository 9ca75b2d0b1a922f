"""The frozen-worker environment: the policy writes instructions, a frozen model carries them out, and the
reward is scored on the worker's output (issue 18, env 5; seed 004 #21, learned prompting policies for a
frozen "black-box" worker LLM).

Episode: ``reset(row)`` shows the policy the task (the row's prompt) after a system message saying that its
reply is an instruction for a worker that will see only that instruction and the task. Each assistant turn is
one instruction; the worker (a frozen model named like ``model=``: ``worker_model``, e.g. ``smollm2-135m``,
greedy, ``worker_max_new_tokens``) answers ``"<instruction>\\n\\nTask: <question>"`` as a user message, and
its answer is scored against the row's ``answer`` (its last number equals it: 1.0, else 0.0). With
``max_turns: 1`` (the default) that score is the episode's reward. With more turns the policy sees the
worker's answer (``role="user"``, ``Worker: ...``; the score stays hidden) and may write a better
instruction; the turn rewards are the score differences ``s_t - s_{t-1}``, so the episode's reward is the
last instruction's score and ``turn_grpo`` credits each revision with what it changed.

Choices where the seed is silent: the worker is greedy (the reward of an instruction is deterministic); an
instruction that contains the gold answer itself scores 0 (``forbid_answer: true``: the prompter must
instruct, not solve); the worker is loaded once per process and kept on the GPU when there is one; each
step generates for one episode (no batching across episodes: a CPU worker adds about one generation per
episode per turn to a step). The seed's contrastive experience buffer with textual critiques is the
method's (issue 19), not the environment's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.envs.calculator import final_answer_reward
from rlpost.models.options import frozen_generator, generate_reply, named_model_config
from rlpost.rewards.math_answer import gold_number
from rlpost.transforms.base import add_note

SYSTEM = (
    "Do not solve the task yourself. Write an instruction for a worker model: it will see only your "
    "instruction and the task, and its answer is what counts. Reply with the instruction only."
)


@dataclass(frozen=True)
class FrozenWorkerConfig(Environment.Config):
    """The episode limits, the worker model and how it answers."""

    max_turns: Annotated[int, Range(ge=1)] = (
        1  # 1: one instruction per task; more: revisions after seeing the worker's answer
    )
    worker_model: str = "smollm2-135m"  # a conf/model option: the frozen worker
    worker_overrides: dict[str, Any] = field(default_factory=dict)  # its ModelConfig fields (e.g. tiny_hidden)
    worker_max_new_tokens: Annotated[int, Range(ge=1)] = 48  # the worker's answer length
    forbid_answer: bool = True  # an instruction that contains the gold answer scores 0


def worker(cfg: FrozenWorkerConfig) -> tuple[Any, Any]:
    """The frozen worker model and its tokenizer (loaded once per process: rlpost/models/options.py)."""
    return frozen_generator(
        cfg.worker_model, cfg.worker_overrides, "data.env.worker_model", "data.env.worker_overrides"
    )


def task_text(row: dict[str, Any]) -> str:
    """The task the worker reads: the row's ``question`` column, else its prompt's last user message."""
    messages = row_messages(row)
    return str(row.get("question") or next(m["content"] for m in reversed(messages) if m["role"] == "user"))


def mentions(text: str, answer: str) -> bool:
    """Whether ``answer`` appears in ``text`` as a whole token (a number is not part of a longer one)."""
    answer = answer.strip()
    return bool(answer) and re.search(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)", text) is not None


@ENVS.register("frozen_worker")
class FrozenWorker(Environment):
    """The policy instructs a frozen worker model; the reward is the worker's answer's correctness."""

    Config = FrozenWorkerConfig
    cfg: FrozenWorkerConfig
    verifiable = True  # the episode reward checks the worker's answer against the row's gold (eval/accuracy)

    def __init__(self, cfg: FrozenWorkerConfig):
        super().__init__(cfg)
        self.question, self.answer, self.score = "", "", 0.0

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        messages = row_messages(row)
        self.question = task_text(row)
        self.answer, self.score = str(row.get("answer", "")), 0.0
        return add_note(messages, SYSTEM, "system")

    def carry_out(self, instruction: str) -> str:
        """The worker's greedy answer to the instruction and the task."""
        model, tok = worker(self.cfg)
        prompt = [{"role": "user", "content": f"{instruction.strip()}\n\nTask: {self.question}"}]
        return generate_reply(model, tok, prompt, self.cfg.worker_max_new_tokens)

    def step(self, message: str) -> StepResult:
        answer = self.carry_out(message)
        leaked = self.cfg.forbid_answer and mentions(message, self.answer)
        score = 0.0 if leaked else final_answer_reward(answer, gold_number(self.answer))
        reward, self.score = score - self.score, score  # turn rewards telescope to the last score
        info = {"worker_answer": answer, "leaked_answer": leaked}
        return StepResult([{"role": "user", "content": f"Worker: {answer}"}], reward, False, info)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        # an unknown worker model or field fails here, before any model loads
        named_model_config(self.cfg.worker_model, self.cfg.worker_overrides, "data.env.worker_model",
                           "data.env.worker_overrides")  # fmt: skip

    def describe(self) -> str:
        return (
            f"frozen_worker: each policy turn is an instruction; a frozen {self.cfg.worker_model} answers the task "
            "with it (greedy), and the reward is its answer's correctness (the last turn's, as score differences)"
        )
