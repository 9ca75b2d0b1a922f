"""format: 1.0 when the completion has the required shape (a regex or a sequence of tags), else 0.0.

The "format validity" reward of METHODS.md section 3 (e.g. seed 000 #19 rewards format validity;
seed 004 #26's tag schema for an explicit intent). Give exactly one of:

- ``pattern``: a Python regex, tried with ``re.fullmatch`` (default) or ``re.search`` (``match``).
- ``tags``: e.g. ``[think, answer]`` requires ``<think>...</think>`` then ``<answer>...</answer>``,
  in that order. With ``match: fullmatch`` only whitespace may surround and separate the blocks
  (the usual R1-style format reward); with ``match: search`` any text may.

``partial: true`` gives graded credit for ``tags``: a completion without the whole shape scores
``k / (T + 1)``, where ``k`` of the ``T`` tags have a complete ``<tag>...</tag>`` block anywhere in it,
so a model that has never written the full schema still gets a signal towards it (IAP, seed 004 #26),
and every block in the wrong order (``T / (T + 1)``) still scores below the whole shape (1.0).

Choices: ``.`` matches newlines (``re.DOTALL``), since completions span lines; block contents may
be empty (content quality is other rewards' business); the whole completion is checked, trace
included (no ``strip_think``: the trace is often part of the format). The pattern is compiled when
the config is built, so a bad regex fails before any model loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rlpost.core.chat import completion_text
from rlpost.rewards.base import REWARDS, Reward, tag_content


@REWARDS.register("format")
class Format(Reward):
    """Regex or ordered-tags format check: 1.0 if the completion has the shape, else 0.0."""

    @dataclass(frozen=True)
    class Config:
        pattern: str | None = None  # a Python regex for the completion (or use tags)
        tags: list[str] = field(default_factory=list)  # required <tag>...</tag> blocks, in order
        match: Literal["fullmatch", "search"] = "fullmatch"  # whole completion, or anywhere in it
        partial: bool = False  # tags: without the whole shape, k / (T + 1) for k of T tags with a complete block

        def __post_init__(self):
            if (self.pattern is None) == (not self.tags):
                raise ValueError("give exactly one of `pattern` or `tags`")
            if self.partial and not self.tags:
                raise ValueError("partial=true grades tags; a pattern is all or nothing")
            for tag in self.tags:
                if not re.fullmatch(r"[\w.:-]+", tag):
                    raise ValueError(f"tag {tag!r} is not a plain tag name (letters, digits, _ . : -)")
            try:
                re.compile(self.pattern or "")
            except re.error as err:
                raise ValueError(f"pattern {self.pattern!r} is not a valid regex: {err}") from None

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        if cfg.pattern is not None:
            source = cfg.pattern
        else:
            blocks = [rf"<{re.escape(t)}>.*?</{re.escape(t)}>" for t in cfg.tags]
            sep = r"\s*" if cfg.match == "fullmatch" else r".*?"
            source = sep + sep.join(blocks) + sep
        self.regex = re.compile(source, re.DOTALL)

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> rewards ``[N]`` in {1.0, 0.0} (``partial``: in {0, 1/(T+1), ..., T/(T+1), 1})."""
        check = self.regex.fullmatch if self.cfg.match == "fullmatch" else self.regex.search
        texts = [completion_text(c) for c in completions]
        if not self.cfg.partial:
            return [float(check(text) is not None) for text in texts]
        tags = self.cfg.tags
        return [
            1.0 if check(text) is not None else sum(tag_content(text, t) is not None for t in tags) / (len(tags) + 1)
            for text in texts
        ]
