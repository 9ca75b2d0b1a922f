"""experience_buffer: a prompter policy for a frozen worker trained with a contrastive experience buffer of
rewards paired with textual critiques (seed 004 #21), on the frozen-worker environment (rlpost/envs/frozen_worker.py).

"A lightweight prompter model is optimized to maximize task-specific rewards for a larger, frozen worker LLM. By
utilizing a contrastive experience buffer that couples scalar rewards with dense textual critiques, our approach
effectively amortizes iterative prompt refinement into single-shot policy weights." Here the policy is the
prompter (each completion is an instruction the frozen worker carries out, reward = the worker's correctness), and:

1. buffer: per key (``key_column``: one buffer for the whole task family by default, or one per value of a data
   column, e.g. ``question`` for per-task buffers) a FIFO list of at most ``buffer_size`` entries
   e = (task, instruction, worker answer, reward r, critique, step); the oldest entry is evicted first;
2. critique: after each training batch is scored (``adjust_rewards``), each group adds its best and its worst
   rollout (argmax of the combined reward, then argmin over the others; first on ties, so a group of equal rewards
   adds its first two; one entry when only one reward is not NaN), and a frozen critic
   (``critic``: rlpost/rewards/rubric_writer.py, SmolLM2 by default, greedy) writes a critique of each from the
   task, the instruction, the worker's answer and the reward (``critic_instruction``);
3. contrast: a group whose buffer holds at least ``min_entries`` entries shows its last ``conditioned_per_group``
   = k rollouts the ``show_best`` highest-reward entries and the ``show_worst`` lowest-reward others (ties:
   the most recent first), each with task, instruction, reward and critique (``contrastive_note``), appended
   to the task's user message; the first G - k rollouts see the plain prompt;
4. amortize: a buffer-conditioned rollout is trained under the plain prompt's ids (as conditioned.py does) and
   joins the GRPO group with its own reward, so what the experience made possible moves into single-shot
   weights: evaluation (TRL's sampling, no strategy) never sees the buffer.

Choices where the abstract is silent: critiques are written only for the entries that enter the buffer (2 per
group, not every rollout: a CPU critic costs one generation per critique); the critic does not see the gold
answer (only the reward), so a critique cannot hand the answer on; the buffer is shared across tasks by default
(reasoning-gym rarely repeats a question within a short run, so per-task buffers would stay empty); a
conditioned rollout's tokens were sampled under the buffer prompt, so the update is off-policy for them with no
extra correction (their sampling log-probs are dropped, as in conditioned.py); on the frozen-worker environment
the worker always reads the plain task (the row's ``question``), never the buffer; with more turns an entry is
the last instruction and the worker's answer to it (the episode's reward is that instruction's score).
The buffer is checkpointed (``state_dict``). Logged: ``experience_buffer/buffer_size`` (entries over all keys),
``.../conditioned_reward_mean`` and ``.../plain_reward_mean`` (this batch's rollouts with and without the buffer),
``.../critique_chars_mean``, ``.../best_reward_shown`` and ``.../worst_reward_shown``, ``.../conditioned``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.envs.frozen_worker import task_text
from rlpost.rewards.rubric_writer import build_writer
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy
from rlpost.rollouts.conditioned import revise_prompt
from rlpost.rollouts.feedback_refine import first_paragraph

KIND = "experience"
CRITIC = (
    "A prompter wrote an instruction for a worker model that then answered a task. Say in one or two sentences "
    "why the instruction worked or failed, and how a better instruction would help. Do not solve the task.\n\n"
    "Task: {task}\n\nInstruction: {instruction}\n\nWorker's answer: {answer}\n\nReward: {reward} (1 = correct, 0 = wrong)"
)
HEADER = "Earlier instructions for tasks like this one, with the worker's reward and a critique:"
FOOTER = "Write an instruction that does better than all of them."


@dataclass
class Entry:
    """One past rollout: its task, instruction, the worker's answer, reward, critique and training step."""

    task: str
    instruction: str
    answer: str
    reward: float
    critique: str = ""
    step: int = 0


class Buffer:
    """Per key a FIFO list of at most ``size`` entries; ``select`` picks the contrastive pair."""

    def __init__(self, size: int):
        self.size = size
        self.entries: dict[str, list[Entry]] = {}  # key -> its entries, oldest first

    def add(self, key: str, entry: Entry) -> None:
        kept = self.entries.setdefault(key, [])
        kept.append(entry)
        del kept[: max(len(kept) - self.size, 0)]  # evict the oldest

    def __len__(self) -> int:
        return sum(map(len, self.entries.values()))

    def select(self, key: str, best: int, worst: int) -> tuple[list[Entry], list[Entry]]:
        """The ``best`` highest-reward entries and the ``worst`` lowest-reward others (ties: most recent first)."""
        kept = list(enumerate(self.entries.get(key, [])))  # (age order, entry)
        top = sorted(kept, key=lambda p: (-p[1].reward, -p[0]))[:best]
        rest = [p for p in kept if p not in top]
        bottom = sorted(rest, key=lambda p: (p[1].reward, -p[0]))[:worst]
        return [e for _, e in top], [e for _, e in bottom]


