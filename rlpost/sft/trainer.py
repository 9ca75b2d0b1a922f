"""TRL's SFTTrainer with rlpost's atomic checkpoints, as ``rlpost train``'s trainer writes them
(rlpost/trainer/checkpoints.py): each checkpoint is written into ``<out>/.tmp-checkpoint-N/checkpoint-N`` and
renamed into place once complete (rlpost/runs/ranks.py ``write_folder``), so ``resume=`` never reads half of
one; a full disk or a vanished folder stops the run with one line naming the last complete checkpoint."""

from __future__ import annotations

from pathlib import Path

from transformers.trainer_utils import rotate_checkpoints
from trl import SFTTrainer

from rlpost.runs.checkpoints import CheckpointWriteError
from rlpost.runs.ranks import on_main, write_folder


class RunSFTTrainer(SFTTrainer):
    _checkpoint_staging: str | None = None  # set while the trainer's own save writes into the staging folder

    def _save_checkpoint(self, model, trial):
        root, step = super()._get_output_dir(trial=trial), self.state.global_step

        def write(staging: Path) -> Path:
            self._checkpoint_staging = str(staging)
            try:
                super(RunSFTTrainer, self)._save_checkpoint(model, trial)  # fills <staging>/checkpoint-N
            finally:
                self._checkpoint_staging = None
            return staging / f"checkpoint-{step}"

        try:
            write_folder(Path(root) / f"checkpoint-{step}", write)
            on_main(lambda: rotate_checkpoints(root, self.args.save_total_limit, self.state.best_model_checkpoint))
        except OSError as err:  # the last complete checkpoint is left as it was
            raise CheckpointWriteError(step, root, err) from err

    def _get_output_dir(self, trial):
        staging = self._checkpoint_staging
        return staging if staging is not None else super()._get_output_dir(trial=trial)
