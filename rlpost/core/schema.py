"""Turn a plain config node (dict from YAML) into a component's frozen ``Config`` dataclass.

Unknown keys, wrong types and out-of-range values fail here, naming the full key path and what is
valid, so a typo in ``algorithm.loss.epsilon_hihg=0.3`` or ``train.learning_rate=-1`` is caught
before any model loads.

Every field declares what it accepts next to its type, with ``typing.Annotated``:

    learning_rate: Annotated[float, Range(gt=0)] = 1e-5         # a number > 0
    seed: Annotated[int, Range(ge=0)] = 0                       # an integer >= 0
    weight: Annotated[float, Range()] = 1.0                     # any finite number (visited, unbounded)
    path: Annotated[str | None, PathSpec("text_file")] = None   # an existing UTF-8 text file

``Literal[...]`` types are a field's choices. ``build_config`` checks the types, constructs the
dataclass (its own ``__post_init__`` checks speak first: their messages are often more specific,
e.g. ``need wrong < abstain < correct``), then checks every declared range, all before it returns
and so before any component is built. ``check_paths`` checks what path fields name on disk; the
component builders call it before a component is constructed and ``build_run`` calls it for the
model and the data. Both fail before any model loads or any run directory is made.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import math
import operator
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError


def build_config(config_cls: type, node: Mapping[str, Any] | None, where: str) -> Any:
    """Validate ``node`` against the dataclass ``config_cls`` and instantiate it.

    ``where`` is the dotted key path of ``node`` (e.g. ``"algorithm.loss"``; ``""`` for the top
    level), used in messages. Nested dataclass fields are built recursively; declared ranges are
    checked on the constructed config.
    """
    node = dict(node or {})
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(node) - set(fields))
    if unknown:
        raise ConfigError(unknown_key_message(where, str(unknown[0]), sorted(fields)))
    hints = typing.get_type_hints(config_cls, include_extras=True)
    values = {name: _coerce(hints[name], value, key_path(where, name)) for name, value in node.items()}
    missing = [n for n, f in fields.items() if n not in values and _required(f)]
    if missing:
        raise ConfigError(f"Missing required key {key_path(where, missing[0])}.")
    try:
        config = config_cls(**values)
    except FieldError as err:  # a __post_init__ check that names its field
        raise ConfigError(f"{key_path(where, err.key)}: {err.message}") from None
    except (TypeError, ValueError) as err:  # __post_init__ checks of the component
        raise ConfigError(f"{where}: {err}") from None
    for name, value in node.items():
        check_range(hints[name], getattr(config, name), value, key_path(where, name))
    return config


class FieldError(ConfigError):
    """A bad value of one field, raised by a ``__post_init__``: ``build_config`` names the full key
    (``reward.terms[0].params.gate: must be in [0, 1], got 2.0``)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def key_path(where: str, name: str) -> str:
    """``where.name``, or ``name`` at the top level (``where == ""``)."""
    return f"{where}.{name}" if where else name


def unknown_key_message(where: str, name: str, valid: list[str]) -> str:
    """``Unknown key train.stepz. Did you mean 'steps'? Valid keys of train: ...``."""
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    of = f" of {where}" if where else ""
    return f"Unknown key {key_path(where, name)}.{hint} Valid keys{of}: {', '.join(valid) or '(none)'}."


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


# ---- declared ranges ------------------------------------------------------------------------------
_BOUNDS = (("ge", operator.ge), ("gt", operator.gt), ("le", operator.le), ("lt", operator.lt))


