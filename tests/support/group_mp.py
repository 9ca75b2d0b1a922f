"""Run under `torchrun --nproc_per_node 2`: one tiny-random step with majority_vote where each process holds
2 completions of a group of 4 (the group straddles the processes); writes what each rank saw to argv[1]."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support package
from support.trainer import make_run, rlpost_trainer  # noqa: E402

out = Path(sys.argv[1])
terms = "reward.terms=[{name: majority_vote, weight: 1.0, params: {answer: text}}]"
overrides = ["train.steps=1", "train.num_generations=4", "train.completions_per_step=4", "hardware.num_processes=2"]
run = make_run([*overrides, "eval.at_start=false", "eval.at_end=false", terms])
trainer = rlpost_trainer(run, out / "trainer")
trainer.train()
rank = dist.get_rank()
record = {
    "world": dist.get_world_size(),
    "local": trainer.batch.completions,
    "terms": trainer.batch.reward_terms[:, 0].tolist(),
}
(out / f"rank{rank}.json").write_text(json.dumps(record))
