"""Reading jsonl files of objects with errors that name the file and the line (one reader for every bundled
or user-given jsonl: preference pairs, valuations, probe scenarios, ARES documents)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from rlpost.core.errors import ConfigError


def json_objects(path: str, kind: str, fields: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    """``(where, row)`` for every non-blank line of a jsonl file of objects; ``where`` is ``"<path> line <n>"``.
    An unreadable file, a line that is not JSON or not an object: ``ConfigError`` naming the file and line."""
    try:
        handle = open(path, encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the {kind} file ({err.strerror}).") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{where}: not valid JSON ({err.msg}).") from None
            if not isinstance(row, dict):
                raise ConfigError(
                    f"{where}: expected a JSON object with {', '.join(fields)}, got {type(row).__name__}."
                )
            yield where, row