@dataclasses.dataclass(frozen=True)
class Range:
    """The valid values of a numeric field: ``Annotated[float, Range(ge=0, lt=1)]`` is ``[0, 1)``.

    A bound left ``None`` is open; ``Range()`` declares a field that was visited and is unbounded.
    Values must be finite (no NaN or infinity) in every range. ``why`` is a short reason that ends
    the error message (``train.num_generations=1 must be >= 2: a group needs ...``).
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    why: str = ""

    def contains(self, value: float) -> bool:
        """Is ``value`` finite and inside every bound?"""
        if not isinstance(value, int) and not math.isfinite(value):
            return False
        return all(getattr(self, name) is None or op(value, getattr(self, name)) for name, op in _BOUNDS)

    def describe(self) -> str:
        """``> 0``, ``>= 1``, ``in [0, 1)``, or ``any number``."""
        low = ("[", self.ge) if self.ge is not None else ("(", self.gt) if self.gt is not None else None
        high = ("]", self.le) if self.le is not None else (")", self.lt) if self.lt is not None else None
        if low and high:
            return f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
        if low:
            return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
        if high:
            return f"{'<=' if high[0] == ']' else '<'} {_number(high[1])}"
        return "any number"

    def check(self, value: float | None, where: str, shown: Any = None) -> None:
        """ConfigError ``<where>=<shown> must be <range>[: why].`` unless ``value`` is None or in range.

        ``shown`` is the value as the user wrote it (``-1``, not the coerced ``-1.0``)."""
        if value is None or self.contains(value):
            return
        what = self.describe()
        if not isinstance(value, int) and not math.isfinite(value):
            what = "a finite number" if what == "any number" else f"a finite number {what}"
        reason = f": {self.why}" if self.why else ""
        shown = value if shown is None else shown
        raise ConfigError(f"{where}={shown!r} must be {what}{reason}.")


def _number(x: float) -> str:
    """A bound as written by hand: ``1`` not ``1.0``, ``1e-09`` stays as is."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


# ---- declared paths -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PathKind:
    """What a kind of path field must name: its description (docs) and its check."""

    description: str
    check: Callable[[str, str, Any], None]  # (value, full key, the config holding the field) -> None or ConfigError


PATH_KINDS: dict[str, PathKind] = {}


def path_kind(name: str, description: str) -> Callable[[Callable], Callable]:
    """Register a path kind: ``@path_kind("model_folder", "a model folder ...") def check(value, key, cfg)``."""

    def register(check: Callable[[str, str, Any], None]) -> Callable[[str, str, Any], None]:
        PATH_KINDS[name] = PathKind(description, check)
        return check

    return register


@dataclasses.dataclass(frozen=True)
class PathSpec:
    """A field naming something on disk: ``Annotated[str | None, PathSpec("text_file")]``.

    ``kind`` is a registered path kind (``file``, ``text_file``, ``folder`` here; ``model_folder``,
    ``data_file`` ... by the modules that own them). ``check_paths`` runs the checks; None is skipped.
    """

    kind: str

    def describe(self) -> str:
        return PATH_KINDS[self.kind].description

    def check(self, value: str, key: str, owner: Any) -> None:
        PATH_KINDS[self.kind].check(value, key, owner)


def check_paths(config: Any, where: str) -> None:
    """Check every ``PathSpec`` field of the built dataclass ``config`` and of its nested dataclasses."""
    hints = typing.get_type_hints(type(config), include_extras=True)
    for field in dataclasses.fields(config):
        value, key = getattr(config, field.name), key_path(where, field.name)
        for marker in markers(hints[field.name]):
            if isinstance(marker, PathSpec) and value is not None:
                marker.check(value, key, config)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_paths(value, key)


@path_kind("file", "an existing file")
def require_file(shown: str, key: str, _owner: Any = None, path: str | None = None, hint: str = "") -> None:
    """``path`` (default ``shown``, the value as given) is an existing file; ``hint`` (where to get
    one) ends the message of a missing one."""
    path = os.path.expanduser(path or shown)
    if os.path.isdir(path):
        raise ConfigError(f"{key}={shown!r} is a folder, not a file.")
    if not os.path.isfile(path):
        raise ConfigError(f"{key}={shown!r}: no such file" + (f"; {hint}." if hint else "."))
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{key}={shown!r} cannot be read (permission denied).")


@path_kind("text_file", "an existing, non-empty UTF-8 text file")
def require_text_file(shown: str, key: str, _owner: Any = None, path: str | None = None) -> None:
    """``path`` is a readable, non-empty file of UTF-8 text (read once, in 1 MiB chunks)."""
    path = os.path.expanduser(path or shown)
    require_file(shown, key, path=path)
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 20)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:
                raise ConfigError(
                    f"{key}={shown!r} is not UTF-8 text (byte {offset + err.start}: {err.reason}); save it as UTF-8."
                ) from None
            if not chunk:
                break
            offset += len(chunk)
    if offset == 0:
        raise ConfigError(f"{key}={shown!r} is an empty file.")


