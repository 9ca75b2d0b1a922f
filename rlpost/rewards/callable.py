"""callable: any TRL reward function, named by its import path, as an rlpost reward term.

This is how an existing TRL reward plugs in unchanged::

    terms:
      - name: callable
        params: {path: "trl.rewards:think_format_reward"}
      - name: callable
        params: {path: trl.rewards.get_soft_overlong_punishment, factory: true,
                 kwargs: {max_completion_len: 32, soft_punish_cache: 8}}

``path`` is ``pkg.module:attr`` (``attr`` may be dotted, e.g. ``Class.method``) or the dotted
``pkg.module.attr``, where the longest importable prefix is the module. With ``factory: false``
``kwargs`` are passed on every call next to TRL's own; with ``factory: true`` the object at
``path`` is called once with ``kwargs`` and must return the reward function (TRL's ``get_*``
factories, or a class whose instances are rewards).

A module of your own in the directory rlpost is started in imports without ``PYTHONPATH``
(``path: "myrewards:f"`` for ``./myrewards.py``): that directory is put first on ``sys.path`` when
an import path is resolved, as ``python -m`` would (``put_launch_dir_on_path``). A module that is
really missing fails naming where Python looked (``where_looked``).

Choices: import errors surface as a ``ParamError`` on ``path`` (``build_reward_terms`` names the
full key); an ``async`` reward is run to completion inside this synchronous call (``asyncio.run``),
so it works but is not gathered concurrently with other async rewards; the wrapper is a plain
class instance holding a module-level function, so it stays picklable for TRL's rollout workers.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from torch import nn

from rlpost.rewards.base import REWARDS, ParamError, Reward


def load_object(path: str) -> Any:
    """Import ``pkg.mod:attr.sub`` or ``pkg.mod.attr`` and return the object. Raises ImportError.
    The directory rlpost was started in comes first on ``sys.path`` (``put_launch_dir_on_path``)."""
    put_launch_dir_on_path()
    if ":" in path:
        module_name, _, attrs = path.partition(":")
        module = importlib.import_module(module_name)
        parts = attrs.split(".") if attrs else []
    else:
        parts = path.split(".")
        found: ModuleType | None = None
        err: ModuleNotFoundError | None = None
        for cut in range(len(parts) - 1, 0, -1):  # longest importable prefix is the module
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError as e:
                prefix = ".".join(parts[:cut])
                if e.name is None or not (prefix == e.name or prefix.startswith(e.name + ".")):
                    raise  # the module exists but one of *its* imports is missing: report that
                err = err or e
                continue
            parts = parts[cut:]
            break
        if found is None:
            raise err or ImportError(f"{path!r} names no module")
        module = found
    obj: Any = module
    for i, attr in enumerate(parts):
        if not hasattr(obj, attr):
            where = module.__name__ + "".join("." + p for p in parts[:i])
            raise ImportError(f"{where} has no attribute {attr!r}")
        obj = getattr(obj, attr)
    return obj


def launch_dirs() -> list[str]:
    """The directory rlpost was started in, where a user's own reward module lies: Hydra's
    ``hydra.runtime.cwd`` inside a job (``hydra.job.chdir=true`` moves the current directory into
    the run directory), and the current directory."""
    dirs = []
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            dirs.append(HydraConfig.get().runtime.cwd)
    except Exception:  # noqa: BLE001 - no Hydra job (rlpost show, library use): the current directory alone
        pass
    return list(dict.fromkeys(os.path.abspath(d) for d in [*dirs, os.getcwd()] if d))


def put_launch_dir_on_path() -> None:
    """Put ``launch_dirs()`` first on ``sys.path``, as ``python -m`` puts the current directory (the
    ``rlpost`` console script does not), so ``path: myrewards:f`` finds ``./myrewards.py``. Done where
    an import path is resolved, so every process that builds the run (the launch, Hydra jobs, joblib
    and submitit workers, ``accelerate launch`` children) does it, and rlpost's own imports before it
    are never shadowed by a file of the same name in the user's directory."""
    present = {os.path.abspath(entry or os.curdir) for entry in sys.path}
    for folder in reversed(launch_dirs()):
        if folder not in present:
            sys.path.insert(0, folder)


def where_looked(err: ImportError, module: str) -> str:
    """For ``No module named X`` where X is (a parent of) ``module``: where Python looked, as one
    clause: the launch directory, other sys.path entries, the standard library, site-packages.
    For a module that was found but failed on one of its own imports, says so."""
    missing = getattr(err, "name", None) if isinstance(err, ModuleNotFoundError) else None
    if missing is None:
        return ""
    if not (module == missing or module.startswith(missing + ".")):
        return f" (raised inside {module}: it was found, one of its own imports is missing)"
    launch = launch_dirs()
    stdlib = tuple(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib"))
    others, site_dirs, has_stdlib = [], [], False
    for entry in dict.fromkeys(os.path.abspath(e or os.curdir) for e in sys.path):
        if entry in launch:
            continue
        if os.path.basename(entry) in ("site-packages", "dist-packages"):
            site_dirs.append(entry)
        elif entry.startswith(stdlib) or entry.endswith(".zip"):
            has_stdlib = True
        else:
            others.append(entry)
    places = [f"the current directory {launch[0]}", *launch[1:], *others]
    places += ["the standard library"] * has_stdlib + [f"site-packages {d}" for d in site_dirs]
    return f" (looked in {', '.join(places)}; put the module there or add its folder to PYTHONPATH)"


def module_of(path: str) -> str:
    """The module part of an import path: ``pkg.mod`` of ``pkg.mod:f``, the whole dotted path otherwise."""
    return path.partition(":")[0]


@REWARDS.register("callable")
class CallableReward(Reward):
    """Any TRL-signature reward function, loaded by import path (``pkg.mod:func``)."""

    @dataclass(frozen=True)
    class Config:
        path: str  # import path of the function: pkg.module:func or pkg.module.func
        kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments (see factory)
        factory: bool = False  # call path(**kwargs) once to get the reward function

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        try:
            obj = load_object(cfg.path)
        except ImportError as err:
            raise ParamError(
                "path", f"cannot import {cfg.path!r}: {err}{where_looked(err, module_of(cfg.path))}"
            ) from None
        if cfg.factory:
            try:
                obj = obj(**cfg.kwargs)
            except TypeError as err:
                raise ParamError("kwargs", f"calling the factory {cfg.path!r} failed: {err}") from None
        if isinstance(obj, nn.Module):
            raise ParamError("path", f"{cfg.path!r} is a model; callable wraps reward functions")
        if not callable(obj):
            raise ParamError("path", f"{cfg.path!r} is a {type(obj).__name__}, not a callable reward function")
        if inspect.isclass(obj):
            raise ParamError("path", f"{cfg.path!r} is a class: set factory: true to instantiate it with kwargs")
        self.func = obj

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """TRL's call, forwarded: ``completions [N]`` -> rewards ``[N]``."""
        extra = {} if self.cfg.factory else self.cfg.kwargs
        out = self.func(prompts=prompts, completions=completions, **{**kwargs, **extra})
        if inspect.isawaitable(out):
            out = asyncio.run(_await(out))
        return list(out)


async def _await(awaitable: Any) -> Any:
    return await awaitable
