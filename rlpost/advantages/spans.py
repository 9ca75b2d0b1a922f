"""Token subsets of completions from their text, for token-level advantages (routed, segments).

The trainer fills ``GroupBatch.token_text`` ([N][T], each token decoded on its own) for components
with ``requires = {"token_text"}``. The completion text is the concatenation of those pieces, so
the character offsets of every token are exact in that string (byte-level BPE pieces of a split
multi-byte character decode to replacement characters, which tags and regexes of ASCII never match).

Span specs (one string): ``tag:NAME`` = ``<NAME>`` up to and including ``</NAME>`` (an unclosed tag
runs to the end: a truncated trace is still the trace), ``re:REGEX`` = every match of a Python
regex (DOTALL), ``rest`` = tokens in no ``tag:``/``re:`` span of the same component, ``all``.
A token belongs to a span when its character range overlaps a match (an empty piece, e.g. a special
token, counts at its position).
"""

from __future__ import annotations

import re

import torch

SPECIAL = ("rest", "all")


def compile_span(spec: str) -> re.Pattern | None:
    """``tag:NAME`` | ``re:REGEX`` -> compiled pattern; ``rest`` / ``all`` -> None. ValueError otherwise."""
    if spec in SPECIAL:
        return None
    kind, _, body = spec.partition(":")
    if kind == "tag" and re.fullmatch(r"[\w.-]+", body):
        name = re.escape(body)
        return re.compile(rf"<{name}>.*?(?:</{name}>|\Z)", re.DOTALL)
    if kind == "re" and body:
        try:
            return re.compile(body, re.DOTALL)
        except re.error as err:
            raise ValueError(f"span {spec!r}: bad regex: {err}") from None
    raise ValueError(f"span {spec!r}: expected tag:NAME, re:REGEX, rest or all")


def offsets(pieces: list[str]) -> list[tuple[int, int]]:
    """Decoded pieces [T] -> (start, end) character range of each in their concatenation."""
    out, pos = [], 0
    for piece in pieces:
        out.append((pos, pos + len(piece)))
        pos += len(piece)
    return out


def span_mask(pieces: list[str], pattern: re.Pattern) -> torch.Tensor:
    """pieces [T] -> bool [T]: tokens overlapping any match of ``pattern`` in the joined text."""
    text = "".join(pieces)
    ranges = [m.span() for m in pattern.finditer(text) if m.end() > m.start()]
    hit = [any(s < b and max(e, s + 1) > a for a, b in ranges) for s, e in offsets(pieces)]
    return torch.tensor(hit, dtype=torch.bool)


def stage_index(pieces: list[str], markers: list[str]) -> torch.Tensor:
    """pieces [T], stage markers [S] -> long [T]: the stage each token lies in, -1 before the first marker.

    Every occurrence of a marker opens its stage, which runs up to the next occurrence of any marker;
    the marker's own tokens belong to the stage they open (a token is in the stage of the last marker
    that starts before the token ends)."""
    text = "".join(pieces)
    starts = sorted((m.start(), k) for k, marker in enumerate(markers) for m in re.finditer(re.escape(marker), text))
    out = []
    for _, end in offsets(pieces):
        opened = [k for start, k in starts if start < max(end, 1)]
        out.append(opened[-1] if opened else -1)
    return torch.tensor(out, dtype=torch.long)


def require_text(batch, name: str) -> list[list[str]]:
    if len(batch.token_text) != batch.rewards.numel():
        raise RuntimeError(f"{name} needs batch.token_text (the trainer fills it: requires={{'token_text'}})")
    return batch.token_text