# the folder holding conf/ and recipes/: the package itself (in a checkout rlpost/conf and rlpost/recipes link to
# the top-level folders; an installed rlpost carries them as package data: pyproject.toml)
RESOURCES = Path(__file__).resolve().parent.parent


def resolve_data_path(path: str) -> str:
    """A relative path is looked up from the working directory, then from rlpost's own folder (``RESOURCES``),
    so bundled files (``recipes/data/*.jsonl``) work from any launch directory, installed or not."""
    if os.path.isabs(path) or os.path.exists(path) or not os.path.exists(RESOURCES / path):
        return path  # os.path.exists, not Path.exists: inline text (a rubric in a column) is no file name
    return str(RESOURCES / path)


@path_kind("jsonl_file", "a UTF-8 text file (relative: from the working directory, then the repository)")
def check_jsonl_file(path: str, key: str, _cfg: Any) -> None:
    """A component's own jsonl (drafts, demonstrations), found as ``resolve_data_path`` finds it."""
    require_text_file(path, key, path=resolve_data_path(path))


@path_kind("folder", "an existing, non-empty folder")
def require_folder(shown: str, key: str, _owner: Any = None, path: str | None = None, hint: str = "") -> list[str]:
    """``path`` is an existing folder with something in it; returns its entries. ``hint`` (what the
    folder should hold) ends the message of an empty folder."""
    path = os.path.expanduser(path or shown)
    if os.path.isfile(path):
        raise ConfigError(f"{key}={shown!r} is a file, not a folder.")
    if not os.path.isdir(path):
        raise ConfigError(f"{key}={shown!r}: no such folder.")
    try:
        entries = os.listdir(path)
    except OSError as err:
        raise ConfigError(f"{key}={shown!r} cannot be read ({err.strerror}).") from None
    if not entries:
        raise ConfigError(f"{key}={shown!r} is an empty folder" + (f"; {hint}." if hint else "."))
    return entries


# ---- reading the declarations ---------------------------------------------------------------------
def markers(hint: Any) -> tuple[Any, ...]:
    """The ``Annotated`` metadata of a type hint (``()`` when it has none)."""
    return tuple(getattr(hint, "__metadata__", ())) if typing.get_origin(hint) is Annotated else ()


def bare_type(hint: Any) -> Any:
    """The type inside ``Annotated[type, ...]`` (the hint itself otherwise)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def check_range(hint: Any, value: Any, shown: Any, where: str) -> None:
    """The declared ``Range`` of a field (or of each item of a list field) holds for ``value``;
    ``shown`` is the value as the user wrote it."""
    for marker in markers(hint):
        if isinstance(marker, Range):
            marker.check(value, where, shown=shown)
    item = bare_type(hint)
    if typing.get_origin(item) in (list, tuple) and typing.get_args(item) and isinstance(value, (list, tuple)):
        for i, (v, raw) in enumerate(zip(value, shown)):
            check_range(typing.get_args(item)[0], v, raw, f"{where}[{i}]")


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is Annotated:  # declared ranges are checked by build_config, on the constructed config
        return _coerce(args[0], value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}={value!r} has the wrong type ({hint}).")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"Invalid value {where}={value!r}. Valid choices: {', '.join(map(str, args))}.")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}.")
        item = args[0] if args else Any
        return origin(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {value!r}.")
        val_hint = args[1] if len(args) == 2 else Any
        return {k: _coerce(val_hint, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping of {hint.__name__} fields, got {value!r}.")
        return build_config(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}.")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}.")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}.")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}.")
        return value
    return value


def composed_mapping(cfg: Any) -> dict[str, Any]:
    """A composed config (an OmegaConf node or a plain mapping) -> a plain dict without its ``hydra`` node,
    interpolations resolved. A value still marked ``???`` is a ConfigError that names the key."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra."))
        if missing:
            raise ConfigError(f"Missing required value {missing[0]} (marked ???): set it with {missing[0]}=<value>.")
    raw = to_container(cfg)
    if not isinstance(raw, Mapping):
        raise ConfigError("The composed config is not a mapping.")
    raw = dict(raw)
    raw.pop("hydra", None)
    return raw


def to_container(node: Any) -> Any:
    """OmegaConf node -> plain python (dicts/lists), resolving interpolations."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node
