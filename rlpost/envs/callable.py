"""callable: a user's environment class, named by its import path, the way ``reward=callable`` loads a reward.

    rlpost train data/env=callable data.env.path=my_envs:GuessNumber reward=env

The class at ``path`` is constructed once per episode with ``kwargs`` (an ``Environment`` subclass: from
its own ``Config`` built from ``kwargs``) and must have
``reset(row, seed) -> list of messages`` and ``step(text) -> StepResult``, and may have ``close()`` (called when
its episode ends) (subclass
``rlpost.envs.base.Environment`` and its ``StepResult``, or return a ``(observations, reward, done,
info)`` tuple or a dict with those keys); a class attribute ``reads_cut_turns = True`` asks for the ``step``
of a turn cut off at the token cap too (``Environment.reads_cut_turns``). A module in the directory rlpost
is started in imports
without ``PYTHONPATH``, as for rewards. The episode limits (``max_turns``, ...) are this config's.
Import errors and a class without ``reset``/``step`` are config errors, raised before any model loads.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.envs.base import ENVS, Environment, Message, StepResult
from rlpost.rewards.callable import load_object


def _is_env(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, Environment)


@dataclass(frozen=True)
class CallableConfig(Environment.Config):
    """The episode limits, the class's import path and its constructor arguments."""

    path: str = ""  # pkg.module:Class (or pkg.module.Class)
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the class for every episode


def as_step_result(out: Any, where: str) -> StepResult:
    """A StepResult, a (observations, reward, done, info) tuple or a dict with those keys -> StepResult."""
    if isinstance(out, StepResult):
        return out
    if isinstance(out, tuple) and len(out) in (3, 4):
        return StepResult(list(out[0]), out[1], bool(out[2]), dict(out[3]) if len(out) == 4 else {})
    if isinstance(out, dict) and "done" in out:
        return StepResult(list(out.get("observations", [])), out.get("reward"), bool(out["done"]), out.get("info", {}))
    raise TypeError(
        f"{where}.step returned {type(out).__name__}; return a StepResult or (observations, reward, done, info)"
    )


def load_env_class(path: str, example: str) -> Any:
    """The class at ``data.env.path`` (it must have ``reset`` and ``step``), or a ConfigError that says why."""
    if not path:
        raise ConfigError(f"data.env.path is empty: name your environment class, e.g. data.env.path={example}")
    try:
        cls = load_object(path)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"data.env.path={path!r} cannot be imported: {err}") from None
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"data.env.path={path!r} has no {' or '.join(missing)} method")
    return cls


def check_kwargs(cls: Any, kwargs: dict[str, Any], path: str, key: str = "data.env.path") -> None:
    """ConfigError (before any model loads) when the class's constructor does not accept ``kwargs`` (``key``: the
    setting that named the class)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a class whose signature Python cannot read: checked when it is made
        return
    try:
        signature.bind(**kwargs)
    except TypeError as err:
        params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        accepted = ", ".join(p.name for p in params) or "no arguments"
        raise ConfigError(
            f"data.env.kwargs {sorted(kwargs)} do not fit {key}={path!r}: {err}. It accepts: {accepted}."
        ) from None


@ENVS.register("callable")
class CallableEnv(Environment):
    """A user's environment class by import path (reset(row, seed) -> messages, step(text) -> StepResult)."""

    Config = CallableConfig
    cfg: CallableConfig

    def __init__(self, cfg: CallableConfig):
        super().__init__(cfg)
        cls = load_env_class(cfg.path, "my_envs:MyEnv")
        self.cls = cls
        # an Environment subclass is made from its own Config (kwargs checked now), any other class from kwargs
        self.own_cfg = build_config(cls.Config, cfg.kwargs, "data.env.kwargs") if _is_env(cls) else None
        if self.own_cfg is None:
            check_kwargs(cls, cfg.kwargs, cfg.path)
        self.reads_cut_turns = bool(getattr(cls, "reads_cut_turns", False))  # the class's own choice, as a subclass's
        self.inner: Any = None  # the user's object, made by reset (one per episode: the runner calls fresh())

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        if self.inner is None:
            self.inner = self.cls(self.own_cfg) if self.own_cfg is not None else self.cls(**self.cfg.kwargs)
        return list(self.inner.reset(row, seed))

    def step(self, message: str) -> StepResult:
        return as_step_result(self.inner.step(message), self.cfg.path)

    def close(self) -> None:  # the user's object's own close(), when it has one
        inner, self.inner = self.inner, None
        if inner is not None and callable(getattr(inner, "close", None)):
            inner.close()

    def describe(self) -> str:
        doc = (getattr(self.cls, "__doc__", None) or "").strip().splitlines()
        return f"{self.cfg.path}: {doc[0]}" if doc else self.cfg.path
