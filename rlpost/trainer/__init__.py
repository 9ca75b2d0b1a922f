"""RLPostTrainer(trl.GRPOTrainer): TRL glue only, one module per group of seams (DESIGN.md).

The path of one batch, top to bottom (docs/architecture.md draws it):

    core.py         seam 0 _get_train_sampler   a component's sampler picks the batch's prompts
    scoring.py      seam 3 _generate_and_score_completions   starts the batch state (rlpost/trainer/batch.py),
                    TRL generates and scores (seams 1-2 run inside), then rlpost/pipeline.py turns
                    the reward matrix into advantages and the loss inputs are filled
    refill.py       (in seam 3)                  DAPO's refill: more generation rounds fill dropped groups
    core.py         seam 1 _generate             rollouts.py's strategy, lengths and truncation kept
    rollouts.py     seam 1b / 7                  rollout strategies; shared-prefix and copy/peer generation
    core.py         seam 2 _calculate_rewards    the gathered reward matrix [N, R] is kept
    corrections.py  (in seam 3)                  behaviour vs train log-probs -> correction weights
    loss.py         seam 4 _compute_loss         loss component + regularizers + one aggregation
    loss.py         seam 5 _clip_grad_norm       the grad transform before clipping
    checkpoints.py  seam 6 _save_checkpoint      atomic checkpoints with component state
    logprobs.py     seam 8 _get_per_token_logps_and_entropies   TRL's head or rlpost's compact one

Per-batch data lives in ``trainer.batch`` (one ``GenerationBatch``), never in parked attributes.
Components are called through the members their kind's base class declares (no ``hasattr``).
tests/trainer/test_trl_contract.py pins every private TRL member these seams override or read.
"""

from rlpost.trainer.core import RLPostTrainer

__all__ = ["RLPostTrainer"]
