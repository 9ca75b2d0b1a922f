"""rlpost's compact log-prob head (rlpost/logprobs/head.py, train.logprob_head): hand-computed values, gradients
equal to plain autograd, and the same numbers as TRL's fused head inside the trainer."""

from __future__ import annotations

import pytest
import torch

from rlpost.logprobs.head import CompletionLogProbs, completion_logprobs

from support.trainer import make_run, rlpost_trainer


def test_hand_computed_logprobs_entropy_and_weight_gradient():
    # h = [[1, 0], [0, 2]], W = [[1, 0], [0, 1], [1, 1]] -> z = h W^T = [[1, 0, 1], [0, 2, 2]], targets [0, 2]
    # log p_0 = 1 - log(2e + 1) = -0.861995;  log p_1 = 2 - log(1 + 2e^2) = -0.758624
    # p_0 = [e, 1, e] / (2e + 1) = [0.422319, 0.155362, 0.422319];  H_0 = -sum p log p = 1.017357
    # p_1 = [1, e^2, e^2] / (1 + 2e^2) = [0.063379, 0.468311, 0.468311];  H_1 = 0.885382
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    logps, entropy = CompletionLogProbs.apply(h, w, torch.tensor([0, 2]), 1.0, 1, True, False, False)
    assert logps.tolist() == pytest.approx([-0.861995, -0.758624], abs=1e-6)
    assert entropy.tolist() == pytest.approx([1.017357, 0.885382], abs=1e-6)
    logps.sum().backward()
    # d sum log p / dW = (onehot - p)^T h: row v = (1[v=t_0] - p_0v) h_0 + (1[v=t_1] - p_1v) h_1
    #   v=0: [1 - 0.422319, 2 * -0.063379] = [0.577681, -0.126758]
    #   v=1: [-0.155362, 2 * -0.468311]     = [-0.155362, -0.936621]
    #   v=2: [-0.422319, 2 * (1 - 0.468311)] = [-0.422319, 1.063379]
    expected = [[0.577681, -0.126758], [-0.155362, -0.936621], [-0.422319, 1.063379]]
    assert w.grad.tolist() == [pytest.approx(row, abs=1e-6) for row in expected]


@pytest.mark.parametrize("chunk", [2, 8])  # chunks of 2 + 2 + 1 (recomputed in the backward), or one kept chunk
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gradients_equal_plain_autograd(temperature, chunk):
    torch.manual_seed(0)
    hidden = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 6, 3, 3, 1])
    g_logp, g_ent = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)

    log_p = torch.log_softmax(hidden @ weight.t() / temperature, dim=-1)  # the reference: full logits
    ref_logps = log_p.gather(1, targets[:, None]).squeeze(1)
    ref_entropy = -(log_p.exp() * log_p).sum(-1)
    ref = torch.autograd.grad((ref_logps * g_logp).sum() + (ref_entropy * g_ent).sum(), (hidden, weight))

    logps, entropy = CompletionLogProbs.apply(hidden, weight, targets, temperature, chunk, True, False, False)
    loss = (logps * g_logp).sum() + (entropy * g_ent).sum()
    ours = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
    again = torch.autograd.grad(loss, (hidden, weight))  # a second backward recomputes what the first used up
    torch.testing.assert_close(logps, ref_logps)
    torch.testing.assert_close(entropy, ref_entropy)
    for a, b, c in zip(ours, again, ref):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(b, c)


def test_no_completion_tokens():
    hidden, weight = torch.randn(0, 4, requires_grad=True), torch.randn(7, 4, requires_grad=True)
    logps, _ = CompletionLogProbs.apply(hidden, weight, torch.zeros(0, dtype=torch.long), 1.0, 8, False, False, False)
    logps.sum().backward()
    assert logps.shape == (0,) and weight.grad.abs().sum() == 0


@pytest.mark.parametrize("fp32", [False, True])
def test_bf16_model_gradients_close_to_fp32(fp32):
    # a bf16 policy (hardware.precision=bf16): matmul in bf16 (or fp32 with cast_lm_head_to_fp32), softmax in fp32
    torch.manual_seed(2)
    hidden, weight = torch.randn(6, 8), torch.randn(11, 8)
    targets = torch.randint(0, 11, (6,))
    ref = [t.clone().requires_grad_() for t in (hidden, weight)]
    CompletionLogProbs.apply(*ref, targets, 1.0, 4, False, False, False)[0].sum().backward()
    low = [t.to(torch.bfloat16).requires_grad_() for t in (hidden, weight)]
    logps, _ = CompletionLogProbs.apply(*low, targets, 1.0, 4, False, fp32, False)
    logps.sum().backward()
    assert logps.dtype == torch.float32 and low[1].grad.dtype == torch.bfloat16
    for ours, full in zip(low, ref):
        torch.testing.assert_close(ours.grad.float(), full.grad, rtol=0.05, atol=0.05 * full.grad.abs().max().item())


