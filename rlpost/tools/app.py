"""The launch path shared by the tool commands: compose, validate every job, then run under Hydra.

A tool is a primary config ``conf/<config_name>.yaml``, a settings dataclass (the schema: unknown
keys and wrong types fail naming the key), a cheap ``check`` (paths, shapes; no model loads) and
``run``. ``main`` validates every job of the command line (all jobs of ``-m``) before Hydra starts
the first, so bad input exits with code 2 and nothing is written. As in ``rlpost train``,
Hydra's "Could not override 'x'" is retried as ``+x=...`` so the schema names the unknown key.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlpost.errors import ConfigError


@dataclass(frozen=True)
class Tool:
    command: str  # rlpost <command>
    config_name: str  # conf/<config_name>.yaml
    settings: type  # the schema dataclass of the composed config (groups included)
    check: Callable[[Any, list[str]], Any]  # (settings, overrides) -> settings, cheap validation
    run: Callable[[Any, str, list[str]], int]  # (settings, output_dir, overrides) -> exit code
    prepare: Callable[[dict, list[str]], dict] | None = None  # (raw config, overrides) -> raw, before the schema


def compose_tool(tool: Tool, overrides: list[str]):
    """Compose ``conf/<config_name>.yaml`` with overrides (no run directory)."""
    from hydra import compose, initialize_config_dir

    from rlpost.cli import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name=tool.config_name, overrides=overrides)


def build_settings(tool: Tool, cfg: Any, overrides: list[str]) -> Any:
    """The composed config -> the tool's settings dataclass (no ``hydra`` node); ConfigError names keys."""
    from omegaconf import DictConfig, OmegaConf

    from rlpost.schema import build_config, to_container

    if isinstance(cfg, DictConfig):
        missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra."))
        if missing:
            raise ConfigError(f"Missing required value {missing[0]} (marked ???): set it with {missing[0]}=<value>.")
    raw = dict(to_container(cfg))
    raw.pop("hydra", None)
    if tool.prepare is not None:
        raw = tool.prepare(raw, overrides)
    return build_config(tool.settings, raw, "")


def validate(tool: Tool, job: list[str]) -> Any:
    from hydra.errors import HydraException

    try:
        return tool.check(build_settings(tool, compose_tool(tool, job), job), job)
    except HydraException as err:
        match = re.match(r"Could not override '([^'/]+)'", str(err))
        if not match:
            raise
        appended = [f"+{o}" if o.split("=", 1)[0] == match.group(1) else o for o in job]
        tool.check(
            build_settings(tool, compose_tool(tool, appended), appended), appended
        )  # raises the schema's message
        raise


def main(tool: Tool, args: list[str]) -> int:
    """``rlpost <command> [overrides]``: validate every job, then hand over to Hydra."""
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from rlpost.cli import CONF_DIR, HYDRA_INFO_FLAGS, expand_sweep, fail, hydra_message

    multirun = "-m" in args or "--multirun" in args
    if not HYDRA_INFO_FLAGS.intersection(args):
        overrides = [a for a in args if not a.startswith("-")]
        try:
            for job in expand_sweep(overrides) if multirun else [overrides]:
                validate(tool, job)
        except (HydraException, OmegaConfBaseException) as err:
            return fail(hydra_message(err))
        except ConfigError as err:
            return fail(str(err))
    codes: list[int] = []

    def job(cfg) -> None:
        from hydra.core.hydra_config import HydraConfig

        hydra_cfg = HydraConfig.get()
        overrides = list(hydra_cfg.overrides.task)
        try:
            settings = tool.check(build_settings(tool, cfg, overrides), overrides)
            codes.append(tool.run(settings, hydra_cfg.runtime.output_dir, overrides))
        except ConfigError as err:
            sys.exit(fail(str(err)))

    sys.argv = [f"rlpost {tool.command}", *args]
    hydra.main(config_path=str(CONF_DIR), config_name=tool.config_name, version_base=None)(job)()
    return max(codes, default=0)
