"""The one launch path of every Hydra command: compose, validate every job, then hand over to Hydra.

An ``App`` is ``rlpost <command>`` over the primary config ``conf/<config_name>.yaml``: ``build``
turns one composed job into what it runs (``build_run`` -> a BuiltRun for ``train``, a settings
dataclass for a tool: the schema names unknown keys and wrong types) and loads no model; ``run`` is
the Hydra job. ``launch(app, args)``:

1. parses every override (a malformed one is named), expands a multirun (``-m``) into its jobs, and
   composes and builds each job once (``validate``); Hydra's errors become one line
   (``hydra_message``, ``unknown_key_error``, ``yaml_message``);
2. ``app.prelaunch`` (``train``: the search objective, ``resume=`` run and sweep folders,
   ``accelerate launch`` for N processes) reuses those composed configs and built jobs;
3. ``hydra.main`` runs the jobs (run directories, sweeps, launchers; its composition is Hydra's).
   Each job gets the object built in step 1, found by its override list (``take_validated``) and
   confirmed by its composed config, so the job runs what was validated. It is built in the job
   only when step 1 did not build it in this process: a search sweeper's jobs (Optuna picks their
   values as it goes), jobs in worker processes (the joblib and submitit launchers), the processes
   ``accelerate launch`` starts (each validates for itself), or a job whose config differs.

Bad input thus exits with code 2 and one line before any model loads or any run directory is made.
``--cfg job`` prints the job config with secrets redacted. Nothing here imports the CLI or a tool;
``rlpost/cli.py`` maps each subcommand onto a module of ``rlpost/tools/`` that holds its app.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from rlpost.core.confdir import CONF_DIR, config_groups, group_options
from rlpost.core.errors import ConfigError

HYDRA_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--resolve", "--package", "-p"}


@dataclass(frozen=True)
class Job:
    """One job of a launch: its overrides, its config composed once, and what ``App.build`` made of it."""

    overrides: list[str]
    cfg: Any
    built: Any


@dataclass(frozen=True)
class App:
    """``rlpost <command> [overrides]``: a Hydra app on ``conf/<config_name>.yaml``."""

    command: str  # rlpost <command>
    config_name: str  # conf/<config_name>.yaml
    build: Callable[[Any, list[str]], Any]  # (composed job config, overrides) -> what the job runs; ConfigError
    run: Callable[[Any, Any, str, list[str]], Any]  # (built, cfg, output_dir, overrides) -> the job's return value
    # (validated jobs, overrides, multirun) -> extra Hydra overrides, or an exit code when it launched itself
    prelaunch: Callable[[list[Job], list[str], bool], list[str] | int] | None = None


def fail(message: str) -> int:
    print(f"rlpost: error: {message}", file=sys.stderr)
    return ConfigError.exit_code


# ---- compose and validate ------------------------------------------------------------------------
def compose(overrides: list[str], config_name: str = "config", hydra_node: bool = False):
    """Compose ``conf/<config_name>.yaml`` with overrides (Hydra's compose API, no run directory);
    ``hydra_node`` keeps Hydra's own settings (``hydra.run.dir``, ...) in the result."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra_node)


def build_run_of(cfg: Any, overrides: list[str]):
    """The ``build`` of ``rlpost train`` and ``rlpost show``: the composed config -> a BuiltRun."""
    from rlpost.build import build_run

    return build_run(cfg)


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """The override list of every job of a multirun (Hydra's basic sweeper expansion)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = [_interval_start(o, parser) for o in parser.parse_overrides(overrides)]
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _interval_start(override, parser):
    """``key=interval(a,b)`` (a search space of hydra/sweeper=search, Optuna) is validated at ``a``."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type != ValueType.INTERVAL_SWEEP:
        return override
    start = override.value().start
    start = int(start) if "int" in override.value().tags else start
    return parser.parse_override(f"{override.get_key_element()}={start}")


def validate(
    overrides: list[str],
    multirun: bool = False,
    config_name: str = "config",
    build: Callable[[Any, list[str]], Any] = build_run_of,
) -> list[Job]:
    """Compose and build every job once; raise ConfigError with Hydra's or rlpost's message."""
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    parser = OverridesParser.create()
    for override in overrides:  # one at a time, so the message can name the malformed one
        try:
            parser.parse_overrides([override])
        except OverrideParseException as err:
            message = hydra_message(err)
            if repr(override) not in message:
                message = f"Malformed override {override!r}: {message}"
            raise ConfigError(message) from None
    jobs = []
    try:
        for job in expand_sweep(overrides) if multirun else [overrides]:
            try:
                cfg = compose(job, config_name)
                jobs.append(Job(job, cfg, build(cfg, job)))
            except HydraException as err:
                unknown_key_error(err, job, config_name, build)  # raises rlpost's message when the schema explains it
                raise
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(hydra_message(err)) from None
    except yaml.YAMLError as err:  # reliability: a malformed YAML file (a recipe, a config on the search path)
        raise ConfigError(yaml_message(err)) from None
    return jobs


# ---- Hydra's errors as one line ------------------------------------------------------------------
def yaml_message(err) -> str:
    """A YAML parse error as one line: the file, line and column, and what the parser expected."""
    mark = getattr(err, "problem_mark", None)
    where = f"{mark.name} line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
    what = " ".join(str(part) for part in (getattr(err, "context", None), getattr(err, "problem", None)) if part)
    return f"Bad YAML in {where}: {what or err}."


def unknown_key_error(
    err: Exception, job: list[str], config_name: str = "config", build: Callable[[Any, list[str]], Any] = build_run_of
) -> None:
    """Hydra's "Could not override 'train.stepz'": retry as an append (``+train.stepz=...``) so the
    schema names the unknown key, the closest valid one and all valid keys. Hydra's own message
    (use ``+key=value``) stands when the schema accepts the appended key, or on any other error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    match = re.match(r"Could not override '([^']+)'", str(err))
    if not match:
        return
    if "/" in match.group(1):  # a config group path, e.g. algorithm/losss=clip
        groups = config_groups()
        if match.group(1) in groups:  # a real group this command's config does not choose (rlpost eval data/transform=)
            given = next((o for o in job if o.split("=", 1)[0] == match.group(1)), f"{match.group(1)}=<option>")
            raise ConfigError(
                f"rlpost {'train' if config_name == 'config' else config_name.replace('_', '-')} does not choose "
                f"{match.group(1)} by default; add it with "
                f"+{given}."
            )
        close = difflib.get_close_matches(match.group(1), groups, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"Unknown config group {match.group(1)!r}.{hint} Config groups: {', '.join(groups)}.")
    parsed = OverridesParser.create().parse_overrides(job)
    appended = [f"+{o.input_line}" if o.key_or_group == match.group(1) else o.input_line for o in parsed]
    try:
        build(compose(appended, config_name), appended)
    except (HydraException, OmegaConfBaseException):
        return


def hydra_message(err: Exception) -> str:
    """Hydra's error text as one clean line: no config search path, options listed inline."""
    text = str(err).split("Config search path:")[0].strip()
    missing = re.search(r"Could not (?:find|load) '([^']+)'", text)
    if missing:
        group, _, choice = missing.group(1).rpartition("/")
        options = group_options(group)
        close = difflib.get_close_matches(choice, options, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        head = text.splitlines()[0].rstrip(".")
        return f"{head}.{hint} Available options in '{group}': {', '.join(options) or '(none)'}."
    return ". ".join(line.strip().rstrip(".") for line in text.splitlines() if line.strip()) + "."


# ---- launch ----------------------------------------------------------------------------------------
# Jobs validated by this process's launch, by override list (hydra.* overrides left out, as Hydra's
# job overrides leave them out); each is taken once by the job it was validated for.
_VALIDATED: dict[tuple[str, ...], list[Job]] = {}


def job_key(overrides: list[str]) -> tuple[str, ...]:
    return tuple(o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/")))


def take_validated(cfg: Any, overrides: list[str]) -> Job | None:
    """The job validated for these overrides when its composed config is ``cfg`` (then it is removed:
    a second job with the same overrides builds its own), else None."""
    from omegaconf import OmegaConf

    jobs = _VALIDATED.get(job_key(overrides), [])
    if not jobs:
        return None
    job = jobs.pop(0)
    same = OmegaConf.to_container(job.cfg, resolve=False) == OmegaConf.to_container(cfg, resolve=False)
    return job if same else None


def launch(app: App, args: list[str]) -> int:
    """``rlpost <command> [overrides]``: validate every job, then hand over to Hydra."""
    import hydra

    multirun = "-m" in args or "--multirun" in args
    shown = sorted({"--cfg", "-c", "--info", "-i"}.intersection(args))
    if multirun and shown:  # Hydra would raise a bare ValueError
        return fail(
            f"-m and {shown[0]} cannot be combined: {shown[0]} prints one job; drop -m and give one value per key "
            f"(e.g. rlpost {app.command} --cfg job seed=0)."
        )
    _VALIDATED.clear()
    if not HYDRA_INFO_FLAGS.intersection(args):
        overrides = [a for a in args if not a.startswith("-")]
        try:
            jobs = validate(overrides, multirun, app.config_name, app.build)
            launched = app.prelaunch(jobs, overrides, multirun) if app.prelaunch else []
        except ConfigError as err:
            return fail(str(err))
        if isinstance(launched, int):  # it ran itself (train: accelerate launch of N processes)
            return launched
        args = [*args, *launched]
        for job in jobs:
            _VALIDATED.setdefault(job_key(job.overrides), []).append(job)
    elif print_redacted_job_config(args, app.config_name):  # reliability: --cfg job goes through secret redaction
        return 0
    sys.argv = [f"rlpost {app.command}", *args]
    try:
        hydra.main(config_path=str(CONF_DIR), config_name=app.config_name, version_base=None)(job_function(app))()
    finally:
        from rlpost.runs.claim import release_all

        _VALIDATED.clear()
        release_all()  # the run directory this launch claimed (prelaunch) is free again
    return 0


def job_function(app: App) -> Callable[[Any], Any]:
    """The Hydra task function of ``app``; Hydra names the job (``hydra.job.name``, ``<name>.log``) after the
    command (``train``, ``train_rm``, ``eval``)."""

    def task(cfg: Any) -> Any:
        return run_job(app, cfg)

    task.__module__ = f"rlpost.tools.{app.command.replace('-', '_')}"
    return task


def run_job(app: App, cfg: Any) -> Any:
    """One Hydra job: the validated build of this job (``take_validated``), else built here; then ``app.run``."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    try:
        validated = take_validated(cfg, overrides)
        built = validated.built if validated is not None else app.build(cfg, overrides)
        return app.run(built, cfg, hydra_cfg.runtime.output_dir, overrides)
    except ConfigError as err:
        sys.exit(fail(str(err)))


def print_redacted_job_config(args: list[str], config_name: str = "config") -> bool:
    """``rlpost <command> --cfg job [overrides]``: print the job config with secrets redacted."""
    from omegaconf import OmegaConf

    from rlpost.core.secrets import redact

    flag = "--cfg" if "--cfg" in args else "-c" if "-c" in args else None
    if flag is None or args[args.index(flag) + 1 : args.index(flag) + 2] != ["job"]:
        return False
    if {"-m", "--multirun", "--package", "-p", "--help", "-h", "--info", "-i"} & set(args):
        return False
    try:
        cfg = compose([a for a in args if not a.startswith("-") and a != "job"], config_name)
    except Exception:
        return False  # Hydra reports the error itself
    container = redact(OmegaConf.to_container(cfg, resolve="--resolve" in args))
    container.pop("hydra", None)
    print(OmegaConf.to_yaml(container), end="")
    return True


# ---- tools: the composed config -> a settings dataclass ------------------------------------------
def tool(
    command: str,
    config_name: str,
    settings: type,
    check: Callable[[Any, list[str]], Any],
    run: Callable[[Any, str, list[str]], int],
    prepare: Callable[[dict, list[str]], dict] | None = None,
    prelaunch: Callable[[list[Job], list[str], bool], list[str] | int] | None = None,
) -> App:
    """A tool's app: ``settings`` is the schema dataclass of the composed config (groups included);
    ``prepare(raw, overrides)`` edits the raw config before the schema (``run=<run dir>``); ``check``
    is the cheap validation (paths, shapes; no model loads); ``run(settings, output_dir, overrides)``;
    ``prelaunch`` as ``App.prelaunch`` (e.g. Hydra's folder moved next to the tool's output)."""
    return App(
        command,
        config_name,
        build=partial(build_settings, settings, check, prepare),
        run=partial(run_tool, run),
        prelaunch=prelaunch,
    )


def build_settings(settings: type, check: Callable, prepare: Callable | None, cfg: Any, overrides: list[str]) -> Any:
    """The composed config -> the checked settings dataclass (no ``hydra`` node); ConfigError names keys."""
    from rlpost.core.schema import build_config, composed_mapping

    raw = composed_mapping(cfg)
    if prepare is not None:
        raw = prepare(raw, overrides)
    return check(build_config(settings, raw, ""), overrides)


def run_tool(run: Callable[[Any, str, list[str]], int], settings: Any, cfg: Any, output_dir: str, overrides: list[str]):
    return run(settings, output_dir, overrides)
