"""The CPU's model name and feature flags: the keys of what rlpost measures or builds once per machine."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` reports)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (``/proc/cpuinfo``; empty elsewhere): two VMs can share a
    model name and differ in what instructions they expose."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