def test_masked_positions_are_zero():
    torch.manual_seed(1)
    hidden, weight = torch.randn(2, 3, 4), torch.randn(9, 4)
    targets, mask = torch.randint(0, 9, (2, 3)), torch.tensor([[1, 1, 0], [1, 1, 1]])
    logps, entropy = completion_logprobs(hidden, weight, targets, mask, with_entropy=True, chunk=2)
    log_p = torch.log_softmax(hidden @ weight.t(), dim=-1)  # [2, 3, 9]
    torch.testing.assert_close(logps, log_p.gather(2, targets[..., None]).squeeze(2) * mask)
    assert logps[0, 2] == 0 and entropy[0, 2] == 0 and entropy[1].gt(0).all()


def test_shared_prompt_prefix_equals_the_full_forward(tmp_path):
    """Rows 0-2 share a left-padded prompt, row 3 has its own: the prompt runs once per distinct prompt and
    its KV cache is expanded; hidden states and the backbone's gradients match the plain forward."""
    from rlpost.models.loading import load_model
    from rlpost.trainer.logprobs import backbone_hidden

    model = load_model(make_run([]).model)
    torch.manual_seed(0)
    prompt = torch.randint(0, 1000, (2, 6))
    ids = torch.cat([prompt[[0, 0, 0, 1]], torch.randint(0, 1000, (4, 5))], dim=1)  # [4, 11]: 6 prompt + 5
    mask = torch.ones_like(ids)
    mask[:3, :2] = 0  # the shared prompt is left-padded
    mask[1, -2:] = 0  # a completion that ended early

    def run(share: bool):
        model.zero_grad()
        hidden = backbone_hidden(model.model, ids, mask, 5, share)  # [4, 5, H]
        (hidden * mask[:, -5:, None]).pow(2).sum().backward()
        return hidden.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    (shared, shared_grads), (full, full_grads) = run(True), run(False)
    assert shared.shape == full.shape == (4, 5, model.config.hidden_size)
    torch.testing.assert_close(shared * mask[:, -5:, None], full * mask[:, -5:, None], rtol=1e-4, atol=1e-4)
    for name, reference in full_grads.items():
        torch.testing.assert_close(shared_grads[name], reference, rtol=1e-3, atol=1e-4 * reference.abs().max().item())


@pytest.mark.parametrize("segments", ["512", "0"], ids=["packed under dense masks", "packed into one row, segments"])
def test_trainer_compact_head_matches_trls(tmp_path, segments):
    """The same policy forward through both heads: equal log-probs, entropies and parameter gradients."""
    run = make_run(
        ["train.logprob_head=compact", "train.temperature=0.8", f"train.packing_segment_min_tokens={segments}"]
    )
    trainer = rlpost_trainer(run, tmp_path)
    assert trainer._compact_logprobs()
    torch.manual_seed(0)
    ids = torch.randint(0, trainer.model.config.vocab_size, (4, 12))
    ids[1, :7] = ids[0, :7]  # rows 0 and 1 share their prompt: the compact head runs it once
    mask = torch.ones_like(ids)
    mask[:2, :3] = 0  # left-padded prompt
    mask[1, -2:] = 0  # completion that ended early

    def forward_and_grads(compact: bool):
        trainer._rlpost_compact = compact
        trainer.model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 5, 2, True)
        ((logps * mask[:, -5:]).sum() + entropies.sum()).backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        return logps.detach(), entropies.detach(), grads

    compact, trl = forward_and_grads(True), forward_and_grads(False)
    torch.testing.assert_close(compact[0] * mask[:, -5:], trl[0] * mask[:, -5:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compact[1] * mask[:, -5:], trl[1] * mask[:, -5:], rtol=1e-5, atol=1e-5)
    assert compact[2].keys() == trl[2].keys() and len(trl[2]) > 5
    for name, reference in trl[2].items():  # fp32 sums over a 49k vocabulary in another order: 1e-5 of the scale
        scale = reference.abs().max().item()
        torch.testing.assert_close(compact[2][name], reference, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_auto_head_on_cpu_and_refusals(tmp_path):
    from rlpost.core.errors import ConfigError

    assert rlpost_trainer(make_run([]), tmp_path / "a")._compact_logprobs()  # auto: compact on CPU
    assert not rlpost_trainer(make_run(["train.logprob_head=trl"]), tmp_path / "b")._compact_logprobs()
    with pytest.raises(ConfigError, match="train.logprob_head=compact .* one process without DeepSpeed"):
        make_run(["train.logprob_head=compact", "hardware.num_processes=2"])
    with pytest.raises(ConfigError, match="train.logprob_chunk=0 must be >= 1"):
        make_run(["train.logprob_chunk=0"])
