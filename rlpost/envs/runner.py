"""The episode loop: G episodes per row, turn by turn, batched across every episode still running.

    run_episodes(env, rows [B], seeds [B], renderer, generate, stop_ids) -> [B] EpisodeResult

Each turn, every running episode's tokens so far (prompt + completion) go to ``generate`` in one
batch (TRL's ``_generate_single_turn`` in training, a plain ``generate`` in held-out eval), each new
turn is decoded and handed to its own environment's ``step``, and the observations are appended as
template tokens (``ChatRenderer.observation_ids``). Nothing here knows about the trainer or the model.

How an episode ends (``EpisodeResult.ended``):
- ``done``: the environment said so; ``max_turns``: that many assistant turns were taken;
- ``truncated``: a turn hit the generation cap (or the token budget) without its end-of-turn token (an
  environment with ``reads_cut_turns`` still gets that turn's ``step``, then the episode ends), or the
  environment cut the episode short (``StepResult.truncated``: Gymnasium's ``truncated``, e.g. a time limit);
- ``max_total_tokens``: the next observation (plus one token to answer it) does not fit the budget;
- ``error`` / ``timeout``: ``reset`` or ``step`` raised, or ran past ``step_timeout_s``.

The episode's reward is the sum of its per-turn rewards (``StepResult.reward``; None counts 0), or
None when the environment failed: the ``env`` reward term then fails that sample and
``reward.on_failure`` decides (skip, zero, abort). A failed ``reset`` leaves an episode of one
untrained end-of-turn token, so every row still has a completion.

Every episode's environment is closed (``Environment.close``) once the loop is over, however the episode
ended; an error in ``close`` is a warning, the episode's result stands.

A hung ``step`` is stopped at ``step_timeout_s``: on the main thread by SIGALRM, which interrupts
Python code and blocking calls; elsewhere the call is abandoned in a daemon thread (Python cannot kill
a thread). An environment that runs programs must also bound them itself (a killed subprocess).
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlpost.core.errors import describe_error
from rlpost.envs.base import Environment, Message, StepResult, row_messages
from rlpost.envs.episode import Episode

ENDINGS = ("done", "max_turns", "truncated", "max_total_tokens", "error", "timeout")

# prompt ids [M] of the running episodes and their rows (indices into run_episodes' rows, [M]) -> one new turn
# each (ids, cut after the first stop id) and, when the generator keeps them (vLLM), each turn's sampling
# log-probs (else None). The rows let a generator treat episodes differently (UG-TTT: the adapter of each row).
Generate = Callable[[list[list[int]], list[int]], tuple[list[list[int]], list[list[float]] | None]]


class StepTimeout(Exception):
    """``env.step`` ran past ``step_timeout_s``."""


@dataclass
class EpisodeResult:
    """One finished episode: its tokens and mask, the transcript after the first messages, and its counts."""

    episode: Episode
    start: list[Message]  # what reset returned (the prompt)
    messages: list[Message] = field(default_factory=list)  # assistant turns and observations, in order
    turn_rewards: list[float | None] = field(default_factory=list)  # [turns] each step's reward
    tool_calls: int = 0
    tool_errors: int = 0
    timeouts: int = 0
    error: str | None = None  # the environment's exception (reset or step), or the timeout
    ended: str = "done"
    logprobs: list[float] | None = None  # [C] sampling log-probs (0.0 on observation tokens), when kept
    infos: list[dict[str, Any]] = field(default_factory=list)  # [turns answered] each step's info

    @property
    def reward(self) -> float | None:
        """The sum of the per-turn rewards (None: the environment failed)."""
        if self.error is not None:
            return None
        return float(sum(r for r in self.turn_rewards if r is not None))


class ChatRenderer:
    """Token ids of episode messages under the tokenizer's chat template (TRL's concatenation, no re-tokenizing)."""

    def __init__(self, tokenizer: Any, **template_kwargs: Any):
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs

    def _ids(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False,
            **self.template_kwargs,
        )  # fmt: skip
        return list(out["input_ids"] if isinstance(out, dict) else out)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The first messages (and the tools' schemas, for chat-template tool calls), ending with the assistant header."""
        if tools:
            return self._ids_with(messages, tools)
        return self._ids(messages, add_generation_prompt=True)

    def _ids_with(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False, **self.template_kwargs
        )
        return list(out["input_ids"] if isinstance(out, dict) else out)

    def observation_ids(self, observations: list[Message]) -> list[int]:
        """The tokens after an assistant turn's end-of-turn token: the template's rest of that turn, the
        observations and the next assistant header (a one-turn dummy conversation, rendered with and
        without them, cut at its last end-of-turn token; TRL's tool loop does the same)."""
        dummy = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        prefix = self._ids(dummy, add_generation_prompt=False)
        eos = self.tokenizer.eos_token_id
        ends = [i for i, t in enumerate(prefix) if t == eos]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        full = self._ids(dummy + observations, add_generation_prompt=True)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render an assistant turn as a prefix of the next turn")
        return full[len(prefix) :]

    def decode(self, ids: list[int]) -> str:
        """A turn's text for the environment: every token but the end-of-turn / padding ones, special tokens
        included (a chat template's tool-call markers, e.g. Qwen's ``<tool_call>``, are special tokens)."""
        ends = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        return self.tokenizer.decode([t for t in ids if t not in ends], skip_special_tokens=False)


