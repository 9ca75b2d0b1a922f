"""Every ``rlpost train ...`` command that a recipe's header comment gives (its launch line, its baseline, its
ablations) composes and passes the checks ``rlpost train`` runs before any model loads. A documented baseline that
fails is a defect users meet first (the calibrated_irl baseline once cleared a dict with ``={}``, which Hydra
merges instead of replacing).

A command may need what an earlier command of the same header writes (``rlpost train-rm``, ``rlpost
align-simulator``), or an optional model that is not installed here (the Qwen wheels, ``make qwen``): a check that
says so, by naming the missing folder or the install command, is accepted."""

from __future__ import annotations

import re
import shlex

import pytest

from rlpost.app import build_run_of, compose
from rlpost.core.errors import ConfigError

from support.paths import REPO

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
NOT_HERE = re.compile(r"no such folder|has no config\.json|does not exist|Install them with: make qwen")


def header_commands(text: str) -> list[list[str]]:
    """The overrides of each ``rlpost train`` in the leading comment block; a parenthesis or backtick ends one."""
    commands = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        for found in re.finditer(r"rlpost train ([^(`]*)", line):
            words = shlex.split(found.group(1))
            commands.append([w.rstrip(").,") for w in words if "=" in w or w.startswith("~")])
    return commands


def test_header_commands_are_read_from_the_comment_block():
    text = "# Launch: rlpost train recipe=a x.y=1   (ablation: rlpost train recipe=a '~b.c')\n# `rlpost train recipe=d`.\nk: 1  # rlpost train recipe=z\n"  # fmt: skip
    assert header_commands(text) == [["recipe=a", "x.y=1"], ["recipe=a", "~b.c"], ["recipe=d"]]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_command_in_a_recipe_header_passes_the_checks(recipe):
    for overrides in header_commands(recipe.read_text()):
        try:
            build_run_of(compose(overrides), overrides)
        except ConfigError as err:
            if not NOT_HERE.search(str(err)):
                raise AssertionError(f"{recipe.name}: rlpost train {' '.join(overrides)}: {err}") from None
