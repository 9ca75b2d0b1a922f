"""The errors users see, each with its exit code: bad input (2), a run that cannot continue (1),
and the exit code of a preempted run (75)."""

EXIT_PREEMPTED = (
    75  # EX_TEMPFAIL: a checkpoint was saved on SIGTERM/SIGINT; requeue and resume (rlpost/runs/preemption.py)
)


class ConfigError(ValueError):
    """Bad user input (unknown option, wrong type, impossible combination).

    Raised before any model loads; the CLI prints the message and exits with code 2.
    """

    exit_code = 2


class RunStopped(RuntimeError):
    """A run that cannot continue (disk full, its folder removed, a read-only checkpoint folder).

    The message says why in one line and names the last complete checkpoint; the CLI prints it
    without a traceback and exits with code 1. ``resume=auto`` continues from that checkpoint.
    """

    exit_code = 1