def timed_step(env: Environment, text: str, timeout_s: float) -> StepResult:
    """``env.step(text)``, stopped after ``timeout_s`` (StepTimeout)."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):

        def expire(signum, frame):
            raise StepTimeout(f"env.step ran past {timeout_s} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return env.step(text)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: dict[str, Any] = {}

    def call():
        try:
            box["result"] = env.step(text)
        except BaseException as err:  # noqa: BLE001 (re-raised on the caller's thread)
            box["error"] = err

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise StepTimeout(f"env.step ran past {timeout_s} s (left running in a daemon thread)")
    if "error" in box:
        raise box["error"]
    return box["result"]


def run_episodes(
    env: Environment,
    rows: list[dict[str, Any]],
    seeds: list[int],
    renderer: ChatRenderer,
    generate: Generate,
    stop_ids: set[int],
) -> list[EpisodeResult]:
    """One episode per row (rows [B], each row G times in a row for a group), all turns batched; every episode's
    environment is closed at the end."""
    envs = [env.fresh() for _ in rows]
    try:
        return _run(envs, rows, seeds, renderer, generate, stop_ids)
    finally:
        for slot in envs:
            try:
                slot.close()
            except Exception as err:  # noqa: BLE001 (the episode is over: its result stands)
                warnings.warn(f"an environment's close() raised {type(err).__name__}: {err}", stacklevel=2)


def _run(
    envs: list[Environment],
    rows: list[dict[str, Any]],
    seeds: list[int],
    renderer: ChatRenderer,
    generate: Generate,
    stop_ids: set[int],
) -> list[EpisodeResult]:
    results: list[EpisodeResult] = []
    for slot, row, seed in zip(envs, rows, seeds):
        try:
            start = slot.reset(row, seed)
        except Exception as err:  # noqa: BLE001 (an environment failure follows reward.on_failure)
            start = row_messages(row)
            result = EpisodeResult(Episode(renderer.prompt_ids(start)), start, error=_describe(err), ended="error")
            result.episode.add_observation([renderer.tokenizer.eos_token_id])  # untrained: every row has a completion
            results.append(result)
            continue
        results.append(EpisodeResult(Episode(renderer.prompt_ids(start, slot.tools())), start))
    running = [i for i, r in enumerate(results) if r.error is None]
    # each slot's limits: its environment's config, read after reset (a data=mixture run's rows each play their
    # source's environment, rlpost/envs/sources.py; otherwise every slot has the same)
    limits = [slot.cfg for slot in envs]
    for turn in range(max((limits[i].max_turns for i in running), default=0)):
        if not running:
            break
        turns, turn_logprobs = generate(
            [results[i].episode.prompt_ids + results[i].episode.completion_ids for i in running], running
        )
        still = []
        for k, (i, ids) in enumerate(zip(running, turns)):
            result, episode = results[i], results[i].episode
            cfg = limits[i]
            budget = cfg.max_total_tokens - episode.total_tokens
            ids = list(ids[: max(budget, 0)])
            if turn_logprobs is not None:  # TRL's tool loop convention: 0.0 on tokens the policy did not sample
                result.logprobs = [0.0] * len(episode.completion_ids) if result.logprobs is None else result.logprobs
                result.logprobs += [0.0] * (len(episode.completion_ids) - len(result.logprobs))
                result.logprobs += list(turn_logprobs[k][: len(ids)])
            episode.add_policy_turn(ids)
            text = renderer.decode(ids)
            result.messages.append({"role": "assistant", "content": text})
            cut_off = not ids or ids[-1] not in stop_ids
            if cut_off and not envs[i].reads_cut_turns:
                result.ended = "truncated"
                cut = envs[i].truncated_reward()
                if cut is not None:  # an environment that charges for a cut-off turn (formula)
                    result.turn_rewards.append(cut)
                continue
            try:
                step = timed_step(envs[i], text, cfg.step_timeout_s)
            except StepTimeout as err:
                result.timeouts += 1
                result.error, result.ended = str(err), "timeout"
                continue
            except Exception as err:  # noqa: BLE001 (an environment failure follows reward.on_failure)
                result.error, result.ended = _describe(err), "error"
                continue
            result.turn_rewards.append(step.reward)
            result.infos.append(dict(step.info))
            result.tool_calls += int(step.info.get("tool_calls", 0))
            result.tool_errors += int(step.info.get("tool_errors", 0))
            if cut_off:  # an environment that reads a cut-off turn (its start) still ends the episode there
                result.ended = "truncated"
                continue
            if step.done:
                result.ended = "truncated" if step.truncated else "done"
                continue
            if turn == cfg.max_turns - 1:
                result.ended = "max_turns"
                continue
            observation = renderer.observation_ids(step.observations)
            if not episode.fits(len(observation) + 1, cfg.max_total_tokens):
                result.ended = "max_total_tokens"
                continue
            episode.add_observation(observation)
            result.messages += step.observations
            still.append(i)
        running = still
    return results


def _describe(err: BaseException) -> str:
    return describe_error(err)  # with the file and line when the user's environment raised


def episode_fields(results: list[EpisodeResult]) -> dict[str, list[Any]]:
    """Per-episode columns [B] the trainer hands TRL as ``extra_fields`` (TRL merges them into the rows the
    reward terms read): ``env_mask`` (TRL's name for the trained-token mask) and ``rlpost_env_*``."""
    return {
        "env_mask": [r.episode.completion_mask for r in results],
        "rlpost_env_reward": [r.reward for r in results],
        "rlpost_env_error": [r.error for r in results],
        "rlpost_env_turns": [r.episode.turns for r in results],
        "rlpost_env_tool_calls": [r.tool_calls for r in results],
        "rlpost_env_tool_errors": [r.tool_errors for r in results],
        "rlpost_env_timeouts": [r.timeouts for r in results],
        "rlpost_env_ended": [r.ended for r in results],
        "rlpost_env_spans": [[list(s) for s in r.episode.spans] for r in results],
        "rlpost_env_turn_rewards": [[0.0 if x is None else float(x) for x in r.turn_rewards] for r in results],
        "rlpost_env_messages": [r.messages for r in results],
        "rlpost_env_start": [r.start for r in results],
        "rlpost_env_infos": [r.infos for r in results],
    }


def episode_metrics(results: list[EpisodeResult], env: Environment | None = None) -> dict[str, float]:
    """Sums over the episodes (the trainer gathers them and divides by the episode count), with the
    environment's own metrics (``Environment.metric_names``) when ``env`` is given."""
    own: dict[str, float] = {}
    if env is not None:
        own = {name: 0.0 for name in env.metric_names()}
        for r in results:
            for name, value in env.episode_metrics(r.infos).items():
                own[name] += value
    return own | {
        "episodes": float(len(results)),
        "turns": float(sum(r.episode.turns for r in results)),
        "tool_calls": float(sum(r.tool_calls for r in results)),
        "tool_errors": float(sum(r.tool_errors for r in results)),
        "timeouts": float(sum(r.timeouts for r in results)),
        "failures": float(sum(r.error is not None for r in results)),
        "trained_tokens": float(sum(r.episode.trained_tokens for r in results)),
    }


def transcript(result: EpisodeResult, renderer: ChatRenderer) -> str:
    """One episode as markdown: the prompt text, then the completion with every trained token run in a
    ``[trained]`` block and every context run (observations, template tokens) in a ``[context]`` block."""
    lines = [
        "**Prompt (context, from reset):**",
        "",
        "```text",
        renderer.tokenizer.decode(result.episode.prompt_ids),
        "```",
        "",
    ]
    lines += ["**Completion:**", ""]
    ids, mask = result.episode.completion_ids, result.episode.completion_mask
    start = 0
    for end in range(1, len(ids) + 1):
        if end == len(ids) or mask[end] != mask[start]:
            label = "trained: the policy's tokens" if mask[start] else "context: not trained"
            lines += [f"[{label}]", "```text", renderer.tokenizer.decode(ids[start:end]), "```"]
            start = end
    for turn, info in enumerate(result.infos, 1):  # what the environment reported (e.g. a worker's answer)
        shown = {k: v for k, v in info.items() if k not in ("tool_calls", "tool_errors")}
        if shown:
            lines += [f"Turn {turn} info: {shown}"]
    lines += ["", f"Reward {result.reward}, turns {result.episode.turns}, ended: {result.ended}, "
              f"trained tokens {result.episode.trained_tokens} of {len(ids)}."]  # fmt: skip
    return "\n".join(lines)
