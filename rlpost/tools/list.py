"""``rlpost list [word ...]``: every choice a user can make.

- components: every registered component by kind (advantage, loss, reward, ...) with its
  description and seed reference (rlpost/tools/listing.py);
- config groups: every option of every group under ``conf/`` (algorithm bundles, models, data sets,
  rewards, hardware presets, recipes, launchers, and the nested ``algorithm/loss`` ...) with the
  first line of its yaml header, chosen on the command line as ``<group>=<option>``.

A word filters: a component kind (``rlpost list loss``), a config group with the groups below it
(``rlpost list algorithm``, ``rlpost list algorithm/loss``), or both when it is both (``reward``).
An unknown word exits with code 2 naming the closest kind or group and all of them.

On a terminal the rows are rich tables; piped or redirected (``rlpost list | grep dapo``) they are
plain text, one line per row with aligned columns, never wrapped to the terminal width.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence

from rlpost.app import fail

COMPONENTS = ("components: rlpost list <kind>", ("kind", "name", "description", "seed"))
GROUPS = (
    "config groups: choose with <group>=<option>, e.g. algorithm=dapo algorithm/loss=clip",
    ("group", "option", "description"),
)


def main(args: list[str]) -> int:
    from rlpost.tools.listing import REGISTRIES, group_rows, group_words, rows

    kinds, words = list(REGISTRIES), group_words()
    for word in args:
        if word not in REGISTRIES and word not in words:
            close = difflib.get_close_matches(word, [*kinds, *words], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            return fail(
                f"Unknown component kind {word!r}, and no config group of that name.{hint} "
                f"Component kinds: {', '.join(kinds)}. Config groups: {', '.join(words)}."
            )
    sections: list[tuple[str, tuple[str, ...], Sequence[tuple[str, ...]]]] = []
    words_or_all: list[str | None] = list(args) or [None]
    component_rows = [r for word in words_or_all if word is None or word in REGISTRIES for r in rows(word)]
    if component_rows:
        sections.append((*COMPONENTS, component_rows))
    option_rows = [r for word in words_or_all if word is None or word in words for r in group_rows(word)]
    if option_rows:
        sections.append((*GROUPS, list(dict.fromkeys(option_rows))))
    if sys.stdout.isatty():
        print_tables(sections)
    else:
        print("\n\n".join("\n".join([title, *aligned(header, rows)]) for title, header, rows in sections))
    return 0


def aligned(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """The header and rows as lines of plain text, each column padded to its widest cell."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in (header, *rows)]


def print_tables(sections: Sequence[tuple[str, tuple[str, ...], Sequence[tuple[str, ...]]]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    for title, header, rows in sections:
        table = Table(*header, title=title, title_justify="left")
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))  # descriptions hold brackets such as 1[s >= k]
        console.print(table)
