"""Stateful components (running statistics, subspaces) saved with every checkpoint and restored on resume.

A component is stateful when its ``stateful`` flag is set (``rlpost.core.component.Component``: exactly
the components that override ``state_dict() -> dict`` and ``load_state_dict(dict)``); values may be
tensors, numbers, strings or lists. All states go into one file per checkpoint,
``rlpost_state.pt`` (torch.save of plain containers; loaded with ``weights_only=True``), written to a
temporary name and renamed so a partial file is never read.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rlpost.core.component import Component

STATE_FILE = "rlpost_state.pt"


@contextmanager
def state_restored(component: Component | None) -> Iterator[None]:
    """Whatever happens inside the block, a stateful ``component`` leaves it with the state it entered with
    (held-out evaluation must not move a training statistic or a training database)."""
    state = copy.deepcopy(component.state_dict()) if component is not None and component.stateful else None
    try:
        yield
    finally:
        if state is not None and component is not None:
            component.load_state_dict(state)


def stateful(named: Iterable[tuple[str, Component]]) -> dict[str, Component]:
    return {name: c for name, c in named if c.stateful}


def save_component_state(named: Iterable[tuple[str, Component]], folder: str | os.PathLike) -> Path | None:
    components = stateful(named)
    if not components:
        return None
    path = Path(folder) / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.tmp")
    torch.save({name: c.state_dict() for name, c in components.items()}, tmp)
    os.replace(tmp, path)
    return path


def load_component_state(named: Iterable[tuple[str, Component]], folder: str | os.PathLike) -> list[str]:
    """Restore every stateful component found in the checkpoint; returns the names restored."""
    components = stateful(named)
    path = Path(folder) / STATE_FILE
    if not components or not path.exists():
        return []
    saved = torch.load(path, weights_only=True)
    restored = []
    for name, component in components.items():
        if name in saved:
            component.load_state_dict(saved[name])
            restored.append(name)
    return restored
