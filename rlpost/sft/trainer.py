"""TRL's SFTTrainer with rlpost's atomic checkpoints, as ``rlpost train``'s trainer writes them
(rlpost/trainer/checkpoints.py): each checkpoint is written into ``<out>/.tmp-checkpoint-N/checkpoint-N`` and
renamed into place once complete (rlpost/runs/ranks.py ``write_folder``), so ``resume=`` never reads half of
one; a full disk or a vanished folder stops the run with one line naming the last complete checkpoint.

A resumed run also continues TRL's cumulative ``num_tokens`` (SFTTrainer counts it in ``_total_train_tokens``, which
its checkpoint does not hold): it starts from the last value the checkpoint's ``trainer_state.json`` logged, so the
curve against tokens (``rlpost compare x_axis=tokens``) is the same as without the interruption."""

from __future__ import annotations

import json
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

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if isinstance(resume_from_checkpoint, str):
            self._total_train_tokens = logged_tokens(Path(resume_from_checkpoint))
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _get_output_dir(self, trial):
        staging = self._checkpoint_staging
        return staging if staging is not None else super()._get_output_dir(trial=trial)


def logged_tokens(checkpoint: Path) -> int:
    """The last ``num_tokens`` a checkpoint's trainer state logged (0 when none)."""
    history = json.loads((checkpoint / "trainer_state.json").read_text()).get("log_history", [])
    return int(next((row["num_tokens"] for row in reversed(history) if "num_tokens" in row), 0))
