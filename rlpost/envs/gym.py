"""gym: Gymnasium text environments, unchanged: by registered id (``gymnasium.make``) or by import path.

    rlpost train data/env=gym data.env.id=my_games:Wordle-v0 reward=env     # gymnasium.register'ed in my_games
    rlpost train data/env=gym data.env.path=my_games:Wordle reward=env      # the class itself

An environment follows Gymnasium's API with text spaces (``gymnasium.spaces.Text``): ``reset(seed=...,
options=...) -> (observation, info)`` and ``step(action) -> (observation, reward, terminated, truncated,
info)``. With ``id`` (the ``gymnasium`` extra), every episode's environment is ``gymnasium.make(id, **kwargs)``
(Gymnasium's wrappers included: its passive checker, order enforcing and a registered
``max_episode_steps``' TimeLimit); ``id="module:Id"`` imports ``module`` first (Gymnasium's rule), where
the ``gymnasium.register`` call lives. With ``path`` the class is made with ``kwargs`` and ``gymnasium`` is
not needed (a duck-typed class with the same two methods works too).

Gymnasium's rules, kept: one environment per episode (the runner makes it), seeded through ``reset(seed=<the
episode's seed>)`` (the environment draws from its ``np_random``; the G episodes of a group share the seed,
so they share their start), and ``close()`` once the episode ends (the runner's ``Environment.close``);
``render`` is never called. ``terminated`` ends an episode as ``done``, ``truncated`` (without
``terminated``: a TimeLimit) as ``truncated``, and each step's info carries both flags. At config time
(``check_run``, before any model loads, also in ``rlpost show``) one instance is made, its spaces must be
``Text``, and Gymnasium's env checker (``check_env``) runs on it unless ``data.env.check=false``.

Choices where Gymnasium has no text convention: the data row is passed as ``options={"row": row}`` (an
environment that owns its task, drawn from ``np_random``, ignores it; one that reads it fails
``check_env``'s ``reset()`` without options: set ``data.env.check=false``); the first observation becomes the
user message, after the row's system message when it has one, or after ``system_prompt``; every later
observation is a user message; each step's reward is that turn's reward (the episode's reward is their
sum, as for every environment); the assistant's turn goes to ``step`` as it was decoded, not checked
against the action space's charset (a sampled turn may hold any character); a non-string observation is
shown with ``str()``.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlpost.core.errors import ConfigError, describe_error
from rlpost.envs.base import ENVS, Environment, Message, StepResult
from rlpost.envs.callable import check_kwargs, load_env_class
from rlpost.rewards.callable import put_launch_dir_on_path

MAKE_ARGUMENTS = ("max_episode_steps", "disable_env_checker")  # gymnasium.make's own, not the class's
INSTALL = "pip install 'rlpost[gymnasium]' (or pip install gymnasium)"


@dataclass(frozen=True)
class GymConfig(Environment.Config):
    """The episode limits, the Gymnasium environment (a registered id or a class) and how it starts."""

    id: str | None = None  # a registered Gymnasium id, made by gymnasium.make; "module:Id" imports module first
    path: str | None = None  # or pkg.module:Class, a Gymnasium-style environment with text observations and actions
    kwargs: dict[str, Any] = field(default_factory=dict)  # to gymnasium.make (id) or the class (path), every episode
    system_prompt: str | None = None  # a system message before the first observation (null: the row's, or none)
    check: bool = True  # Gymnasium's env checker on one instance at config time (a gymnasium.Env)


def gymnasium_module() -> Any:
    """``gymnasium``, or None when it is not installed."""
    try:
        import gymnasium
    except ImportError:
        return None
    return gymnasium


@ENVS.register("gym")
class GymEnv(Environment):
    """A Gymnasium text environment: observations are user messages, step rewards are turn rewards."""

    Config = GymConfig
    cfg: GymConfig

    def __init__(self, cfg: GymConfig):
        super().__init__(cfg)
        if bool(cfg.id) == bool(cfg.path):
            said = "both are" if cfg.id else "neither is"
            raise ConfigError(
                f"data/env=gym needs one of data.env.id (a registered Gymnasium id, e.g. my_games:Wordle-v0) and "
                f"data.env.path (a class, e.g. my_games:Wordle); {said} set."
            )
        self.source = f"data.env.id={cfg.id!r}" if cfg.id else f"data.env.path={cfg.path!r}"
        self.make: Callable[[], Any] = self._by_id(cfg.id) if cfg.id else self._by_path(cfg.path or "")
        self.inner: Any = None  # this episode's environment, made by reset

    def _by_path(self, path: str) -> Callable[[], Any]:
        cls = load_env_class(path, "my_games:Wordle")
        check_kwargs(cls, self.cfg.kwargs, path)  # before any model loads
        self.name = f"{cls.__module__}.{cls.__qualname__}"
        return lambda: cls(**self.cfg.kwargs)

    def _by_id(self, given: str) -> Callable[[], Any]:
        gym = gymnasium_module()
        if gym is None:
            raise ConfigError(f"data.env.id={given!r} needs the gymnasium package: {INSTALL}.")
        module, _, env_id = given.rpartition(":")
        if module:  # Gymnasium's "module:Id": the module registers the id when imported
            put_launch_dir_on_path()
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise ConfigError(f"data.env.id={given!r}: module {module!r} cannot be imported: {err}") from None
        if env_id not in gym.registry:
            raise ConfigError(unknown_id_message(gym, given, env_id))
        spec = gym.registry[env_id]
        creator = (
            gym.envs.registration.load_env_creator(spec.entry_point)
            if isinstance(spec.entry_point, str)
            else spec.entry_point
        )
        arguments = {k: v for k, v in {**spec.kwargs, **self.cfg.kwargs}.items() if k not in MAKE_ARGUMENTS}
        check_kwargs(creator, arguments, given, key="data.env.id")
        self.name = f"{env_id} ({spec.entry_point if isinstance(spec.entry_point, str) else creator.__qualname__})"
        self.max_episode_steps = self.cfg.kwargs.get("max_episode_steps", spec.max_episode_steps)
        return lambda: gym.make(env_id, **self.cfg.kwargs)

    def fresh(self) -> GymEnv:
        """A new episode's adapter: the resolved id or class is shared, the environment is made by ``reset``."""
        env = copy.copy(self)
        env.inner = None
        return env

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        if self.inner is None:
            self.inner = self.make()
        observation, _info = self.inner.reset(seed=seed, options={"row": row})
        prompt = row.get("prompt")
        system = [m for m in prompt if m.get("role") == "system"] if isinstance(prompt, list) else []
        if self.cfg.system_prompt is not None:
            system = [{"role": "system", "content": self.cfg.system_prompt}]
        return [*system, {"role": "user", "content": str(observation)}]

    def step(self, message: str) -> StepResult:
        observation, reward, terminated, truncated, info = self.inner.step(message)
        terminated, truncated = bool(terminated), bool(truncated)
        done = terminated or truncated
        observations = [] if done else [{"role": "user", "content": str(observation)}]
        info = {**dict(info or {}), "terminated": terminated, "truncated": truncated}
        return StepResult(
            observations, None if reward is None else float(reward), done, info, truncated=truncated and not terminated
        )

    def close(self) -> None:
        inner, self.inner = self.inner, None
        if inner is not None and callable(getattr(inner, "close", None)):
            inner.close()

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        check_instance(self)

    def describe(self) -> str:
        made = "gymnasium.make" if self.cfg.id else "the class"
        limit = getattr(self, "max_episode_steps", None)
        ends = "terminated ends an episode as done, truncated as truncated"
        if limit:
            ends += f" (TimeLimit: {limit} steps)"
        if self.cfg.check:
            ends += "; Gymnasium's env checker ran on one instance at config time"
        return (
            f"gym {self.name}: one environment per episode ({made}, kwargs {self.cfg.kwargs}), reset(seed=<episode "
            f"seed>, options={{'row': row}}) and closed after it; observations are user messages, each step's "
            f"reward is that turn's reward; {ends}"
        )


