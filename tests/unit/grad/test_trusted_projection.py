"""trusted_projection / direction_monitor / `rlpost subspace` (seed 004 #10): hand-worked math, then real steps."""

import math

import pytest
import torch
from safetensors.torch import save_file
from transformers import TrainerCallback

from rlpost.core.config import HardwareConfig
from rlpost.core.errors import ConfigError
from rlpost.grad.direction_monitor import DirectionMonitor
from rlpost.grad.subspace import (
    build_subspace,
    canonical_name,
    directional_change,
    load_subspace,
    parameter_deltas,
    project,
    save_subspace,
    select_rank,
    top_singular,
    tracked_top_singular,
)
from rlpost.grad.trusted_projection import TrustedProjection, check_compatible

from support.trainer import make_run, step_logs, train_rlpost

U1 = torch.tensor([0.6, 0.8, 0.0])  # unit vector in R^3
V1 = torch.tensor([1.0, 0.0])  # unit vector in R^2
G = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


def rank1_file(tmp_path, name="w"):
    """A subspace file whose only matrix has ΔW = 2 u v^T (rank 1)."""
    path = tmp_path / "sub.pt"
    save_subspace(build_subspace({name: 2.0 * torch.outer(U1, V1)}, rank=2), path)
    return str(path)


def param(value: torch.Tensor, grad: torch.Tensor) -> torch.nn.Parameter:
    p = torch.nn.Parameter(value.clone())
    p.grad = grad.clone()
    return p


def test_rank1_update_gives_one_direction_and_exact_projections(tmp_path):
    sub = build_subspace({"w": 2.0 * torch.outer(U1, V1)}, rank=2)["w"]
    assert sub["U"].shape == (3, 1) and sub["V"].shape == (2, 1), "the zero singular direction is dropped"
    assert sub["S"].tolist() == pytest.approx([2.0]) and float(sub["energy"]) == pytest.approx(4.0)
    u, v = sub["U"], sub["V"]
    # u^T G = 0.6*[1, 2] + 0.8*[3, 4] = [3.0, 4.4]; u^T G v = 3.0
    assert project(G, u, v, "left") == pytest.approx(torch.tensor([[1.8, 2.64], [2.4, 3.52], [0.0, 0.0]]), abs=1e-6)
    assert project(G, u, v, "right") == pytest.approx(torch.tensor([[1.0, 0.0], [3.0, 0.0], [5.0, 0.0]]), abs=1e-6)
    assert project(G, u, v, "both") == pytest.approx(torch.tensor([[1.8, 0.0], [2.4, 0.0], [0.0, 0.0]]), abs=1e-6)
    along, across = torch.outer(U1, torch.tensor([2.0, -1.0])), torch.outer(torch.tensor([0.8, -0.6, 0.0]), V1)
    assert project(along, u, v, "left") == pytest.approx(along, abs=1e-6)  # the component along u is kept
    assert project(across, u, v, "left") == pytest.approx(torch.zeros(3, 2), abs=1e-6)  # orthogonal: removed
    # The component through the registry path: p.grad changes in place, metrics report the kept norm.
    transform = TrustedProjection(TrustedProjection.Config(source="file", path=rank1_file(tmp_path), side="both"))
    p = param(torch.zeros(3, 2), G)
    metrics = transform([("w", p)], step=0)
    assert p.grad == pytest.approx(torch.tensor([[1.8, 0.0], [2.4, 0.0], [0.0, 0.0]]), abs=1e-6)
    assert metrics["projection/active"] == 1.0 and metrics["projection/rank_mean"] == 1.0
    assert metrics["projection/kept_norm_ratio"] == pytest.approx(3.0 / math.sqrt(91.0), rel=1e-5)
    low = param(torch.zeros(3, 2, dtype=torch.bfloat16), G.bfloat16())  # bf16 grads: computed in fp32, cast back
    transform([("w", low)], 1)
    assert low.grad.dtype == torch.bfloat16 and low.grad.float() == pytest.approx(p.grad, abs=2e-2)


