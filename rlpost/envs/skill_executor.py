"""The skill-executor environment: SKILLER (seed 000 #2). The policy writes a skill document for a family of
tasks; a small frozen executor solves tasks of that family with the document as its system prompt; the reward
is the executor's success. The strong model is the actor (the policy) and, optionally, the critic (a writer
model); the small-model agent is the environment; the critic's signal reaches the policy as natural language.

Episode (a row of ``data=skill_families``: a family's description, worked examples, and a pool of tasks):

    reset(row, seed)   k = tasks_per_doc held-in tasks drawn from the row's pool with ``seed`` (the G
                       episodes of a group share it, so their documents are scored on the same tasks)
    step(doc)          doc_c = doc[:max_doc_chars]; the executor answers each task t_i (greedy, one batch):
                       system = doc_c, user = "<question>\\nGive only the final answer."
                       solved_i = [last number of the reply = gold_i] and not (forbid_answer and gold_i in doc)
                       score = mean_i solved_i   in [0, 1]       (the executor's success on k tasks)
                       reward = score - previous score          (turn rewards telescope to the last score)

With ``max_turns: 1`` (the default) the episode's reward is the document's score. With ``max_turns: 2`` the
policy then reads, as a user message, how many tasks the executor solved and, when ``critic`` is set, the
critic's written feedback on the executor's failures (the failed tasks, the executor's replies and the gold
answers are shown to the critic, not to the policy), and writes the whole document again: the abstract's
"reinforcement learning signals propagated via natural language". The last document's score is the episode's
reward, and ``turn_grpo`` would credit each revision with what it changed.

Choices where the seed is silent: the executor is any ``conf/model`` option (default SmolLM2-135M-Instruct,
the "compact model"), greedy, loaded once per process (rlpost/models/options.py ``frozen_generator``, shared
with data/env=frozen_worker); the executor sees only the document and one task (no examples: the document
is the whole skill); a document longer than ``max_doc_chars`` is cut there (the executor reads the start); a
held-in task whose gold answer the document states as a whole token counts as failed (``forbid_answer``: the
policy never sees the held-in tasks, so this matters for a revision after a critic that saw them); a document
cut off at the token cap is executed as written so far and ends the episode (``reads_cut_turns``); the critic
is rlpost's text writer (rlpost/rewards/rubric_writer.py ``build_writer``: a local model or an
OpenAI-compatible endpoint), asked for 2-3 sentences without the answers; a failed critic call leaves the
score-only message. Logged per episode (``env/<key>``, ``eval/env/<key>``): ``executor_success`` (the last
document's score), ``first_success`` (the first document's), ``no_skill_success`` (the same executor on the
same tasks with no document: the no-skill baseline, computed once per task set), ``skill_gain`` (their
difference), ``doc_chars`` (the last document's length), ``leaked`` (held-in answers the document stated) and
``critiques`` (feedback messages that carried the critic's text: 0 without a critic, or when every first
document solved everything).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.envs.calculator import final_answer_reward
from rlpost.envs.frozen_worker import mentions
from rlpost.models.options import frozen_generator, generate_replies, named_model_config
from rlpost.rewards.math_answer import gold_number
from rlpost.transforms.base import add_note

SYSTEM = (
    "Write a skill document for a small language model. It will read your document as its instructions and then "
    "solve new tasks of the family below, one at a time, giving only the final answer. Write a short step-by-step "
    "procedure that makes it solve such tasks correctly. Reply with the skill document only."
)
TASK_SUFFIX = "\nGive only the final answer."
CRITIC = (
    "A small language model solved arithmetic tasks with the skill document below as its instructions.\n\n"
    "Skill document:\n{doc}\n\nTasks it got wrong:\n{failures}\n\nIn 2-3 sentences, say what the skill document "
    "should change so that the model solves tasks like these. Do not state the answers of these tasks."
)
_NO_SKILL: dict[tuple[str, tuple[str, ...]], float] = {}  # (executor, questions) -> no-skill success (greedy)
_CRITICS: dict[str, Any] = {}  # one critic writer per config and process
_LOCK = threading.Lock()


@dataclass(frozen=True)
class SkillExecutorConfig(Environment.Config):
    """The episode limits, the executor, the held-in tasks per document and the critic."""

    max_turns: Annotated[int, Range(ge=1)] = 1  # 1: one document per episode; 2+: revisions after feedback
    executor_model: str = "smollm2-135m"  # a conf/model option: the frozen executor
    executor_overrides: dict[str, Any] = field(default_factory=dict)  # its ModelConfig fields (e.g. tiny_hidden)
    executor_max_new_tokens: Annotated[int, Range(ge=1)] = 24  # the executor's answer length per task
    tasks_per_doc: Annotated[int, Range(ge=1)] = 4  # held-in tasks the executor solves with each document
    max_doc_chars: Annotated[int, Range(ge=1)] = 1200  # the executor reads at most this much of a document
    forbid_answer: bool = True  # a held-in task whose answer the document states counts as failed
    critic: dict[str, Any] | None = None  # null: score-only feedback; a writer node (rubric_writer WriterConfig)
    critic_failures: Annotated[int, Range(ge=1)] = 3  # failed tasks shown to the critic
    no_skill_baseline: bool = True  # also score the executor with no document (logged, not rewarded)


def executor(cfg: SkillExecutorConfig) -> tuple[Any, Any]:
    """The frozen executor and its tokenizer (loaded once per process)."""
    return frozen_generator(cfg.executor_model, cfg.executor_overrides, "data.env.executor_model",
                            "data.env.executor_overrides")  # fmt: skip


def critic(node: dict[str, Any]) -> Any:
    """The critic writer of ``node`` (rlpost/rewards/rubric_writer.py), built once per process."""
    from rlpost.rewards.rubric_writer import build_writer

    key = json.dumps(node, sort_keys=True, default=str)
    with _LOCK:
        if key not in _CRITICS:
            _CRITICS[key] = build_writer(node)
        return _CRITICS[key]


def success(replies: list[str], golds: list[str], doc: str, forbid: bool) -> list[float]:
    """[k] 1.0 where the reply's last number is the gold answer and (``forbid``) the document does not state it."""
    return [
        0.0 if forbid and mentions(doc, gold) else final_answer_reward(reply, gold_number(gold))
        for reply, gold in zip(replies, golds)
    ]


