"""The environment contract, its base class and registry (issue 18): an environment owns one episode.

    messages = env.reset(row, seed)               # the first messages (system / user), from a data row
    while not done:
        assistant = policy(messages)              # one assistant turn, sampled by the trainer
        result = env.step(assistant)              # observations, an optional per-turn reward, done, info
        messages += [assistant, *result.observations]

A group is G episodes from the same row. Only the assistant's tokens are trained (episode.py builds the
mask, runner.py drives the loop); observations and the environment's messages are context. The episode
ends when ``step`` says ``done``, after ``max_turns`` assistant turns, or when the episode's tokens would
pass ``max_total_tokens`` (the runner counts them; the environment never sees token ids).

Where it sits: ``data/env=<name>`` beside ``data/transform``, not a sixth top-level group. An
environment is a property of the task: it starts from a data row and defines what an episode of that
row is, and the same data with another environment is another task. The episode's reward reaches the
run through the reward group (``reward=env``: a term that reads what the environment returned), so
``reward.combine``, whitening and ``reward.on_failure`` apply as for any term; the algorithm group stays
about the update (advantages default to trajectory-level GRPO over the G episodes of a row).

Choices where the issue is silent: messages are TRL's conversational dicts (``{"role", "content"}``);
observations come back as ``role="tool"`` for a tool's output and ``role="user"`` for a simulated user;
the runner makes a fresh environment (``type(env)(env.cfg)``) for every episode, so nothing leaks
between episodes, and calls its ``close()`` when the episode ends; its randomness comes from the ``seed`` given to ``reset``, derived from the run seed,
the step and the group (the G episodes of a row share it, so they share their start), so a resumed run
replays the same episodes: the environment's random state is a function of (seed, step, group), which is
what a checkpoint would have to restore.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry
from rlpost.core.schema import Range, build_config, check_paths, to_container

Message = dict[str, str]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}


@dataclass
class StepResult:
    """What ``Environment.step`` returns for one assistant message."""

    observations: list[Message] = field(default_factory=list)  # appended after the assistant's turn
    reward: float | None = None  # a per-turn reward, or None (nothing this turn)
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # counted keys: tool_calls, tool_errors
    # done because the episode was cut short, not finished (Gymnasium's truncated, e.g. a time limit): the runner
    # ends it as truncated instead of done
    truncated: bool = False


class Environment(Component):
    """Base of every environment: ``reset`` starts an episode from a data row, ``step`` answers a turn.

    Optional members (``check_run``, ``describe``, ...): ``Component``. ``runs_code`` is True for an
    environment that executes model-written programs (it then needs a jail, or an explicit opt-in).
    """

    @dataclass(frozen=True)
    class Config:
        """The episode limits every environment has (a subclass's Config extends this one)."""

        max_turns: Annotated[int, Range(ge=1)] = 4  # assistant turns per episode
        max_total_tokens: Annotated[int, Range(ge=2)] = 1024  # prompt + every turn + observations
        step_timeout_s: Annotated[float, Range(gt=0)] = 10.0  # one env.step (a tool call, a user reply)

    runs_code: bool = False
    # True while held-out episodes run (``held_out_episodes``): an environment may play them differently (the
    # simulated user: the scripted traveller that stands in for real users); fresh() copies it
    evaluating: bool = False
    # numeric keys of an episode's last step info, logged per episode as env/<key> and eval/env/<key> (the default
    # metric_names / episode_metrics; an environment may override those instead)
    METRICS: ClassVar[tuple[str, ...]] = ()
    # its episode reward checks the outcome against the row's gold (a final answer, a booking, tests):
    # the env reward term is then eval/accuracy's default criterion (rlpost/scoring/correctness.py)
    verifiable: ClassVar[bool] = False
    # a turn cut off at the generation cap still goes to step (its start is what counts, e.g. a controller's pick),
    # and the episode ends after it; otherwise step never sees it and truncated_reward applies
    reads_cut_turns: bool = False

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        """The episode's first messages for data row ``row`` (its ``prompt`` column and the rest)."""
        raise NotImplementedError

    def step(self, message: str) -> StepResult:
        """React to one assistant message (its text); the episode ends when ``done`` is true."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what this episode's environment holds (the runner calls it once the episode ends, however it
        ends; Gymnasium's ``close``); nothing by default."""

    def truncated_reward(self) -> float | None:
        """The reward of a turn cut off at the generation cap (no end-of-turn token, so ``step`` never saw it);
        None: nothing (the episode's reward is what earlier turns earned). An environment whose failures
        cost something overrides it, so that rambling past the cap never beats a wrong answer."""
        return None

    def check_run(self, run: Any) -> None:
        """Refuse what episodes cannot be combined with, saying why (a subclass extends it with super())."""
        where, algo = f"data/env={self.registry_name}", run.algorithm
        if "env" not in [type(func).registry_name for func in run.reward.funcs]:
            raise ConfigError(
                f"{where} returns each episode's reward through the reward term env, which reward.terms lacks "
                f"({', '.join(run.reward.names)}); use reward=env, or add a term with name env."
            )
        refusals = {
            "algorithm/rollout": (
                type(algo.rollout).registry_name != "none" and not type(algo.rollout).episodes,
                "a rollout strategy builds single completions around TRL's generation, while an episode is "
                "generated turn by turn by the environment loop (hindsight_critique runs its retries as episodes)",
            ),
            "algorithm/correction": (
                algo.correction.cfg.rollout_precision is not None or algo.correction.peer is not None,
                "its rollout copy or peer model samples whole completions, not the turns of an episode",
            ),
            "algorithm.critic (PPO)": (
                algo.critic is not None,
                "GAE runs over consecutive completion tokens, and an episode interleaves untrained observation "
                "tokens, so returns would flow through text the policy never wrote",
            ),
            "algorithm.replay (REGEN)": (algo.offline is not None, "replayed rollouts carry no episodes"),
            "algorithm.overlong.soft_penalty": (
                algo.overlong.soft_penalty,
                "it reads the completion length against train.max_completion_length, which caps one turn, "
                "not an episode (use data.env.max_total_tokens)",
            ),
        }
        for key, (refused, why) in refusals.items():
            if refused:
                raise ConfigError(f"{where} cannot be combined with {key}: {why}.")

    def episode_lines(self, max_new_tokens: int, on_failure: str) -> list[str]:
        """``rlpost show``'s explanation of one episode: turns, who speaks, what is trained, when rewards arrive."""
        cfg = self.cfg
        return [
            f"  environment   {self.describe()}",
            f"  turns         at most {cfg.max_turns} assistant turns of at most {max_new_tokens} new tokens each; "
            f"prompt + turns + observations at most {cfg.max_total_tokens} tokens",
            "  who speaks    the environment opens (reset: the row's prompt, its system message), then the policy "
            "and the environment alternate: one assistant turn, then the environment's observations (tool or user messages)",
            "  trained       only the tokens the policy generated; observations and the chat template's tokens around "
            "them are context (mask 0), and the loss and its aggregation count only trained tokens",
            "  rewards       each step may return a reward; the episode's reward is their sum, read by the reward "
            "term env when the episode ends",
            "  advantage     trajectory-level: each trained token of an episode carries its episode's advantage over "
            "the G episodes of its row, which share their start",
            f"  ends          done, max_turns, a turn without its end-of-turn token, or an observation past the "
            f"token budget; a step past {cfg.step_timeout_s:g} s or an exception fails the episode "
            f"(reward.on_failure={on_failure})",
        ]

    def metric_names(self) -> list[str]:
        """The environment's own per-episode metrics, logged as ``env/<name>`` (the same names on every process);
        default: ``METRICS``."""
        return list(self.METRICS)

    def episode_metrics(self, infos: list[dict[str, Any]]) -> dict[str, float]:
        """One episode's values of ``metric_names`` from its steps' infos (a missing name counts 0); default: the
        ``METRICS`` keys of the last step's info."""
        last = infos[-1] if infos else {}
        return {name: float(last.get(name, 0.0)) for name in self.METRICS}

    def tools(self) -> list[dict[str, Any]]:
        """JSON schemas of the tools the chat template renders into the prompt (``tools=``); none by default."""
        return []

    def fresh(self) -> Environment:
        """A new environment of this kind and config: one per episode."""
        env = type(self)(self.cfg)
        env.evaluating = self.evaluating
        return env

    @property
    def active(self) -> bool:
        """False only for ``none`` (single-turn completions, no episode loop)."""
        return True


@dataclass(frozen=True)
class ToolConfig(Environment.Config):
    """The episode limits and how the policy calls the environment's tool (rlpost/envs/tags.py)."""

    tag: str = "tool"  # the tool's name: <tag>argument</tag>, or the function name in chat-template calls
    tool_format: Literal["tags", "chat_template"] = "tags"  # the tag protocol, or the model's own tool calls


class ToolEnvironment(Environment):
    """An environment with one tool of one string argument, called in either format (``tool_format``).

    Subclasses set ``ARGUMENT`` (the argument's name in chat-template calls), ``TOOL`` and ``ARGUMENT_DOC``
    (their descriptions), and ``SYSTEM`` (the tag protocol's instructions, written for the tag ``TAG_IN_SYSTEM``),
    and implement ``use_tool`` and ``final_reward``; ``step`` is the same loop for all of them.
    """

    Config = ToolConfig
    cfg: ToolConfig
    ARGUMENT = "input"
    TOOL = ""
    ARGUMENT_DOC = ""
    SYSTEM = ""
    TAG_IN_SYSTEM = "tool"

    def tools(self) -> list[dict[str, Any]]:
        from rlpost.envs.tags import tool_schema

        if self.cfg.tool_format != "chat_template":
            return []
        return [tool_schema(self.cfg.tag, self.TOOL, self.ARGUMENT, self.ARGUMENT_DOC)]

    def instructions(self) -> str:
        """The system note: the tag protocol spelled out, or (chat-template calls) when to stop calling."""
        if self.cfg.tool_format == "chat_template":
            return (
                f"Call the {self.cfg.tag} tool when it helps. When you know the answer, reply with it and call no tool."
            )
        return self.SYSTEM.replace(f"{self.TAG_IN_SYSTEM}>", f"{self.cfg.tag}>")

    def use_tool(self, argument: str) -> tuple[bool, str]:
        """One well-formed call -> (valid, the observation's text: a ``<result>`` or an ``<error>``)."""
        raise NotImplementedError

    def final_reward(self, message: str) -> float:
        """The reward of the final answer (a turn without a call)."""
        raise NotImplementedError

    def step(self, message: str) -> StepResult:
        """A turn without a call is the final answer (episode done); otherwise every call, in order, gets one
        ``role="tool"`` observation, a malformed call an ``<error>`` one."""
        from rlpost.envs.tags import error_tag

        calls = self.calls(message)
        if not calls:
            return StepResult(reward=self.final_reward(message), done=True, info={"tool_calls": 0, "tool_errors": 0})
        observations, errors = [], 0
        for call in calls:
            valid, text = (False, error_tag(call.error)) if call.error else self.use_tool(call.argument)
            errors += not valid
            observations.append({"role": "tool", "content": text})
        return StepResult(observations, info={"tool_calls": len(calls), "tool_errors": errors})

    def calls(self, message: str) -> list[Any]:
        """The tool calls of one assistant message (``rlpost.envs.tags.ToolCall``), malformed ones included."""
        from rlpost.envs.tags import tool_calls

        return tool_calls(message, self.cfg.tool_format, self.cfg.tag, self.ARGUMENT)

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        if self.cfg.tool_format == "chat_template":
            from rlpost.envs.tags import template_has_tools
            from rlpost.models.loading import load_tokenizer

            if not template_has_tools(load_tokenizer(run.model)):
                raise ConfigError(
                    f"data.env.tool_format=chat_template needs a chat template with tool calls, and "
                    f"{run.model.display_name}'s has none; use data.env.tool_format=tags (the tag protocol)."
                )


@contextmanager
def held_out_episodes(env: Environment | None) -> Iterator[None]:
    """Inside the block ``env`` (and every fresh() copy) plays held-out episodes (``evaluating``)."""
    before = env.evaluating if env is not None else False
    if env is not None:
        env.evaluating = True
    try:
        yield
    finally:
        if env is not None:
            env.evaluating = before


def row_messages(row: dict[str, Any]) -> list[Message]:
    """A data row's prompt as chat messages (a string prompt becomes one user message)."""
    prompt = row.get("prompt", "")
    return [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


ENVS: Registry[Environment] = Registry("environment", Environment)


def build_env(node: Mapping[str, Any] | None, where: str = "data.env") -> Environment:
    """``{name: <registered environment>, ...its Config}`` -> the environment (ConfigError naming ``where``).

    The caller has imported ``rlpost.components`` (which registers every environment), as for transforms."""
    node = dict(to_container(node) or {"name": "none"})
    name = node.pop("name", "none")
    try:
        cls = ENVS.get(name)
    except ConfigError as err:
        raise ConfigError(f"{where}.name: {err}") from None
    try:
        cfg = build_config(cls.Config, node, where)
    except ConfigError as err:
        raise ConfigError(f"{err} ({where}.name={name})") from None
    check_paths(cfg, where)
    return cls(cfg)
