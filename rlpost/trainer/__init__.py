"""RLPostTrainer(trl.GRPOTrainer): TRL glue only, one module per group of seams (DESIGN.md).

The path of one batch, numbered as docs/architecture.md numbers it (the stage of each seam, the overridden
TRL method; the code's comments and tests/trainer/test_trl_contract.py use the same numbers):

    core.py         stage 0   _get_train_sampler   a component's sampler picks the batch's prompts
    scoring.py      stage 1   _generate_and_score_completions   starts the batch state (batch.py); TRL
                              generates and scores (stages 1a-2 run inside), then stage 3 runs
    rollouts.py     stage 1a  _rollout_strategy    the algorithm/rollout strategy builds each group
    episodes.py     stage 1a' rollout_func         data/env: the environment loop produces each rollout
    rollouts.py     stage 1b  _generate_single_turn   sampling: shared prefix, KV cache, copy/peer models
    core.py         stage 1c  _generate            lengths and truncation kept
    core.py         stage 2   _calculate_rewards   the gathered reward matrix [N, R] is kept
    scoring.py      stage 3   (in stage 1's method) rlpost/pipeline.py turns rewards into advantages
    refill.py       stage 3   (in stage 1's method) DAPO's refill: more generation rounds fill dropped groups
    corrections.py  stage 3b  (in stage 1's method) behaviour vs train log-probs -> correction weights
    logprobs.py     stage 4   _get_per_token_logps_and_entropies   TRL's head or rlpost's compact one
    loss.py         stage 5   _compute_loss        loss component + regularizers + one aggregation
    loss.py         stage 6   _clip_grad_norm      the grad transform before clipping
    checkpoints.py  stage 7   _save_checkpoint     atomic checkpoints with component state

Per-batch data lives in ``trainer.batch`` (one ``GenerationBatch``), never in parked attributes.
Components are called through the members their kind's base class declares (no ``hasattr``).
tests/trainer/test_trl_contract.py pins every private TRL member these seams override or read.
"""

from rlpost.trainer.core import RLPostTrainer

__all__ = ["RLPostTrainer"]
