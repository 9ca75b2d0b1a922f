"""SIGTERM / SIGINT (SLURM preemption, Ctrl-C): finish the step, save a checkpoint, exit with 75.

The handler only records the signal; at the end of the optimizer step in progress the callback
asks the trainer to save a checkpoint (even with ``train.save_steps=0``) and stop. ``rlpost
train`` then exits with ``EXIT_PREEMPTED`` = 75 (``EX_TEMPFAIL``: try again later) and
``resume=auto`` continues from that checkpoint. A second SIGINT stops at once (KeyboardInterrupt).
Choices: the step in progress is completed rather than abandoned (a checkpoint mid-step would
not be resumable), so give the job a grace period longer than one step (SLURM:
``--signal=TERM@120`` or ``KillWait``); with several processes the flag is max-reduced over
ranks every step so that all ranks stop after the same step.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import torch
from transformers import TrainerCallback

from rlpost.core.errors import EXIT_PREEMPTED

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class PreemptionCallback(TrainerCallback):
    """Turns a received SIGTERM/SIGINT into save-and-stop at the end of the current step."""

    def __init__(self):
        self.received: str | None = None  # signal name once one arrived
        self._previous: dict[int, Any] = {}  # the handlers signal.signal returned

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        self.received = signal.Signals(signum).name
        print(
            f"rlpost: {self.received} received; saving a checkpoint after this step, then exiting "
            f"with code {EXIT_PREEMPTED}",
            file=sys.stderr,
            flush=True,
        )

    def on_step_end(self, args, state, control, **kwargs):
        if self._any_rank_signalled(args):
            control.should_save = True
            control.should_training_stop = True
        return control

    def _any_rank_signalled(self, args) -> bool:
        flag = self.received is not None
        if args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            device = args.device if torch.distributed.get_backend() == "nccl" else "cpu"
            t = torch.tensor([float(flag)], device=device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            flag = bool(t.item())
            if flag and self.received is None:
                self.received = "SIGTERM (another rank)"
        return flag
