"""``rlpost <command> [hydra overrides]``: subcommand dispatch onto Hydra mains.

``train`` is a full Hydra app (``-m`` multirun, ``--cfg job``, ``--help``). Before Hydra launches
anything, every job of the command line is composed and validated (``build_run``), so bad input
exits with code 2 and a one-line reason before any model loads or any run directory is made.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from rlpost.errors import ConfigError, RunStopped

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
HYDRA_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--resolve", "--package", "-p"}
USAGE = """usage: rlpost <command> [overrides]

commands:
  train   train a policy: rlpost train algorithm=dapo reward=math_answer [-m for sweeps]
  show    the composed config and a plain-language explanation of the run
  list    registered components: rlpost list [advantage|loss|regularizer|reward|combine|grad|correction|rollout]
  subspace  reference subspaces from two checkpoints: rlpost subspace --from A --to B --rank 8 --out FILE
  train-rm  a Bradley-Terry reward model from preference pairs: rlpost train-rm [model=...] [data.train=pairs.jsonl]
  merge   interpolate / task-arithmetic / TIES checkpoints, merge LoRA: rlpost merge models=[A,B] alpha=0.5 [-m]
  eval    accuracy, reward, pass@k, length on held-out data: rlpost eval run=<run dir> | model=... [samples=8]
  plot    PNG curves of runs or sweeps: rlpost plot runs=[<run or multirun dir>,...] keys=[reward,loss] smooth=5
  sweep-summary  final/best metrics per job of a multirun (terminal, CSV, markdown): rlpost sweep-summary dir=<multirun dir>
  diagnose  RL headroom before training (pass@k - pass@1, reward variance in groups): rlpost diagnose [model=...] [data=...]
  report  a self-contained HTML page of a run or a sweep: rlpost report path=<run or multirun dir> [out=FILE]
  serve   TRL's vLLM server for hardware=vllm-server rollouts: rlpost serve model=... [hardware.vllm_server_port=8000]
