"""Seam 6 of RLPostTrainer (a mixin): what a checkpoint holds and how it is written.

Each checkpoint is written into ``<out>/.tmp-checkpoint-N/checkpoint-N`` (``_get_output_dir`` points
TRL's own save there), together with the state of stateful components (``rlpost/state.py``) and, with
``num_iterations > 1``, TRL's buffered generation batch; once every rank is done it is renamed into
place (``rlpost/checkpoints.py``), so a resume never sees a half-written checkpoint.

Every ``super()`` here is GRPOTrainer's: the mixin sits between RLPostTrainer and TRL.
"""

from __future__ import annotations

from transformers.trainer_utils import rotate_checkpoints

from rlpost.checkpoints import (
    CheckpointWriteError,
    load_generation_buffer,
    publish,
    save_generation_buffer,
    staging_root,
    staging_root_path,
)
from rlpost.state import load_component_state, save_component_state


class CheckpointSeams:
    """Mixin for ``RLPostTrainer(..., CheckpointSeams, GRPOTrainer)``; uses the trainer's ``run``."""

    # reliability: written into <out>/.tmp-checkpoint-N/ then renamed (rlpost/checkpoints.py)
    def _save_checkpoint(self, model, trial):
        root, step = super()._get_output_dir(trial=trial), self.state.global_step
        if self.accelerator.is_main_process:
            staging_root(root, step)  # fresh, a stale one from a killed save removed
        self.accelerator.wait_for_everyone()
        self._checkpoint_staging = staging_root_path(root, step)
        try:
            super()._save_checkpoint(model, trial)  # writes <staging>/checkpoint-N (via _get_output_dir)
            if self.args.should_save:
                save_component_state(self.run.named_components(), f"{self._checkpoint_staging}/checkpoint-{step}")
            save_generation_buffer(self, f"{self._checkpoint_staging}/checkpoint-{step}")
        except OSError as err:  # a full disk, a quota, a vanished mount: say so, the last checkpoint is intact
            raise CheckpointWriteError(step, root, err) from err
        finally:
            staging, self._checkpoint_staging = self._checkpoint_staging, None
        self.accelerator.wait_for_everyone()  # every rank's RNG file is in before the rename
        if self.args.should_save:
            publish(staging, root, step)
            rotate_checkpoints(root, self.args.save_total_limit, self.state.best_model_checkpoint)

    def _get_output_dir(self, trial):
        staging = getattr(self, "_checkpoint_staging", None)
        return staging if staging is not None else super()._get_output_dir(trial=trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_component_state(self.run.named_components(), checkpoint)
            load_generation_buffer(self, checkpoint)  # reliability: mid-reuse rollouts (num_iterations > 1)