@pytest.mark.parametrize("side", ["left", "right", "both"])
def test_projector_is_idempotent_and_strength_interpolates(side):
    gen = torch.Generator().manual_seed(0)
    delta = torch.randn(6, 4, generator=gen) @ torch.randn(4, 5, generator=gen)  # rank 4
    sub = build_subspace({"w": delta}, rank=3)["w"]
    g = torch.randn(6, 5, generator=gen)
    once = project(g, sub["U"], sub["V"], side)
    assert project(once, sub["U"], sub["V"], side) == pytest.approx(once, abs=1e-5)
    assert once.norm() < g.norm()
    cfg = TrustedProjection.Config(source="warmup", warmup_steps=1, side=side, strength=0.5, svd="full", rank=3)
    transform, p = TrustedProjection(cfg), param(torch.zeros(6, 5), g)
    transform([("w", p)], 0)  # snapshot
    p.data += delta
    transform([("w", p)], 1)  # builds from ΔW = delta and projects halfway
    assert p.grad == pytest.approx(g + 0.5 * (once - g), abs=1e-5)


def test_energy_fraction_picks_the_smallest_rank():
    s, total = torch.tensor([3.0, 2.0, 1.0]), 14.0  # energies 9, 4, 1
    assert [select_rank(s, total, 8, e) for e in (0.6, 0.9, 1.0, None)] == [1, 2, 3, 3]
    assert select_rank(s, total, 2, 1.0) == 2  # rank stays the cap


def test_lowrank_svd_matches_full_and_leaves_the_global_rng_alone():
    gen = torch.Generator().manual_seed(1)
    q, _ = torch.linalg.qr(torch.randn(300, 5, generator=gen))
    r, _ = torch.linalg.qr(torch.randn(200, 5, generator=gen))
    x = q @ torch.diag(torch.tensor([50.0, 40.0, 30.0, 20.0, 10.0])) @ r.T + 1e-3 * torch.randn(300, 200, generator=gen)
    before = torch.get_rng_state()
    u, s, v = top_singular(x, 5, "lowrank", niter=2)
    assert torch.equal(torch.get_rng_state(), before)
    uf, sf, vf = top_singular(x, 5, "full")
    assert s == pytest.approx(sf, rel=1e-4)
    assert directional_change(uf, u) == pytest.approx(0.0, abs=1e-6)
    assert directional_change(vf, v) == pytest.approx(0.0, abs=1e-6)
    again = top_singular(x, 5, "lowrank", niter=2)[0]
    assert torch.equal(again, u), "the randomized SVD is deterministic (same subspace on every DDP rank)"
    # Warm start (direction_monitor, update=cumulative): one iteration from the last basis on a moved matrix.
    _, _, _, basis = tracked_top_singular(x, 5, "lowrank", 2)
    moved = x + 0.5 * torch.outer(q[:, 0] + q[:, 4], r[:, 1])
    uw, sw, vw, _ = tracked_top_singular(moved, 5, "lowrank", 2, start=basis)
    um, sm, vm = top_singular(moved, 5, "full")
    assert sw == pytest.approx(sm, rel=1e-4) and directional_change(um, uw) == pytest.approx(0.0, abs=1e-5)


def test_vectors_pass_or_zero_and_excluded_matrices_are_untouched(tmp_path):
    path = tmp_path / "sub.pt"
    save_subspace(build_subspace({"model.layers.0.q.weight": torch.outer(U1, V1)}, rank=1), path)
    for vectors, expected_bias in (("pass", torch.ones(3)), ("zero", torch.zeros(3))):
        transform = TrustedProjection(TrustedProjection.Config(source="file", path=str(path), vectors=vectors))
        w, b, emb = (
            param(torch.zeros(3, 2), G),
            param(torch.zeros(3), torch.ones(3)),
            param(torch.zeros(4, 2), G[:2].repeat(2, 1)),
        )
        named = [("model.layers.0.q.weight", w), ("model.layers.0.norm.weight", b), ("model.embed_tokens.weight", emb)]
        transform(named, 0)
        assert torch.equal(b.grad, expected_bias)
        assert torch.equal(emb.grad, G[:2].repeat(2, 1)), "exclude=embed_tokens|lm_head: untouched"
        assert not torch.equal(w.grad, G)


