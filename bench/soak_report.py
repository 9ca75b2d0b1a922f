"""The soak benchmark's report (bench/soak.py): per-run tables, leak verdicts, soak.md and soak.png from the
per-step records (``<out>/<run>.jsonl``) and ``machine.json``. Run through ``bench/soak.py --report <out>``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import median


def slope_per_100(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return float("nan")
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 100 * sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def summarize(name: str, label: str, rows: list[dict], warmup: int, every: int) -> dict:
    """Per-window table, verdict and leaks of one run's records (warm-up ends at step ``warmup``)."""
    steps = [r for r in rows if r["phase"] == "step"]
    begin = next(r for r in rows if r["phase"] == "train_begin")
    exit_row = next(r for r in rows if r["phase"] == "exit")
    last = steps[-1]
    warm = {r["step"]: r for r in steps}.get(warmup) or steps[min(warmup, len(steps)) - 1]
    after = [r for r in steps if r["step"] >= warm["step"]]
    table, prev = [], begin
    for r in steps:
        if r["step"] % every == 0 or r is last:
            table.append((r["step"], (r["t"] - prev["t"]) / max(r["step"] - prev["step"], 1), r))
            prev = r
    tolerance = max(32.0, 0.02 * warm["rss_mib"])
    fd_delta, thread_delta = last["fds"] - warm["fds"], last["os_threads"] - warm["os_threads"]
    py_delta = last["py_threads"] - warm["py_threads"]
    memory, leaks = [], []
    for key, what in (("rss_mib", "RSS"), ("anon_mib", "anonymous RSS")):
        if key not in warm or key not in last:
            continue  # records written before RssAnon was recorded
        growth, peak = last[key] - warm[key], max(r[key] for r in after)
        slope = slope_per_100([(r["step"], r[key]) for r in after])
        trend = slope * (last["step"] - warm["step"]) / 100  # the fitted line's rise over the window
        memory.append(
            f"{what} {warm[key]:.0f} MiB at step {warm['step']} (end of warm-up) -> {last[key]:.0f} MiB at step "
            f"{last['step']} ({growth:+.1f} MiB, {100 * growth / warm[key]:+.1f}%; least-squares slope {slope:+.1f} "
            f"MiB per 100 steps over steps {warm['step']}-{last['step']}; highest {peak:.0f} MiB; "
            f"{exit_row[key]:.0f} MiB at exit)"
        )
        if max(growth, trend) > tolerance:
            leaks.append(f"{what} grew {max(growth, trend):+.0f} MiB > {tolerance:.0f} MiB")
    if "malloc_used_mib" in warm and "malloc_used_mib" in last:
        memory.append(
            f"glibc malloc in use {warm['malloc_used_mib']:.0f} -> {last['malloc_used_mib']:.0f} MiB, held free "
            f"{warm['malloc_free_mib']:.0f} -> {last['malloc_free_mib']:.0f} MiB"
        )
    if fd_delta > 0:
        leaks.append(f"{fd_delta} fds")
    if thread_delta > 0 or py_delta > 0:
        leaks.append(f"{max(thread_delta, py_delta)} threads")
    verdict = (
        f"**{label}, {last['step']} steps: {'LEAK: ' + '; '.join(leaks) if leaks else 'no leak'}.** "
        + "; ".join(memory)
        + f"; peak RSS {last['hwm_mib']:.0f} MiB. fds {warm['fds']} -> {last['fds']} ({fd_delta:+d}; max "
        f"{max(r['fds'] for r in after)} after warm-up, {exit_row['fds']} at exit); threads (Python/OS) "
        f"{warm['py_threads']}/{warm['os_threads']} -> {last['py_threads']}/{last['os_threads']} "
        f"({py_delta:+d}/{thread_delta:+d}; {exit_row['py_threads']}/{exit_row['os_threads']} at exit). "
        f"s/step: median of the {every}-step windows {median([s for _, s, _ in table[1:]] or [0]):.2f}, "
        f"range {min(s for _, s, _ in table):.2f}-{max(s for _, s, _ in table):.2f}."
    )
    return {
        "name": name, "label": label, "table": table, "verdict": verdict, "leaks": leaks, "steps": steps,
        "warm": warm, "last": last, "exit": exit_row, "wall_s": last["t"] - begin["t"],
    }  # fmt: skip


