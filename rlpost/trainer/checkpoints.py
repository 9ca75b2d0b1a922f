"""Stage 7 of RLPostTrainer (a mixin): what a checkpoint holds and how it is written.

Each checkpoint is written into ``<out>/.tmp-checkpoint-N/checkpoint-N`` (``_get_output_dir`` points
TRL's own save there), together with the state of stateful components (``rlpost/runs/state.py``), with
``num_iterations > 1`` TRL's buffered generation batch, and with ``train.staleness > 0`` the generated batches not
yet trained on (staleness.py); once every rank is done it is renamed into
place (``rlpost/runs/checkpoints.py``), so a resume never sees a half-written checkpoint.

Every ``super()`` here is GRPOTrainer's: the mixin sits between RLPostTrainer and TRL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers.trainer_utils import rotate_checkpoints

from rlpost.runs.checkpoints import (
    CheckpointWriteError,
    load_generation_buffer,
    load_stale_batches,
    save_generation_buffer,
    save_stale_batches,
)
from rlpost.runs.ranks import on_main, write_folder
from rlpost.runs.state import load_component_state, save_component_state
from rlpost.trainer.seam_base import SeamBase


class CheckpointSeams(SeamBase):
    """Mixin for ``RLPostTrainer(..., CheckpointSeams, GRPOTrainer)``; uses the trainer's ``run``."""

    _checkpoint_staging: str | None = None  # set while TRL's own save writes into the staging folder

    # reliability: written into <out>/.tmp-checkpoint-N/ then renamed, one writer per path (rlpost/runs/ranks.py)
    def _save_checkpoint(self, model, trial):
        root, step = super()._get_output_dir(trial=trial), self.state.global_step

        def write(staging: Path) -> Path:
            self._checkpoint_staging = str(staging)
            try:
                super(CheckpointSeams, self)._save_checkpoint(model, trial)  # fills <staging>/checkpoint-N
            finally:
                self._checkpoint_staging = None
            folder = staging / f"checkpoint-{step}"
            if self.args.should_save:
                save_component_state(self.run.named_components(), folder)
            save_generation_buffer(self.generation_buffer(), folder, self.accelerator.process_index)  # one per rank
            save_stale_batches(self.stale_batches_state(), folder, self.accelerator.process_index)  # train.staleness
            return folder

        try:
            write_folder(Path(root) / f"checkpoint-{step}", write)
            on_main(lambda: rotate_checkpoints(root, self.args.save_total_limit, self.state.best_model_checkpoint))
        except OSError as err:  # a full disk, a read-only folder, a vanished run directory: the last one is intact
            raise CheckpointWriteError(step, root, err) from err

    def save_last_step(self) -> Path | None:
        """A checkpoint of the last completed step when a run must stop mid-step (the failure breaker), unless
        one exists or no step has completed: its folder, or None. Collective: every rank calls it."""
        step = self.state.global_step
        folder = Path(super()._get_output_dir(trial=None)) / f"checkpoint-{step}"
        if step == 0:
            return None
        if not folder.is_dir():
            self._save_checkpoint(self.model, trial=None)
        return folder

    def _get_output_dir(self, trial):
        staging = self._checkpoint_staging
        return staging if staging is not None else super()._get_output_dir(trial=trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_component_state(self.run.named_components(), checkpoint)
            if self.num_iterations > 1:  # reliability: mid-reuse rollouts
                state = load_generation_buffer(checkpoint, self.accelerator.process_index, self.accelerator.device)
                if state is not None:
                    self.restore_generation_buffer(state)
            if self.stale_batches is not None:  # train.staleness: the batches generated, not yet trained on
                rank, device = self.accelerator.process_index, self.accelerator.device
                self.restore_stale_batches(load_stale_batches(checkpoint, rank, device), str(checkpoint))

    # TRL's private GRPOTrainer state read and written here (the micro-step counter and the buffered generation
    # batch it indexes): pinned on a real GRPOTrainer by tests/trainer/test_trl_contract.py
    TRL_STATE = ("_step", "_buffered_inputs")

    def generation_buffer(self) -> dict[str, Any] | None:
        """TRL's buffered generation batch and its micro-step counter while ``num_iterations > 1`` reuses one batch
        over several optimizer steps (``{"step", "buffer"}``), else None: what a checkpoint keeps of it."""
        if self.num_iterations <= 1 or self._buffered_inputs is None:
            return None
        return {"step": self._step, "buffer": self._buffered_inputs}

    def restore_generation_buffer(self, state: dict[str, Any]) -> None:
        """Put back what ``generation_buffer`` returned (on resume, before TRL's first step)."""
        self._step, self._buffered_inputs = state["step"], state["buffer"]