def check_instance(env: GymEnv) -> None:
    """Make one environment: a ``gymnasium.Env`` needs ``Text`` spaces and passes Gymnasium's env checker (unless
    ``data.env.check=false``); a duck-typed class was checked by its methods and arguments. ConfigError otherwise."""
    gym = gymnasium_module()
    try:
        instance = env.make()
    except Exception as err:  # noqa: BLE001 (the user's constructor: its error, as a config error)
        raise ConfigError(
            f"{env.source} could not be made with data.env.kwargs {env.cfg.kwargs}: {describe_error(err)}"
        ) from None
    try:
        if gym is None or not isinstance(getattr(instance, "unwrapped", None), gym.Env):
            return
        base = instance.unwrapped
        for name in ("action", "observation"):
            space = getattr(base, f"{name}_space", None)
            if not isinstance(space, gym.spaces.Text):
                raise ConfigError(
                    f"{env.source}: its {name}_space is {space!r}, and rlpost's episodes are text: declare "
                    f"gymnasium.spaces.Text (the policy's turns are the actions, the observations its user messages)."
                )
        if env.cfg.check:
            run_checker(gym, base, env.source)
    finally:
        close = getattr(instance, "close", None)
        if callable(close):
            close()


def run_checker(gym: Any, base: Any, source: str) -> None:
    """``gymnasium.utils.env_checker.check_env`` (render not checked): its failure is a ConfigError, its warnings are
    printed once each."""
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_env(base, skip_render_check=True)
        except Exception as err:  # noqa: BLE001 (the checker's finding, or the environment's own error)
            raise ConfigError(
                f"{source} fails Gymnasium's env checker (check_env): {_plain(describe_error(err)).rstrip('.')}. Fix the "
                "environment, or set data.env.check=false (e.g. one whose reset needs the data row, options['row'])."
            ) from None
    for line in dict.fromkeys(_plain(str(w.message)) for w in caught):
        print(f"rlpost: {source}: Gymnasium's env checker: {line}", file=sys.stderr)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()


def text_env_ids(gym: Any) -> list[str]:
    """Registered ids whose environment has Text observation and action spaces (Gymnasium's own environments,
    all numeric, are skipped; each other one is made with its registered kwargs and closed)."""
    found = []
    for env_id, spec in list(gym.registry.items()):
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium."):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                made = gym.make(env_id, disable_env_checker=True)
            try:
                base = made.unwrapped
                if isinstance(base.action_space, gym.spaces.Text) and isinstance(
                    base.observation_space, gym.spaces.Text
                ):
                    found.append(env_id)
            finally:
                made.close()
        except Exception:  # noqa: BLE001, S112 (an environment that cannot be made here is not listed)
            continue
    return sorted(found)


def unknown_id_message(gym: Any, given: str, env_id: str) -> str:
    texts = text_env_ids(gym)
    close = difflib.get_close_matches(env_id, list(gym.registry), n=1)
    module = given[: -len(env_id)]  # "module:" or ""
    hint = f" Did you mean {module + close[0]!r}?" if close else ""
    return (
        f"data.env.id={given!r} is not a registered Gymnasium environment.{hint} Registered text environments: "
        f"{', '.join(texts) or 'none'}. Register yours with gymnasium.register(id=..., entry_point=...) in a module "
        f"and name the module in the id (data.env.id=my_module:{env_id}), or give the class as data.env.path."
    )
