"""The CPU's model name and feature flags: the keys of what rlpost measures or builds once per machine."""

from __future__ import annotations

import platform
from pathlib import Path


def _cpuinfo(field: str) -> str | None:
    """The first ``field: value`` line's value in ``/proc/cpuinfo`` (Linux), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` reports)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (empty elsewhere): two VMs can share a model name and
    differ in what instructions they expose."""
    return _cpuinfo("flags") or ""
