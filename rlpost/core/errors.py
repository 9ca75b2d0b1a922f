"""The errors users see, each with its exit code: bad input (2), a run that cannot continue (1),
and the exit code of a preempted run (75); and ``error_origin``, where a user's code raised."""

import os
import sysconfig
import traceback

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


_OWN = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, sysconfig.get_paths()["stdlib"] + os.sep)


def error_origin(err: BaseException) -> str:
    """`` (at <file>:<line> in <function>)`` for the innermost frame of ``err``'s traceback that is the user's
    own code (outside rlpost, the standard library and installed packages), else ``""``: a failure inside
    rlpost or a library is named by what called it, not by a file the user never wrote."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_OWN) and "site-packages" not in path and not frame.filename.startswith("<"):
            where = os.path.relpath(path) if path.startswith(os.getcwd()) else path
            return f" (at {where}:{frame.lineno} in {frame.name})"
    return ""


def describe_error(err: BaseException) -> str:
    """``Type: message`` and, when the user's code raised it, where (``error_origin``)."""
    return f"{type(err).__name__}: {err}{error_origin(err)}"
