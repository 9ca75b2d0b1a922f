"""One writer per path: who writes what when a run has several processes (ranks).

The rule, for every file or folder a run writes (the run directory, its checkpoints, the sweep folder):

1. **A shared path has one writer, the main process** (global rank 0): config.yaml, overrides.yaml,
   metrics.jsonl, samples.jsonl, events.jsonl, summary.json, eval_before.json, deepspeed.json,
   plots/*.png, rollouts/meta.json, checkpoints/final, a checkpoint's weights, optimizer, trainer
   state and rlpost_state.pt, sweep_summary.* and plots/sweep.png. The other ranks skip the write.
2. **A per-rank path carries the rank in its name**: rollouts/step-N-rankR.parquet, a checkpoint's
   rng_state_R.pth, R-rlpost_generation_buffer.pt and R-rlpost_stale_batches.pt. Each rank writes only its own.
3. **A write whose data is spread over ranks** (a ZeRO-3 model save gathers the shards) is called
   on every rank; the library writes the files on the main process only (rule 1 still holds).
4. **Nothing is renamed or deleted while another rank may write into it or read it**: all ranks meet
   at a barrier, the main process renames or deletes, and a second barrier follows before any rank
   reads the result. ``write_folder`` does exactly this for a folder written by all ranks.
5. **A failed write fails on every rank**: ``all_ok`` agrees on the outcome, so one rank's full disk
   does not leave the others waiting at the next barrier.

Ranks are read from ``torch.distributed`` once it is initialized, else from ``RANK`` (set by
torchrun / accelerate launch before any import), so the rule holds before the process group exists.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path


def _group():
    """The default process group when several processes run, else None."""
    if "torch" not in sys.modules:  # no process group without torch; tools that never load it stay fast
        return None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def rank() -> int:
    """This process's global rank (0 in a single-process run)."""
    dist = _group()
    return dist.get_rank() if dist is not None else int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """The one writer of every shared path (rule 1)."""
    return rank() == 0


def barrier() -> None:
    """Every rank waits here for the others (a no-op in one process)."""
    dist = _group()
    if dist is not None:
        dist.barrier()


def all_ok(ok: bool) -> bool:
    """True on every rank iff ``ok`` on every rank (a MIN all-reduce; ``ok`` itself in one process)."""
    dist = _group()
    if dist is None:
        return ok
    import torch

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([1.0 if ok else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def on_main(action: Callable[[], object]) -> None:
    """Run ``action()`` on the main process while the other ranks wait; an ``OSError`` it raises is
    raised on every rank (rule 5). The call is a barrier: no rank returns before the action is done."""
    error: OSError | None = None
    if is_main():
        try:
            action()
        except OSError as err:
            error = err
    if not all_ok(error is None):
        raise error or OSError("the main process could not write (its own message says why)")


def remove(path: Path) -> None:
    """Delete a file or folder on the main process, with every rank past a barrier before and after."""
    barrier()
    on_main(lambda: _delete(Path(path)))


def write_folder(final: Path, write: Callable[[Path], Path | None]) -> Path:
    """Write the folder ``final`` with every rank taking part, then move it into place.

    ``write(staging)`` runs on every rank (rule 3) with ``staging = .tmp-<name>`` beside ``final``
    and returns the folder it filled (``staging`` itself when it returns None; TRL's checkpoint
    save fills ``staging/checkpoint-N``). The main process then renames that folder to ``final``,
    replacing an older one, so a kill never leaves half a folder under the final name. An
    ``OSError`` on any rank (disk full, read-only folder) is raised on every rank after the staging
    folder is removed; an existing ``final`` is then left as it was.
    """
    final = Path(final)
    staging, old = final.with_name(f".tmp-{final.name}"), final.with_name(f".tmp-old-{final.name}")

    def clear_stale() -> None:  # nobody writes into a stale staging folder
        for path in (staging, old):
            _delete(path)

    on_main(clear_stale)
    error: OSError | None = None
    try:
        written = Path(write(staging) or staging)
    except OSError as err:
        error = err
    if not all_ok(error is None):  # every rank is done writing (or failed) past this line
        if is_main():
            _delete(staging)
        raise error or OSError(f"another process could not write {final} (its own message says why)")

    def move_into_place() -> None:
        if final.exists():
            os.rename(final, old)
        os.rename(written, final)
        _delete(staging)
        _delete(old)

    on_main(move_into_place)  # final is in place before any rank goes on
    return final


def _delete(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