def contrastive_note(best: list[Entry], worst: list[Entry], chars: int) -> str:
    """The buffer as text: header, one paragraph per shown entry (best first), the closing request."""
    lines = [HEADER]
    for label, entries in (("Better", best), ("Worse", worst)):
        for e in entries:
            lines.append(
                f"{label} (reward {e.reward:.2f}) for the task {e.task[:chars]!r}: {e.instruction[:chars]!r}\n"
                f"Critique: {e.critique[:chars] or '(none)'}"
            )
    return "\n\n".join([*lines, FOOTER])


def turn_texts(completion: Any) -> tuple[str, str]:
    """A completion -> (its last instruction, the worker's answer after it): an episode's messages, or a
    single completion (no answer)."""
    if not isinstance(completion, list):
        return completion_text(completion), ""
    last = max((i for i, m in enumerate(completion) if m.get("role") == "assistant"), default=None)
    if last is None:
        return "", ""
    after = completion[last + 1]["content"] if last + 1 < len(completion) else ""
    return str(completion[last]["content"]), str(after).removeprefix("Worker: ")


def extremes(rewards: torch.Tensor) -> list[int]:
    """rewards [G] of one group -> the indices of its best and worst rollout (first on ties; NaN left out)."""
    ok = [i for i, r in enumerate(rewards.tolist()) if not math.isnan(r)]
    if not ok:
        return []
    best = max(ok, key=lambda i: (rewards[i].item(), -i))
    rest = [i for i in ok if i != best]
    return [best, min(rest, key=lambda i: (rewards[i].item(), i))] if rest else [best]