def test_warmup_builds_from_the_first_k_steps_and_state_round_trips(tmp_path):
    cfg = TrustedProjection.Config(source="warmup", warmup_steps=2, side="left", rank=1)
    transform, p = TrustedProjection(cfg), param(torch.zeros(3, 2), G)
    assert transform([("w", p)], 0) == {"projection/active": 0.0} and torch.equal(p.grad, G)
    p.data += torch.outer(U1, V1)
    # Mid-warmup state (the snapshot) survives a save/load through torch.load(weights_only=True).
    torch.save(transform.state_dict(), tmp_path / "state.pt")
    resumed = TrustedProjection(cfg)
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    for t in (transform, resumed):
        assert t([("w", q := param(p.data, G))], 1) == {"projection/active": 0.0} and torch.equal(q.grad, G)
    p.data += 2.0 * torch.outer(U1, V1)  # ΔW over steps 0..2 = 3 u v^T
    for t in (transform, resumed):
        q = param(p.data, G)
        assert t([("w", q)], 2)["projection/active"] == 1.0
        assert q.grad == pytest.approx(torch.tensor([[1.8, 2.64], [2.4, 3.52], [0.0, 0.0]]), abs=1e-6)
    torch.save(transform.state_dict(), tmp_path / "state.pt")
    restored = TrustedProjection(cfg)
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert restored.reference.start is None, "the snapshot is dropped once the subspace exists"
    q = param(p.data, G)
    restored([("w", q)], 3)
    assert q.grad == pytest.approx(torch.tensor([[1.8, 2.64], [2.4, 3.52], [0.0, 0.0]]), abs=1e-6)


def test_a_matrix_the_reference_never_moved_gets_a_zero_gradient_and_a_warning():
    transform = TrustedProjection(TrustedProjection.Config(source="warmup", warmup_steps=1))
    p = param(torch.zeros(3, 2), G)
    transform([("lora_A.weight", p)], 0)
    with pytest.warns(UserWarning, match="warmup_steps >= 2"):
        metrics = transform([("lora_A.weight", p)], 1)
    assert torch.equal(p.grad, torch.zeros(3, 2)) and metrics["projection/rank_mean"] == 0.0


def test_direction_monitor_is_0_inside_1_orthogonal_and_never_changes_grads(tmp_path):
    cfg = DirectionMonitor.Config(source="file", path=rank1_file(tmp_path), update="grad", rank=1)
    monitor = DirectionMonitor(cfg)
    inside = param(torch.zeros(3, 2), 5.0 * torch.outer(U1, V1))
    m = monitor([("w", inside)], 0)
    assert m["direction/change_mean"] == pytest.approx(0.0, abs=1e-6)
    assert m["direction/outside_energy_mean"] == pytest.approx(0.0, abs=1e-6)
    ortho_grad = torch.outer(torch.tensor([0.8, -0.6, 0.0]), torch.tensor([0.0, 1.0]))
    ortho = param(torch.zeros(3, 2), ortho_grad)
    m = monitor([("w", ortho)], 1)
    assert m["direction/change_mean"] == pytest.approx(1.0, abs=1e-6) and m["direction/change_max"] == pytest.approx(
        1.0
    )
    assert m["direction/outside_energy_mean"] == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(ortho.grad, ortho_grad) and torch.equal(ortho.data, torch.zeros(3, 2))
    # Half the column direction: u_cur = (u + w)/sqrt2 -> cos^2 = 1/2 on the left, v identical on the right.
    half = param(torch.zeros(3, 2), torch.outer(U1 + torch.tensor([0.8, -0.6, 0.0]), V1))
    sides = {
        s: DirectionMonitor(DirectionMonitor.Config(**{**cfg.__dict__, "side": s})) for s in ("left", "right", "both")
    }
    assert {s: mon([("w", half)], 0)["direction/change_mean"] for s, mon in sides.items()} == pytest.approx(
        {"left": 0.5, "right": 0.0, "both": 0.25}, abs=1e-6
    )


