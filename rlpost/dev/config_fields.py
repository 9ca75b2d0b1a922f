"""Every declared field of a run's config: the inventory behind docs/errors.md's ranges table and
tests/config/test_config_fuzz.py.

The fields are discovered, not listed by hand: the top-level settings dataclasses (``SETTINGS``)
and the ``Config`` of every registered component (``COMPONENTS``), recursing into nested
dataclasses. Each field carries what ``rlpost/core/schema.py`` enforces: a ``Range`` (numbers), a
``PathSpec`` (files and folders) or ``Literal`` choices. ``unvisited()`` lists numeric fields that
declare no range, which a test keeps empty.

    python -m rlpost.dev.config_fields          # rewrite the generated section of docs/errors.md
    python -m rlpost.dev.config_fields --check  # exit 1 when docs/errors.md is stale
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.advantages.base import ADVANTAGES
from rlpost.combine.base import COMBINERS
from rlpost.core.config import HardwareConfig, OverlongSettings, RunSettings
from rlpost.core.registry import Registry
from rlpost.core.schema import PathSpec, Range, bare_type, markers
from rlpost.corrections.base import CORRECTIONS
from rlpost.data.sources import DataConfig
from rlpost.envs.base import ENVS
from rlpost.grad.base import GRAD_TRANSFORMS
from rlpost.judges.base import JUDGES
from rlpost.losses.base import LOSSES
from rlpost.losses.kl import KLConfig
from rlpost.models.critic import CriticConfig
from rlpost.models.loading import ModelConfig
from rlpost.models.lora_ensemble import EnsembleConfig
from rlpost.regularizers.base import REGULARIZERS
from rlpost.rewards.base import REWARDS, RewardTerm
from rlpost.rewards.rubric_coevolution import CoEvolveConfig
from rlpost.rewards.rubric_revision import ReviseConfig
from rlpost.rewards.rubric_writer import WriterConfig
from rlpost.rollouts.base import ROLLOUTS
from rlpost.safety.config import SafetySettings
from rlpost.scoring.guard import FailurePolicy
from rlpost.select.base import SELECTORS
from rlpost.transforms.base import TRANSFORMS

# (key prefix, dataclass): the run's settings outside the components
SETTINGS: list[tuple[str, type]] = [
    ("", RunSettings),  # seed, train.*, eval.*, logging.*
    ("model", ModelConfig),
    ("data", DataConfig),
    ("hardware", HardwareConfig),
    ("reward", FailurePolicy),  # reward.on_failure / reward.timeout_s
    ("reward.terms[i]", RewardTerm),
    ("algorithm.kl", KLConfig),
    ("algorithm.overlong", OverlongSettings),
    ("algorithm.safety", SafetySettings),
    ("algorithm.critic", CriticConfig),
    ("algorithm.ensemble", EnsembleConfig),
]

# (key prefix, config group of the choice, registry): every registered component's Config
COMPONENTS: list[tuple[str, str, Registry]] = [
    ("algorithm.advantage", "algorithm/advantage", ADVANTAGES),
    ("algorithm.loss", "algorithm/loss", LOSSES),
    ("algorithm.regularizers.{name}", "algorithm/regularizers", REGULARIZERS),
    ("algorithm.grad.{name}", "algorithm/grad", GRAD_TRANSFORMS),
    ("algorithm.correction", "algorithm/correction", CORRECTIONS),
    ("algorithm.rollout", "algorithm/rollout", ROLLOUTS),
    ("algorithm.select", "algorithm/select", SELECTORS),
    ("reward.combine", "reward/combine", COMBINERS),
    ("reward.terms[i].params", "reward.terms[i].name", REWARDS),
    ("data.transform", "data/transform", TRANSFORMS),
    ("data.env", "data/env", ENVS),
    # a judge node of a reward or rollout: reward.terms[i].params.judge, algorithm.rollout.judge
    ("reward.terms[i].params.judge", "judge.backend", JUDGES),
]
EXTRA: list[tuple[str, str, type]] = [  # nested nodes a component builds from a dict: (prefix, choice, dataclass)
    ("reward.terms[i].params.writer", "reward.terms[i].name=dynamic_rubric", WriterConfig),
    ("reward.terms[i].params.co_evolve", "reward.terms[i].name=dynamic_rubric", CoEvolveConfig),
    ("reward.terms[i].params.revise", "reward.terms[i].name=rubric", ReviseConfig),
    ("reward.terms[i].params.revise.writer", "reward.terms[i].name=rubric", WriterConfig),
]


@dataclasses.dataclass(frozen=True)
class DeclaredField:
    """One field of one config dataclass, where it sits in the composed config, and its declaration."""

    key: str  # dotted key, e.g. "train.learning_rate" or "algorithm.loss.epsilon_low"
    choice: str  # the component choice that holds it ("algorithm/loss=clip"), "" for settings
    cls: type  # the dataclass declaring it
    name: str  # the field name
    hint: Any  # its type, Annotated stripped

    @property
    def group(self) -> str:
        """The choice's config group or key (``algorithm/loss``), "" for settings."""
        return self.choice.split("=", 1)[0]

    @property
    def component(self) -> str:
        """The chosen component's registry name (``clip``), "" for settings."""
        return self.choice.split("=", 1)[1] if self.choice else ""

    @property
    def markers(self) -> tuple[Any, ...]:
        return markers(typing.get_type_hints(self.cls, include_extras=True)[self.name])

    @property
    def range(self) -> Range | None:
        return next((m for m in self._item_markers() if isinstance(m, Range)), None)

    @property
    def path(self) -> PathSpec | None:
        return next((m for m in self.markers if isinstance(m, PathSpec)), None)

    @property
    def scalar(self) -> Any:
        """int or float for numeric fields (also optional ones and lists of numbers), else None."""
        base = _strip_optional(self.hint)
        if typing.get_origin(base) in (list, tuple):
            base = bare_type(typing.get_args(base)[0])
        return base if base in (int, float) else None

    @property
    def choices(self) -> tuple[Any, ...]:
        base = _strip_optional(self.hint)
        return typing.get_args(base) if typing.get_origin(base) is Literal else ()

    @property
    def optional(self) -> bool:
        return typing.get_origin(self.hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
            self.hint
        )

    @property
    def default(self) -> Any:
        field = next(f for f in dataclasses.fields(self.cls) if f.name == self.name)
        if field.default is not dataclasses.MISSING:
            return field.default
        return field.default_factory() if field.default_factory is not dataclasses.MISSING else dataclasses.MISSING

    def type_name(self) -> str:
        """``int``, ``float or null``, ``list of float``, ``path``, ``choice``."""
        if self.path is not None:
            name = "path"
        elif self.choices:
            name = "choice"
        elif typing.get_origin(_strip_optional(self.hint)) in (list, tuple):
            name = f"list of {self.scalar.__name__}"
        else:
            name = self.scalar.__name__
        return f"{name} or null" if self.optional else name

    def valid(self) -> str:
        """What the schema accepts, in words: the range, the path kind, or the choices."""
        if self.path is not None:
            return self.path.describe()
        if self.choices:
            return ", ".join(map(str, self.choices))
        if self.range is None:
            return "(no range declared)"
        return self.range.describe() + (f" ({self.range.why})" if self.range.why else "")

    def _item_markers(self) -> tuple[Any, ...]:
        base = _strip_optional(self.hint)
        if typing.get_origin(base) in (list, tuple):
            return markers(typing.get_args(base)[0])
        return self.markers


