"""One run, one directory: a run directory is claimed atomically before Hydra writes into it.

Two ``rlpost train`` commands started in the same second used to resolve the default
``outputs/<date>/<time>`` to the same folder and write into it together. Now the launch claims the
folder first:

- **a fresh directory** (the user did not name one: the default pattern, a recipe's, or a pattern given
  with an interpolation such as ``hydra.run.dir='runs/${now:%Y-%m-%d}'``): the first of
  ``<dir>``, ``<dir>-1``, ``<dir>-2``, ... that this process creates (``os.mkdir`` is atomic: exactly one
  of several racing processes creates each name), passed to Hydra as ``hydra.run.dir`` (``hydra.sweep.dir``
  for a multirun);
- **a named directory** (``hydra.run.dir=...`` on the command line, or the run ``resume=`` continues):
  the directory itself, refused with the reason while another live rlpost process holds its lock.

Either way the claimant writes ``LOCK`` (its host and pid) with an exclusive create and removes it
when its launch ends (``release_all``; at exit at the latest). A lock left by a process that died (same host, pid gone) is taken over. Processes the
claimant starts for the same run (``accelerate launch`` ranks) inherit ``ENV`` and do not claim again.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
from pathlib import Path

from rlpost.core.errors import ConfigError

LOCK = ".rlpost-run.lock"
ENV = "RLPOST_CLAIMED_RUN_DIR"  # set for the claimant's children: the directory is theirs already
MAX_SUFFIX = 1000  # <dir>-1 .. <dir>-999: far more runs than start in one second


def claim_fresh(path: str | os.PathLike) -> Path:
    """The first of ``path``, ``path-1``, ``path-2``, ... that this call creates, locked for this process."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    for k in range(MAX_SUFFIX):
        candidate = base if k == 0 else base.with_name(f"{base.name}-{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        hold(candidate)
        return candidate
    raise ConfigError(
        f"{base} and {MAX_SUFFIX - 1} numbered variants all exist; name a run directory with hydra.run.dir"
    )


def claim_named(path: str | os.PathLike, key: str = "hydra.run.dir") -> Path:
    """``path`` itself (created if missing), locked for this process; ConfigError while a live run holds it."""
    folder = Path(path)
    if os.environ.get(ENV) == str(folder.resolve()):
        return folder  # a rank of the run that claimed it
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # a stale lock is removed once, then the exclusive create is tried again
        try:
            hold(folder)
            return folder
        except FileExistsError:
            owner = read_lock(folder)
            if owner == {"host": socket.gethostname(), "pid": os.getpid()}:
                return folder  # this process holds it already (an earlier launch in the same process)
            if owner is not None and alive(owner):
                raise ConfigError(
                    f"{key}={folder} is in use by another rlpost run (host {owner.get('host')}, pid "
                    f"{owner.get('pid')}): two runs never share a directory. Wait for it, or choose another "
                    f"{key}. If no such run exists, delete {folder / LOCK}."
                ) from None
            (folder / LOCK).unlink(missing_ok=True)
    raise ConfigError(f"{key}={folder}: could not take its lock {folder / LOCK}.")


def hold(folder: Path) -> None:
    """Create ``folder/LOCK`` exclusively (FileExistsError if held) and release it when this process exits."""
    fd = os.open(folder / LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "w") as handle:
        json.dump({"host": socket.gethostname(), "pid": os.getpid()}, handle)
    os.environ[ENV] = str(folder.resolve())
    _HELD.append(folder)


_HELD: list[Path] = []  # the folders this process locked, released when its launch ends (or at exit)


def release_all() -> None:
    """Remove every lock this process holds (its launch is over); a forked child's call removes nothing."""
    while _HELD:
        folder = _HELD.pop()
        if (read_lock(folder) or {}).get("pid") == os.getpid():
            (folder / LOCK).unlink(missing_ok=True)
        if os.environ.get(ENV) == str(folder.resolve()):
            del os.environ[ENV]


atexit.register(release_all)


def read_lock(folder: Path) -> dict | None:
    try:
        return json.loads((folder / LOCK).read_text())
    except (OSError, ValueError):
        return None


def alive(owner: dict) -> bool:
    """Whether the lock's owner still runs: a pid on this host that exists; another host's is assumed alive."""
    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True
    return True