def test_subspace_from_two_checkpoints_and_the_cli(tmp_path, capsys):
    from rlpost.cli import main

    gen = torch.Generator().manual_seed(0)
    start = {"model.layers.0.q_proj.weight": torch.randn(8, 6, generator=gen), "model.norm.weight": torch.ones(6)}
    end = {k: v.clone() for k, v in start.items()}
    end["model.layers.0.q_proj.weight"] += 0.5 * torch.outer(
        torch.randn(8, generator=gen), torch.randn(6, generator=gen)
    )
    end["model.norm.weight"] += 1.0
    for folder, tensors in (("a", start), ("b", end)):
        (tmp_path / folder).mkdir()
        save_file(tensors, str(tmp_path / folder / "model.safetensors"))
    deltas = parameter_deltas(tmp_path / "a", tmp_path / "b")
    assert list(deltas) == ["model.layers.0.q_proj.weight"], "only 2-D weights"
    out = tmp_path / "sub.pt"
    assert (
        main(["subspace", "--from", str(tmp_path / "a"), "--to", str(tmp_path / "b"), "--rank", "4", "--out", str(out)])
        == 0
    )
    assert "1 matrices" in capsys.readouterr().out
    saved = torch.load(out, weights_only=True)  # plain tensors and strings only
    basis = saved["matrices"]["model.layers.0.q_proj.weight"]
    assert basis["U"].shape == (8, 1) and basis["V"].shape == (6, 1)  # a rank-1 change keeps one direction
    assert load_subspace(out).keys() == saved["matrices"].keys()
    assert main(["subspace", "--from", str(tmp_path / "nope"), "--to", str(tmp_path / "b"), "--out", str(out)]) == 2
    assert "no model.safetensors" in capsys.readouterr().err