"""


def fail(message: str) -> int:
    print(f"rlpost: error: {message}", file=sys.stderr)
    return ConfigError.exit_code


def compose(overrides: list[str]):
    """Compose conf/config.yaml with overrides (Hydra's compose API, no run directory)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra_compose(config_name="config", overrides=overrides)


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


def validate(overrides: list[str], multirun: bool) -> None:
    """Compose and build every job; raise ConfigError with Hydra's or rlpost's message."""
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
    try:
        jobs = expand_sweep(overrides) if multirun else [overrides]
        searching = multirun and any(o.split("=", 1)[0] == "hydra/sweeper" for o in overrides)
        for job in jobs:
            try:
                run = build_and_check(job)
                if searching:
                    from rlpost.objective import check_objective

                    check_objective(run.settings.eval)
            except HydraException as err:
                unknown_key_error(err, job)  # raises rlpost's message when the schema explains it better
                raise
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(hydra_message(err)) from None
    except yaml.YAMLError as err:  # reliability: a malformed YAML file (a recipe, a config on the search path)
        raise ConfigError(yaml_message(err)) from None


def yaml_message(err) -> str:
    """A YAML parse error as one line: the file, line and column, and what the parser expected."""
    mark = getattr(err, "problem_mark", None)
    where = f"{mark.name} line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
    what = " ".join(str(part) for part in (getattr(err, "context", None), getattr(err, "problem", None)) if part)
    return f"Bad YAML in {where}: {what or err}."


def build_and_check(job: list[str]):
    from rlpost.build import build_run

    return build_run(compose(job))


def unknown_key_error(err: Exception, job: list[str]) -> None:
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
        close = difflib.get_close_matches(match.group(1), groups, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"Unknown config group {match.group(1)!r}.{hint} Config groups: {', '.join(groups)}.")
    parsed = OverridesParser.create().parse_overrides(job)
    appended = [f"+{o.input_line}" if o.key_or_group == match.group(1) else o.input_line for o in parsed]
    try:
        build_and_check(appended)
    except (HydraException, OmegaConfBaseException):
        return


def config_groups() -> list[str]:
    """Every config group (a folder of yaml files under conf/), e.g. ``algorithm/loss``."""
    return sorted(
        os.path.relpath(root, CONF_DIR)
        for root, _, files in os.walk(CONF_DIR, followlinks=True)
        if root != str(CONF_DIR) and any(f.endswith(".yaml") for f in files)
    )


def group_options(group: str) -> list[str]:
    """The choices of a config group (its yaml files under conf/; conf/recipe links to recipes/)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


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


def cmd_train(args: list[str]) -> int:
    import hydra

    multirun = "-m" in args or "--multirun" in args
    shown = {"--cfg", "-c", "--info", "-i"}.intersection(args)
    if multirun and shown:  # Hydra would raise a bare ValueError
        return fail(
            f"-m and {sorted(shown)[0]} cannot be combined: {sorted(shown)[0]} prints one job; drop -m and give one "
            "value per key (e.g. rlpost train --cfg job seed=0)."
        )
    if not HYDRA_INFO_FLAGS.intersection(args):
        try:
            validate([a for a in args if not a.startswith("-")], multirun)
            args = [*args, *launch_overrides([a for a in args if not a.startswith("-")], multirun)]  # reliability
            hardware = hardware_of(args, multirun)  # scale-out: N processes -> accelerate launch (rlpost/launch/)
        except ConfigError as err:
            return fail(str(err))
        if hardware is not None:
            from rlpost.launch.accelerate import relaunch

            return relaunch(hardware, [a for a in args if not a.startswith("-")])
    elif print_redacted_job_config(args):  # reliability: --cfg job goes through secret redaction
        return 0
    sys.argv = ["rlpost train", *args]
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)(_train_job)()
    return 0


def hardware_of(args: list[str], multirun: bool):
    """The hardware profile when this launch must re-run under accelerate launch, else None."""
    from rlpost.config import HardwareConfig
    from rlpost.launch.accelerate import should_relaunch, single_process_env
    from rlpost.launch.checks import check_multirun
    from rlpost.schema import build_config, to_container

    if multirun:
        for job in expand_sweep([a for a in args if not a.startswith("-")]):
            check_multirun(build_config(HardwareConfig, to_container(compose(job).hardware), "hardware"))
        return None
    cfg = compose([a for a in args if not a.startswith("-")])
    hardware = build_config(HardwareConfig, to_container(cfg.hardware), "hardware")
    if should_relaunch(hardware):
        return hardware
    single_process_env(hardware)  # ZeRO in one process: the env a launcher would set
    return None


def _train_job(cfg) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from rlpost.objective import objective_value
    from rlpost.sweep_resume import skip_finished_job
    from rlpost.train import train

    hydra_cfg = HydraConfig.get()
    try:
        summary = skip_finished_job(cfg, hydra_cfg) or train(
            cfg, hydra_cfg.runtime.output_dir, list(hydra_cfg.overrides.task)
        )
    except ConfigError as err:
        sys.exit(fail(str(err)))
    except RunStopped as err:  # reliability: disk full, run directory removed, read-only checkpoints
        print(f"rlpost: stopped: {err}", file=sys.stderr)
        sys.exit(RunStopped.exit_code)
    if summary.get("preempted"):  # reliability: SIGTERM/SIGINT -> checkpoint saved, distinct exit code
        from rlpost.preemption import EXIT_PREEMPTED

        print(f"rlpost: preempted by {summary['preempted']}; checkpoint {summary['checkpoint']}", file=sys.stderr)
        sys.exit(EXIT_PREEMPTED)
    before, after = summary.get("before", {}), summary.get("after", {})
    print(f"run directory: {summary['run_dir']}")
    for key in ("eval/accuracy", "eval/reward", "eval/mean_length"):
        if key in after:
            print(f"  {key:<18} {before.get(key, float('nan')):.3f} -> {after[key]:.3f}")
    print(f"  {summary['steps']} steps, {summary['seconds_per_step']:.2f} s/step")
    try:
        return objective_value(summary, cfg.eval.objective)
    except ConfigError as err:
        sys.exit(fail(str(err)))


# ---- reliability: where a train launch writes, resume, --cfg job redaction ----------------------
def launch_overrides(overrides: list[str], multirun: bool) -> list[str]:
    """Extra Hydra overrides for this launch: ``hydra.run.dir=<run>`` when ``resume=`` continues an
    earlier run directory (rlpost/checkpoints.py), ``hydra.sweep.dir=<sweep>`` when a multirun's
    ``resume=auto`` continues an earlier sweep (rlpost/sweep_resume.py). Also checks the output folder
    is writable."""
    from rlpost.checkpoints import resolve_resume
    from rlpost.rundir import check_writable
    from rlpost.sweep_resume import comparable_config, resolve_sweep_resume

    given = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    check_writable(given.get(key, "multirun" if multirun else "outputs"), key)
    if multirun:  # resume=auto: the earlier sweep; a search sweeper's jobs check their folders themselves
        if given.get("resume") != "auto" or "hydra/sweeper" in given:
            return []
        configs = [comparable_config(compose(job)) for job in expand_sweep(overrides)]
        run_dir, message = resolve_sweep_resume(configs, given.get(key))
    else:
        config = comparable_config(compose(overrides))
        run_dir, message = resolve_resume(config.get("resume"), config, given.get(key))
    if message:
        print(f"rlpost: {message}", file=sys.stderr)
    return [f"{key}={run_dir}"] if run_dir and key not in given else []


def print_redacted_job_config(args: list[str]) -> bool:
    """``rlpost train --cfg job [overrides]``: print the job config with secrets redacted."""
    from omegaconf import OmegaConf

    from rlpost.secrets import redact

    flag = "--cfg" if "--cfg" in args else "-c" if "-c" in args else None
    if flag is None or args[args.index(flag) + 1 : args.index(flag) + 2] != ["job"]:
        return False
    if {"-m", "--multirun", "--package", "-p", "--help", "-h", "--info", "-i"} & set(args):
        return False
    try:
        cfg = compose([a for a in args if not a.startswith("-") and a != "job"])
    except Exception:
        return False  # Hydra reports the error itself
    container = redact(OmegaConf.to_container(cfg, resolve="--resolve" in args))
    container.pop("hydra", None)
    print(OmegaConf.to_yaml(container), end="")
    return True


def cmd_show(args: list[str]) -> int:
    from rlpost.build import build_run
    from rlpost.secrets import redacted_yaml
    from rlpost.show import explain

    try:
        validate(args, multirun=False)
        cfg = compose(args)
        run = build_run(cfg)
    except ConfigError as err:
        return fail(str(err))
    print(redacted_yaml(cfg))  # reliability: secrets never printed
    print(explain(run))
    return 0


def cmd_list(args: list[str]) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rlpost.listing import REGISTRIES, rows

    kinds = list(REGISTRIES)
    if args and args[0] not in REGISTRIES:
        close = difflib.get_close_matches(args[0], kinds, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return fail(f"Unknown component kind {args[0]!r}.{hint} Valid kinds: {', '.join(kinds)}.")
    table = Table("kind", "name", "description", "seed")
    for row in rows(args[0] if args else None):
        table.add_row(*(escape(cell) for cell in row))  # descriptions hold brackets such as 1[s >= k]
    Console().print(table)
    return 0


def cmd_subspace(args: list[str]) -> int:
    from rlpost.grad.subspace import main as subspace_main

    return subspace_main(args)


def cmd_train_rm(args: list[str]) -> int:
    from rlpost.reward_model.train import main as train_rm_main

    return train_rm_main(args)


def tool_command(module: str) -> Callable[[list[str]], int]:
    """A tool subcommand (rlpost/tools/<module>.py), imported only when it runs."""

    def command(args: list[str]) -> int:
        import importlib

        return importlib.import_module(f"rlpost.tools.{module}").main(args)

    return command


def cmd_report(args: list[str]) -> int:
    from rlpost.report import main as report_main

    return report_main(args)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "train": cmd_train,
    "show": cmd_show,
    "list": cmd_list,
    "subspace": cmd_subspace,
    "train-rm": cmd_train_rm,
    "merge": tool_command("merge"),
    "eval": tool_command("eval"),
    "plot": tool_command("plot"),
    "sweep-summary": tool_command("sweep_summary"),
    "diagnose": tool_command("diagnose"),
    "report": cmd_report,
    "serve": tool_command("serve"),  # scale-out: rlpost/tools/serve.py
}


def main(argv: list[str] | None = None) -> int:
    from rlpost.launch.accelerate import restore_stop_signals

    restore_stop_signals()  # a process started by `rlpost train hardware.num_processes=N` (rlpost/launch/)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return fail(f"Unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}.")
    return COMMANDS[command](rest)


if __name__ == "__main__":
    sys.exit(main())