def changed(before: list[str], after: list[str]) -> str:
    """What differs between two lists (fd targets, thread names), as '+a, -b' with counts."""
    from collections import Counter

    plus, minus = Counter(after) - Counter(before), Counter(before) - Counter(after)
    items = [f"+{k}" + (f" x{n}" if n > 1 else "") for k, n in plus.items()]
    items += [f"-{k}" + (f" x{n}" if n > 1 else "") for k, n in minus.items()]
    return ", ".join(items) or "none"


def mib(row: dict, key: str) -> str:
    return f"{row[key]:.0f}" if key in row else "-"


def markdown(summary: dict) -> str:
    lines = [
        f"#### {summary['label']}: {summary['last']['step']} steps ({summary['wall_s'] / 60:.1f} min of training)",
        "",
        "| step | s/step | RSS MiB | anon MiB | fds | threads (Python/OS) |",
        "|---|---|---|---|---|---|",
    ]
    for step, s_step, r in [*summary["table"], ("exit", None, summary["exit"])]:
        lines.append(
            f"| {step} | {'' if s_step is None else f'{s_step:.2f}'} | {mib(r, 'rss_mib')} | {mib(r, 'anon_mib')} "
            f"| {r['fds']} | {r['py_threads']}/{r['os_threads']} |"
        )
    lines += ["", summary["verdict"]]
    warm, last = summary["warm"], summary["last"]
    if "fd_targets" in warm and "fd_targets" in last:
        lines += ["", f"fd targets, warm-up -> last step: {changed(warm['fd_targets'], last['fd_targets'])}; "
                  f"thread names: {changed(warm['thread_names'], last['thread_names'])}; "
                  f"gc-tracked objects {warm['gc_objects']} -> {last['gc_objects']}."]  # fmt: skip
    return "\n".join(lines)


def plot(summaries: list[dict], path: Path, warmup: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(summaries), figsize=(6 * len(summaries), 6), squeeze=False, sharex="col")
    for col, s in enumerate(summaries):
        rows = s["steps"]
        x = [r["step"] for r in rows]
        times = [b["t"] - a["t"] for a, b in zip(rows, rows[1:])]
        axes[0][col].plot(x, [r["rss_mib"] for r in rows], label="RSS")
        if all("anon_mib" in r for r in rows):
            axes[0][col].plot(x, [r["anon_mib"] for r in rows], label="anonymous RSS")
        axes[0][col].plot(x, [r["hwm_mib"] for r in rows], "--", label="peak RSS")
        axes[0][col].set(title=s["label"], ylabel="MiB")
        axes[0][col].legend()
        axes[1][col].plot(x[1:], times, lw=0.8)
        axes[1][col].set(xlabel="optimizer step", ylabel="s/step (incl. eval, checkpoint)")
        for ax in axes[:, col]:
            ax.axvline(warmup, color="grey", lw=0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(out: Path, labels: dict[str, str], warmup: int, every: int) -> int:
    """Tables, verdicts, soak.md and soak.png from the records in ``out``."""
    summaries = []
    for name, label in labels.items():
        record = out / f"{name}.jsonl"
        if record.exists():
            summaries.append(
                summarize(name, label, [json.loads(line) for line in record.read_text().splitlines()], warmup, every)
            )
    if not summaries:
        sys.exit(f"soak: no records (tiny.jsonl, smol.jsonl) in {out}")
    meta_path = out / "machine.json"
    m = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    header = (
        f"{m.get('cpu', '?')}; {m.get('cores', '?')} usable cores; torch {m.get('torch', '?')}; {m.get('malloc', '?')}; "
        f"load average {m.get('load_start', float('nan')):.2f} at start, {m.get('load_end', float('nan')):.2f} at end; "
        f"{m.get('date', '?')}; {m.get('minutes', float('nan')):.1f} min in all"
    )
    text = "\n\n".join([header, *(markdown(s) for s in summaries)]) + "\n"
    (out / "soak.md").write_text(text)
    plot(summaries, out / "soak.png", warmup)
    print("\n" + text + f"\nplot: {out / 'soak.png'}\nmarkdown: {out / 'soak.md'}")
    return 1 if any(s["leaks"] for s in summaries) else 0