@ENVS.register("skill_executor")
class SkillExecutor(Environment):
    """The policy writes a skill document; a frozen executor uses it on k tasks; the reward is its success."""

    Config = SkillExecutorConfig
    cfg: SkillExecutorConfig
    METRICS: ClassVar[tuple[str, ...]] = (
        "executor_success", "first_success", "no_skill_success", "skill_gain", "doc_chars", "leaked", "critiques",
    )  # fmt: skip

    # a document cut off at the token cap is still a document: the executor reads its start, as it does past
    # max_doc_chars (without this a 135M policy that rambles to the cap scores 0 whatever its document says)
    reads_cut_turns = True

    def __init__(self, cfg: SkillExecutorConfig):
        super().__init__(cfg)
        self.tasks: list[tuple[str, str]] = []
        self.first: float | None = None  # the first document's score
        self.score, self.turn = 0.0, 0
        self.critiques = 0  # feedback messages of this episode that hold the critic's written text

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        if "tasks" not in row:
            raise ValueError(
                "a skill_executor row needs a tasks column (JSON [[question, answer], ...]): data=skill_families"
            )
        pool = [(str(q), str(a)) for q, a in json.loads(row["tasks"])]
        if len(pool) < self.cfg.tasks_per_doc:
            raise ValueError(
                f"the row has {len(pool)} tasks, fewer than data.env.tasks_per_doc={self.cfg.tasks_per_doc}"
            )
        self.tasks = random.Random(seed).sample(pool, self.cfg.tasks_per_doc)
        self.score, self.first, self.turn, self.critiques = 0.0, None, 0, 0
        return add_note(row_messages(row), SYSTEM, "system")

    def solve(self, doc: str | None) -> list[str]:
        """[k] the executor's replies to the held-in tasks, with ``doc`` as its system prompt (None: no document)."""
        model, tok = executor(self.cfg)
        system = [] if doc is None else [{"role": "system", "content": doc}]
        conversations = [[*system, {"role": "user", "content": q + TASK_SUFFIX}] for q, _ in self.tasks]
        return generate_replies(model, tok, conversations, self.cfg.executor_max_new_tokens)

    def no_skill(self) -> float:
        """The executor's success on these tasks with no document (greedy: cached per task set)."""
        key = (
            f"{self.cfg.executor_model}:{sorted(self.cfg.executor_overrides.items())}",
            tuple(q for q, _ in self.tasks),
        )
        if key not in _NO_SKILL:
            solved = success(self.solve(None), [a for _, a in self.tasks], "", False)
            _NO_SKILL[key] = sum(solved) / len(solved)
        return _NO_SKILL[key]

    def step(self, message: str) -> StepResult:
        doc = message.strip()[: self.cfg.max_doc_chars]
        golds = [a for _, a in self.tasks]
        replies = self.solve(doc)
        solved = success(replies, golds, doc, self.cfg.forbid_answer)
        score = sum(solved) / len(solved)
        reward, self.score, self.turn = score - self.score, score, self.turn + 1
        self.first = score if self.first is None else self.first
        baseline = self.no_skill() if self.cfg.no_skill_baseline else 0.0
        done = self.turn >= self.cfg.max_turns  # the runner ends the episode here: no feedback to write
        text = None if done else self.feedback(doc, replies, solved)  # the critic writes (or not) before the info
        info = {
            "executor_success": score, "first_success": self.first, "no_skill_success": baseline,
            "skill_gain": score - baseline, "doc_chars": float(len(message.strip())),
            "leaked": float(sum(self.cfg.forbid_answer and mentions(doc, g) for g in golds)),
            "critiques": float(self.critiques), "executor_replies": replies,
        }  # fmt: skip
        if text is None:
            return StepResult([], reward, True, info)
        return StepResult([{"role": "user", "content": text}], reward, False, info)

    def feedback(self, doc: str, replies: list[str], solved: list[float]) -> str:
        """The natural-language message before a revision: the count solved, then the critic's feedback."""
        n, k = int(sum(solved)), len(solved)
        text = f"The executor solved {n} of {k} tasks with your skill document."
        failed = [(q, a, r) for (q, a), r, s in zip(self.tasks, replies, solved) if not s]
        if self.cfg.critic is not None and failed:
            lines = [f"- {q} Its reply: {r.strip()!r}. Correct answer: {a}." for q, a, r in failed]
            prompt = CRITIC.format(doc=doc, failures="\n".join(lines[: self.cfg.critic_failures]))
            written = critic(self.cfg.critic).write([prompt])[0]
            if written and written.strip():
                text += f"\nCritic: {written.strip()}"
                self.critiques += 1
        return text + "\nWrite the whole skill document again, improved. Reply with the skill document only."

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        # an unknown executor model or field, or a bad critic node, fails here, before any model loads
        named_model_config(self.cfg.executor_model, self.cfg.executor_overrides, "data.env.executor_model",
                           "data.env.executor_overrides")  # fmt: skip
        if self.cfg.critic is not None:
            from rlpost.core.schema import build_config
            from rlpost.rewards.rubric_writer import WriterConfig

            build_config(WriterConfig, dict(self.cfg.critic), "data.env.critic")
        data = run.data
        if data.source != "generated" or data.task != "skill_families":
            if data.source in ("reasoning_gym", "benchmark", "human_eval", "generated"):
                raise ConfigError(
                    f"data/env=skill_executor needs rows with a tasks column (a task family's tasks), which "
                    f"data.source={data.source} (task {data.task}) lacks; use data=skill_families."
                )
        pool = int(data.task_params.get("pool", 8)) if data.task == "skill_families" else None
        if pool is not None and pool < self.cfg.tasks_per_doc:
            raise ConfigError(
                f"data.env.tasks_per_doc={self.cfg.tasks_per_doc} is more than the tasks per row, "
                f"data.task_params.pool={pool}; lower the first or raise the second."
            )

    def describe(self) -> str:
        critic_text = "with a critic's written feedback between documents" if self.cfg.critic else "score-only feedback"
        return (
            f"skill_executor: each policy turn is a skill document; a frozen {self.cfg.executor_model} solves "
            f"{self.cfg.tasks_per_doc} tasks of the row's family with it (greedy), and the reward is the fraction "
            f"solved (the last document's, as score differences; {critic_text})"
        )
