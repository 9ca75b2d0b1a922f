"""Registry[T]: components register by decorator and are looked up by name with did-you-mean errors.

Every component class subclasses its kind's base (``rlpost/<kind>/base.py``, itself a
``rlpost.core.component.Component``), carries a nested frozen ``Config`` dataclass (its schema), a
``seed`` attribute (the seed paragraph it implements, e.g. ``"seed 000 #29"``) and a docstring
whose first line is its one-line description for ``rlpost list``. Naming rule (tests/config/test_naming_rule.py):
the class registered as ``<name>`` lives in ``rlpost/<kind>/<name>.py``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

from rlpost.core.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> component class, for one kind of component (advantage, loss, reward, ...)."""

    def __init__(self, kind: str, base: type[T]):
        self.kind = kind
        self.base = base  # the kind's base class (rlpost/<kind>/base.py): every entry subclasses it
        self._entries: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._entries:
                raise RuntimeError(f"{self.kind} {name!r} is registered twice")
            if not issubclass(cls, self.base):
                raise RuntimeError(f"{self.kind} {name!r} ({cls.__name__}) must subclass {self.base.__name__}")
            if not dataclasses.is_dataclass(getattr(cls, "Config", None)):  # T is any class: checked here
                raise RuntimeError(f"{self.kind} {name!r} has no nested Config dataclass")
            setattr(cls, "registry_name", name)  # noqa: B010 (T carries no attribute declaration)
            self._entries[name] = cls
            return cls

        return decorator

    def get(self, name: str) -> type[T]:
        if name not in self._entries:
            raise ConfigError(self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), self.names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"Unknown {self.kind} {name!r}.{hint} Valid choices: {', '.join(self.names())}."

    def names(self) -> list[str]:
        return sorted(self._entries)

    def items(self) -> list[tuple[str, type[T]]]:
        return sorted(self._entries.items())

    def __contains__(self, name: str) -> bool:
        return name in self._entries


def describe(cls: type) -> str:
    """First docstring line of a component: its description in ``rlpost list``."""
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""