@ROLLOUTS.register("experience_buffer")
class ExperienceBuffer(RolloutStrategy):
    """Prompter policies (seed 004 #21): k rollouts per group see the contrastive buffer, trained under x."""

    stateful = True  # the buffer travels with checkpoints (rlpost/runs/state.py)
    episodes = True  # it generates whole groups through the environment loop (frozen_worker)

    @dataclass(frozen=True)
    class Config:
        conditioned_per_group: Annotated[int, Range(ge=1)] = 2  # k: rollouts per group that see the buffer (< G)
        buffer_size: Annotated[int, Range(ge=1)] = 16  # entries kept per key (the oldest is evicted)
        key_column: str | None = None  # null: one buffer for the task family; a data column: one per value
        show_best: Annotated[int, Range(ge=0)] = 1  # highest-reward entries shown
        show_worst: Annotated[int, Range(ge=0)] = 1  # lowest-reward entries shown
        min_entries: Annotated[int, Range(ge=1)] = 2  # a buffer with fewer entries is not shown
        # the frozen critic (rlpost/rewards/rubric_writer.py WriterConfig): backend, model, max_new_tokens, ...
        critic: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "max_new_tokens": 48})
        critic_instruction: str = CRITIC  # the critic's prompt; {task} {instruction} {answer} {reward}
        max_critique_chars: Annotated[int, Range(ge=1)] = 300  # a critique is cut to this (and its first paragraph)
        max_shown_chars: Annotated[int, Range(ge=1)] = 300  # a shown task / instruction / critique is cut to this

        def __post_init__(self):
            missing = [k for k in ("{task}", "{instruction}", "{reward}") if k not in self.critic_instruction]
            if missing:
                raise ValueError(f"critic_instruction must contain {' and '.join(missing)}")
            if self.show_best + self.show_worst < 1:
                raise ValueError("show_best + show_worst must be >= 1")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.critic = build_writer(cfg.critic)
        self.buffer = Buffer(cfg.buffer_size)
        self.step = 0  # training batches seen (the entries' step)
        self.shown: list[tuple[list[Entry], list[Entry]]] = []  # this batch's shown entries (logs and tests)

    def check_run(self, run: Any) -> None:
        g, env = run.settings.train.num_generations, run.env
        if self.cfg.conditioned_per_group >= g:
            raise ConfigError(
                f"algorithm.rollout.conditioned_per_group={self.cfg.conditioned_per_group} must be smaller than "
                f"train.num_generations={g}: each group needs plain rollouts (their prompt ids train the others)."
            )
        if env is not None and type(env).registry_name != "frozen_worker":
            raise ConfigError(
                f"algorithm/rollout=experience_buffer runs on data/env=frozen_worker or without an environment, "
                f"not data/env={type(env).registry_name}: its episodes read the task from the prompt, which the "
                "buffer extends."
            )
        if self.critic.cfg.backend == "local":
            from rlpost.models.loading import check_weights_available

            check_weights_available(self.critic.cfg.model, "algorithm.rollout.critic.model")

    def key(self, row: dict[str, Any]) -> str:
        return "" if self.cfg.key_column is None else str(row.get(self.cfg.key_column, ""))

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        k = self.cfg.conditioned_per_group
        shown_prompts, shown_rows, conditioned, self.shown = list(prompts), list(ctx.rows), [], []
        for group in ctx.groups(len(prompts)):
            row = ctx.rows[group[0]]
            if len(self.buffer.entries.get(self.key(row), [])) < self.cfg.min_entries:
                continue
            best, worst = self.buffer.select(self.key(row), self.cfg.show_best, self.cfg.show_worst)
            self.shown.append((best, worst))
            note = contrastive_note(best, worst, self.cfg.max_shown_chars)
            for i in list(group)[len(group) - k :]:
                shown_prompts[i] = revise_prompt(prompts[i], None, note)
                # the environment's episode opens with the extended prompt; the worker still reads the plain task
                shown_rows[i] = {**row, "prompt": revise_prompt(row["prompt"], None, note), "question": task_text(row)}
                conditioned.append((i, group[0]))
        out = ctx.generate(shown_prompts, rows=shown_rows)  # the episode loop resets from shown_rows
        for i, plain in conditioned:  # trained under the plain prompt: the experience is amortized into weights
            out.prompt_ids[i] = list(out.prompt_ids[plain])
            if "rlpost_env_start" in out.extra_fields:
                out.extra_fields["rlpost_env_start"][i] = out.extra_fields["rlpost_env_start"][plain]
            if out.logprobs is not None:  # sampled under the buffer prompt, not x: no IS correction against x
                out.logprobs[i] = [None] * len(out.completion_ids[i])
            out.kinds[i] = KIND
        ctx.log("experience_buffer/conditioned", len(conditioned))
        if self.shown:
            ctx.log("experience_buffer/best_reward_shown", _mean([e.reward for b, _ in self.shown for e in b]))
            ctx.log("experience_buffer/worst_reward_shown", _mean([e.reward for _, w in self.shown for e in w]))
        return out

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Rewards unchanged; each group's best and worst rollout enter the buffer with a critique."""
        new: list[tuple[str, Entry]] = []
        for start in range(0, len(rows), group_size):
            for j in extremes(rewards[start : start + group_size].float().cpu()):
                i = start + j
                instruction, answer = turn_texts(completions[i])
                task = task_text(rows[i])
                new.append((self.key(rows[i]), Entry(task, instruction, answer, float(rewards[i]), "", self.step)))
        asks = [
            self.cfg.critic_instruction.format(task=e.task, instruction=e.instruction, answer=e.answer or "(none)",
                                               reward=f"{e.reward:.2f}")
            for _, e in new
        ]  # fmt: skip
        written = self.critic.write(asks) if asks else []
        for (key, entry), text in zip(new, written):
            entry.critique = first_paragraph(text, self.cfg.max_critique_chars) if text else ""
            self.buffer.add(key, entry)
        self.step += 1
        r = rewards.float().cpu()
        metrics = {
            "experience_buffer/buffer_size": float(len(self.buffer)),
            "experience_buffer/critique_chars_mean": _mean([len(e.critique) for _, e in new]),
        }
        for name, want in (("conditioned", True), ("plain", False)):
            values = [r[i].item() for i, kind in enumerate(kinds) if (kind == KIND) == want]
            if values:
                metrics[f"experience_buffer/{name}_reward_mean"] = _mean(values)
        return rewards, metrics

    def state_dict(self) -> dict[str, Any]:
        entries = {key: [asdict(e) for e in kept] for key, kept in self.buffer.entries.items()}
        return {"entries": entries, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.entries = {key: [Entry(**e) for e in kept] for key, kept in state["entries"].items()}
        self.step = int(state["step"])

    def describe(self) -> str:
        return (
            f"experience_buffer (prompter, seed 004 #21): {self.cfg.conditioned_per_group} rollouts per group see the "
            f"best {self.cfg.show_best} and worst {self.cfg.show_worst} past instructions with rewards and critiques "
            "(a frozen critic), trained under the plain prompt"
        )


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")
