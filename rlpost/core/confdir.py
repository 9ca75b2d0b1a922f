"""``conf/`` on disk: the config groups, their options and each option's one-line description.

A config group is a folder of yaml files under ``conf/`` (``algorithm``, ``algorithm/loss``,
``hydra/launcher``; ``conf/recipe`` links to ``recipes/``); an option is one of its files, chosen on
the command line as ``<group>=<option>``. Its description is the first line of the file's header
comment (a ``# @package`` line is skipped). The folders below ``recipes/`` (``recipes/data/``) hold
data files, not options, and are no group.
"""

from __future__ import annotations

import os
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # rlpost/conf: the package's (a link in a checkout)
NOT_GROUPS = (
    "recipe/",
    "eval_sets",
)  # recipes/<folder>/*.yaml are data (rubrics), not recipes; eval_sets are eval.sets values


def config_groups() -> list[str]:
    """Every config group (a folder of yaml files under conf/), e.g. ``algorithm/loss``."""
    groups = (
        os.path.relpath(root, CONF_DIR)
        for root, _, files in os.walk(CONF_DIR, followlinks=True)
        if root != str(CONF_DIR) and any(f.endswith(".yaml") for f in files)
    )
    return sorted(g for g in groups if not g.startswith(NOT_GROUPS))


def group_options(group: str) -> list[str]:
    """The choices of a config group (its yaml files under conf/; conf/recipe links to recipes/)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def option_description(group: str, option: str) -> str:
    """The first line of ``conf/<group>/<option>.yaml``'s header comment ("" when it has none)."""
    with open(CONF_DIR / group / f"{option}.yaml", encoding="utf-8") as file:
        for line in file:
            text = line.strip()
            if not text or text.startswith("# @package"):
                continue
            return text.lstrip("#").strip() if text.startswith("#") else ""
    return ""


def compose_options(overrides: list[str], where: str) -> dict:
    """Options of config groups composed as the command line composes them, e.g. ``["+data=gsm_symbolic",
    "+seed=0"]`` (``${seed}`` resolved), as a plain mapping; inside a Hydra job through the job's own config
    path (conf/), else through conf/. A Hydra error becomes a ConfigError prefixed with ``where``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from rlpost.core.errors import ConfigError

    try:
        if GlobalHydra.instance().is_initialized():  # inside a Hydra job: its config path is conf/
            cfg = compose(config_name=None, overrides=overrides)
        else:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
                cfg = compose(config_name=None, overrides=overrides)
    except HydraException as err:
        raise ConfigError(f"{where}: {err}") from None
    return OmegaConf.to_container(cfg, resolve=True)
