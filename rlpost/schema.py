"""Turn a plain config node (dict from YAML) into a component's frozen ``Config`` dataclass.

Unknown keys and wrong types fail here, naming the full key path and the valid fields, so a typo
in ``algorithm.loss.epsilon_hihg=0.3`` is caught before any model loads.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from rlpost.errors import ConfigError


def build_config(config_cls: type, node: Mapping[str, Any] | None, where: str) -> Any:
    """Validate ``node`` against the dataclass ``config_cls`` and instantiate it.

    ``where`` is the dotted key path of ``node`` (e.g. ``"algorithm.loss"``; ``""`` for the top
    level), used in messages. Nested dataclass fields are built recursively.
    """
    node = dict(node or {})
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(node) - set(fields))
    if unknown:
        raise ConfigError(unknown_key_message(where, str(unknown[0]), sorted(fields)))
    hints = typing.get_type_hints(config_cls)
    values = {name: _coerce(hints[name], value, key_path(where, name)) for name, value in node.items()}
    missing = [n for n, f in fields.items() if n not in values and _required(f)]
    if missing:
        raise ConfigError(f"Missing required key {key_path(where, missing[0])}.")
    try:
        return config_cls(**values)
    except (TypeError, ValueError) as err:  # __post_init__ checks of the component
        raise ConfigError(f"{where}: {err}") from None


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


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
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
    if dataclasses.is_dataclass(hint):
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


def to_container(node: Any) -> Any:
    """OmegaConf node -> plain python (dicts/lists), resolving interpolations."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node
