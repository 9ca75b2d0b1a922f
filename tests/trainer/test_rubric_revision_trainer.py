"""AMARIS in the loop (seed 004 #17) through the real RLPostTrainer on the tiny random model, 3 steps: the rubric
reward's judge is an endpoint (tests/support/judges.py "keyword": Yes iff the criterion's last word is in the
response), its writer the "gated" endpoint, which answers only once the test opens the gate. The revision is
requested at step 2's boundary and is still being written while step 2 trains; a callback opens the gate at the
end of step 2 and waits for it, so it lands at step 3's boundary: the rubric the reward judges with changes
between steps 2 and 3, and the checkpoint of step 3 carries it."""

from __future__ import annotations

import json
import time

import torch
import yaml
from transformers import TrainerCallback

from rlpost.runs.state import STATE_FILE, load_component_state

from support.judges import GATE, requests_for
from support.trainer import make_run, rlpost_trainer, step_logs

OLD = "The response names a zebra"  # a random model never writes "zebra": met 0% of the time, failing
NEW = "The response states the final answer and checks it by a second method."  # the writer's reply


class OpenTheGate(TrainerCallback):
    """At the end of step 2: note the time, let the writer answer, wait for the revision (a known landing step)."""

    def __init__(self, reward):
        self.reward, self.step2_end = reward, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            self.pending_while_step2_trained = self.reward.reviser.future is not None
            self.step2_end = time.monotonic()
            GATE.set()
            self.reward.reviser.wait()


def test_a_background_revision_lands_at_a_later_step_and_travels_with_the_checkpoint(tmp_path, server):
    (tmp_path / "rubric.yaml").write_text(yaml.safe_dump({"criteria": [{"name": "zebra", "text": OLD}]}))
    judge = f"{{backend: openai, base_url: '{server}/keyword/v1', cache: false, retries: 0}}"
    writer = f"{{backend: openai, base_url: '{server}/gated/v1'}}"
    revise = f"{{enabled: true, every: 1, window: 1, cooldown: 5, retrieval: lexical, writer: {writer}}}"
    term = (f"reward.terms=[{{name: rubric, params: {{rubric: '{tmp_path / 'rubric.yaml'}', reference_column: null, "
            f"judge: {judge}, revise: {revise}}}}}]")  # fmt: skip
    run = make_run([term, "train.steps=3", "train.save_steps=3", "train.num_generations=2",
                    "train.completions_per_step=4"])  # fmt: skip
    reward = run.reward.funcs[0]
    reward.run_dir = tmp_path / "run"  # what rlpost/train.py sets on the main process
    reward.run_dir.mkdir()
    gate = OpenTheGate(reward)
    trainer = rlpost_trainer(run, tmp_path / "out", callbacks=[gate])
    trainer.train()

    # step 2 trained while the writer was still held: the revision did not block it
    assert gate.pending_while_step2_trained
    logs = step_logs(trainer)
    # requested at step 2 (step 1 closed), landed at step 3, after which the next request went out (every step; its
    # decision is keep: the edit is in its cooldown, so it asks the writer nothing)
    assert [log["amaris/pending"] for log in logs] == [0.0, 1.0, 1.0]
    assert [log["amaris/revisions"] for log in logs] == [0.0, 0.0, 1.0]
    assert [log["amaris/edits"] for log in logs] == [0.0, 0.0, 1.0]
    assert logs[2]["amaris/blocking_saved_s"] > 0  # it was written while step 2 trained
    assert len(requests_for("gated")) == 1
    # the rubric the reward judged with: the old criterion up to step 2, the revised one from step 3 (4 completions)
    judged = [(e["t"], e["prompt"].split("Criterion: ", 1)[1].split("\n")[0]) for e in requests_for("keyword")]
    assert {c for t, c in judged if t < gate.step2_end} == {OLD}
    assert [c for t, c in judged if t > gate.step2_end] == [NEW] * 4
    # the run directory: steps 1 and 2 closed, the clarification recorded at step 2 (the last step judged by OLD)
    memory = [json.loads(line) for line in (reward.run_dir / "rubric_memory.jsonl").read_text().splitlines()]
    assert [r["step"] for r in memory if r["kind"] == "step_summary"] == [1, 2]
    (edit,) = [r for r in memory if r["kind"] == "edit"]
    assert (edit["step"], edit["requested"], edit["action"], edit["old"], edit["new"]) == (2, 1, "clarify", OLD, NEW)
    assert yaml.safe_load((reward.run_dir / "rubrics" / "rubric_v1.yaml").read_text())["criteria"][0]["text"] == NEW
    # the checkpoint carries the revised rubric and the memory: a fresh run resumed from it judges with NEW
    checkpoint = tmp_path / "out" / "checkpoint-3"
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)["reward.terms.rubric"]
    assert state["version"] == 1 and state["open_step"] == 3
    fresh = make_run([term])
    assert load_component_state(fresh.named_components(), checkpoint) == ["reward.terms.rubric"]
    assert [c.text for c in fresh.reward.funcs[0].rubric_for(None)] == [NEW]