def _strip_optional(hint: Any) -> Any:
    """``X | None`` -> ``X`` (anything else unchanged)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def walk(cls: type, prefix: str, choice: str = "") -> Iterator[DeclaredField]:
    """Every field of the dataclass ``cls`` and of its nested dataclasses, keyed under ``prefix``.

    A nested ``ModelConfig`` inside a component (a judge's or a scorer's model) is the same schema
    as the top-level ``model`` node and is not listed again."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        key = f"{prefix}.{field.name}" if prefix else field.name
        hint = bare_type(hints[field.name])
        nested = _strip_optional(hint)
        if dataclasses.is_dataclass(nested) and isinstance(nested, type):
            if not (nested is ModelConfig and choice):
                yield from walk(nested, key, choice)
            continue
        yield DeclaredField(key=key, choice=choice, cls=cls, name=field.name, hint=hint)


def setting_fields() -> list[DeclaredField]:
    """The fields of the run's settings (``SETTINGS``)."""
    return [f for prefix, cls in SETTINGS for f in walk(cls, prefix)]


def component_fields() -> list[DeclaredField]:
    """The fields of every registered component's Config (``COMPONENTS`` and ``EXTRA``)."""
    found: list[DeclaredField] = []
    for prefix, group, registry in COMPONENTS:
        for name, cls in registry.items():
            found += walk(cls.Config, prefix.format(name=name), f"{group}={name}")
    for prefix, choice, cls in EXTRA:
        found += walk(cls, prefix, choice)
    return found


def declared_fields() -> list[DeclaredField]:
    """Every field of a run's config, settings first."""
    return setting_fields() + component_fields()


def numeric_fields() -> list[DeclaredField]:
    return [f for f in declared_fields() if f.scalar is not None and f.path is None]


def path_fields() -> list[DeclaredField]:
    return [f for f in declared_fields() if f.path is not None]


def unvisited() -> list[str]:
    """Numeric fields without a declared ``Range`` (``Range()`` marks an unbounded one)."""
    return [f"{f.key} ({f.choice or f.cls.__qualname__})" for f in numeric_fields() if f.range is None]


# ---- the generated section of docs/errors.md ------------------------------------------------------
DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
BEGIN = "<!-- BEGIN declared ranges: generated by `python -m rlpost.dev.config_fields`; do not edit -->"
END = "<!-- END declared ranges -->"
INTRO = """## Declared ranges

Every numeric, path and choice field of a run declares what it accepts next to its type
(`Annotated[float, Range(gt=0)]`, `PathSpec("text_file")`, `Literal[...]`; rlpost/core/schema.py). The one
schema check enforces it before any model loads or any run directory is made, in one line that
names the key: `train.learning_rate=-1 must be > 0.`, `data.path='d.jsonl' is not UTF-8 text (byte 0:
invalid start byte); save it as UTF-8.` Fuzzed by `tests/config/test_config_fuzz.py`.

| Key | Choice | Type | Valid |
|---|---|---|---|"""


def ranges_section() -> str:
    """The generated section: a table of every declared numeric, path and choice field."""
    rows = [
        f"| `{f.key}` | {f'`{f.choice}`' if f.choice else ''} | {f.type_name()} | {_cell(f.valid())} |"
        for f in declared_fields()
        if f.scalar is not None or f.path is not None or f.choices
    ]
    return "\n".join([BEGIN, INTRO, *rows, END])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def updated_doc(text: str) -> str:
    """``text`` (docs/errors.md) with its generated section replaced (appended when absent)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + ranges_section() + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + ranges_section() + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = DOC.read_text(encoding="utf-8")
    new = updated_doc(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is stale: run python -m rlpost.dev.config_fields", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