def test_lora_adapter_names_are_canonical():
    live = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    assert canonical_name(live) == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert canonical_name("module." + live) == canonical_name(live)
    assert canonical_name("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"


def test_refusals_zero_hardware_missing_matrix_no_gradients_bad_config(tmp_path):
    for name in ("zero2", "zero3", "zero3-offload"):
        with pytest.raises(ConfigError, match="ZeRO"):
            check_compatible(HardwareConfig(name=name))
    check_compatible(HardwareConfig(name="cpu"))
    with pytest.raises(ConfigError, match="algorithm/grad=direction_monitor"):
        DirectionMonitor(DirectionMonitor.Config()).check_compatible(HardwareConfig(name="zero2"))
    transform = TrustedProjection(TrustedProjection.Config(source="file", path=rank1_file(tmp_path, name="other")))
    with pytest.raises(ConfigError, match="has no matrix for parameter w"):
        transform([("w", param(torch.zeros(3, 2), G))], 0)
    with pytest.raises(ConfigError, match="no selected 2-D trainable parameter has a gradient"):
        TrustedProjection(TrustedProjection.Config())([("model.embed_tokens.weight", param(torch.zeros(3, 2), G))], 0)
    with pytest.raises(ConfigError, match="source=file needs path"):
        make_run(["algorithm/grad=[trusted_projection]", "algorithm.grad.trusted_projection.source=file"])
    with pytest.raises(ConfigError, match="Invalid value algorithm.grad.direction_monitor.side"):
        make_run(["algorithm/grad=[direction_monitor]", "algorithm.grad.direction_monitor.side=up"])


class GradCapture(TrainerCallback):
    """Records the gradients the optimizer is about to apply (after the transform and clipping)."""

    def __init__(self):
        self.grads: list[dict[str, torch.Tensor]] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        self.grads.append(grads)


def metric(trainer, key: str) -> list[float]:
    return [log.get(key) for log in step_logs(trainer)]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_real_steps_apply_gradients_inside_the_subspace(lora, tmp_path):
    warmup = 2 if lora else 1  # LoRA: lora_A gets no gradient at step 0 (B = 0), so ΔA needs 2 steps
    overrides = ["algorithm/grad=[trusted_projection]", f"algorithm.grad.trusted_projection.warmup_steps={warmup}"]
    overrides += ["train.steps=3"]
    overrides += ["model.lora.enabled=true", "model.lora.r=4", "train.save_steps=1"] if lora else ["train.save_steps=3"]
    capture = GradCapture()
    trainer = train_rlpost(make_run(overrides), tmp_path, callbacks=[capture])
    [(_, transform)] = trainer.run.algorithm.grad
    assert metric(trainer, "grad/projection/active") == [0.0] * warmup + [1.0] * (3 - warmup)
    kept = metric(trainer, "grad/projection/kept_norm_ratio")[warmup:]
    assert all(0.0 < k < 0.999 for k in kept), kept  # the raw gradient was not already in the subspace
    subspace = transform.reference.subspace
    names = dict(
        transform.reference.select([(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad])[0]
    )
    assert set(subspace) == set(names) and names
    if lora:
        assert all(".lora_A." in n or ".lora_B." in n for n in names)
    else:
        assert "model.embed_tokens.weight" not in names and "model.layers.0.mlp.down_proj.weight" in names
    live = {canonical_name(n): n for n, _ in trainer.model.named_parameters()}
    for step, grads in enumerate(capture.grads[warmup:], start=warmup):
        for name in names:
            g = grads[live[name]]
            u, v = subspace[name]["U"], subspace[name]["V"]
            assert project(g, u, v, "both") == pytest.approx(g, abs=1e-6 * max(1.0, float(g.abs().max()))), (step, name)
    # The subspace travels in the checkpoint and loads into a fresh component.
    state = torch.load(tmp_path / "checkpoint-3" / "rlpost_state.pt", weights_only=True)[
        "algorithm.grad.trusted_projection"
    ]
    fresh = TrustedProjection(transform.cfg)
    fresh.load_state_dict(state)
    assert all(torch.equal(fresh.reference.subspace[n]["U"], subspace[n]["U"]) for n in names)
    # `rlpost subspace` on the run's real checkpoints (base model folder -> checkpoint for full FT, two adapter
    # checkpoints for LoRA) gives a file whose names match the live parameters.
    from rlpost.cli import main
    from rlpost.models.loading import tiny_random_folder

    start = tmp_path / "checkpoint-2" if lora else tiny_random_folder(trainer.run.model)
    out = tmp_path / "ref.pt"
    assert main(["subspace", "--from", str(start), "--to", str(tmp_path / "checkpoint-3"), "--out", str(out)]) == 0
    from_file = TrustedProjection(TrustedProjection.Config(source="file", path=str(out)))
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    for _, p in named:
        p.grad = torch.randn_like(p)
    assert from_file(named, 0)["projection/active"] == 1.0
    assert set(from_file.reference.subspace) >= set(names)


def test_real_steps_log_the_direction_monitor(tmp_path):
    overrides = [
        "algorithm/grad=[direction_monitor]",
        "algorithm.grad.direction_monitor.warmup_steps=1",
        "train.steps=3",
    ]
    trainer = train_rlpost(make_run(overrides), tmp_path)
    change = metric(trainer, "grad/direction/change_mean")
    assert change[0] is None, "nothing is logged before the reference exists"
    assert change[1] == pytest.approx(0.0, abs=1e-4), "at step K the cumulative update is the reference"
    assert 0.0 < change[2] <= 1.0 and metric(trainer, "grad/direction/change_max")[2] >= change[2]
    assert metric(trainer, "grad/direction/matrices")[2] == 14.0  # 2 layers x 7 matrices (embeddings excluded)


def test_projection_and_monitor_run_together_in_the_order_listed(tmp_path):
    # Both build their reference from W[1] - W[0] (rank 8). The monitor measures this step's gradient
    # (update=grad) after the projection: U U^T G V V^T has rank <= 8 and its singular directions lie inside
    # span(U) and span(V), so its directional change against the same subspace is 0. Alone, the monitor
    # sees the raw gradient, which points partly outside (change > 0).
    common = [
        "train.steps=3",
        "algorithm.grad.direction_monitor.warmup_steps=1",
        "algorithm.grad.direction_monitor.update=grad",
    ]
    both = ["algorithm/grad=[trusted_projection,direction_monitor]", "algorithm.grad.trusted_projection.warmup_steps=1"]
    run = make_run([*both, *common])
    assert [name for name, _ in run.algorithm.grad] == ["trusted_projection", "direction_monitor"]
    together = train_rlpost(run, tmp_path / "both")
    assert metric(together, "grad/projection/active") == [0.0, 1.0, 1.0]
    assert metric(together, "grad/direction/change_mean")[2] == pytest.approx(0.0, abs=1e-4)
    alone = train_rlpost(make_run(["algorithm/grad=[direction_monitor]", *common]), tmp_path / "alone")
    assert metric(alone, "grad/direction/change_mean")[2] > 0.01
