"""UG-TTT's pieces worked by hand (seed 004 #28): the per-token mutual information across adapters, the
nuclear-norm distinctness of the adapters' updates (on the batch's inputs, recorded by the hooks), the routed
LoRA forward, and the row -> adapter rule."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rlpost.algorithms.ug_ttt import adapter_of_rows
from rlpost.models.lora_ensemble import (
    LoraEnsemble,
    mutual_information,
    update_distinctness,
    update_gram,
)


def logits_of(*rows):
    """K probability vectors over V -> logits [K, 1, 1, V] whose softmax gives them back."""
    return torch.log(torch.tensor(rows)).view(len(rows), 1, 1, -1)


def test_mutual_information_by_hand():
    # p1 = (0.8, 0.2), p2 = (0.2, 0.8): mean (0.5, 0.5), H(mean) = ln 2 = 0.693147;
    # H(p_k) = -(0.8 ln 0.8 + 0.2 ln 0.2) = 0.500402 for both; MI = 0.693147 - 0.500402 = 0.192745
    assert mutual_information(logits_of([0.8, 0.2], [0.2, 0.8])).item() == pytest.approx(0.192745, abs=1e-5)
    # agreement is no disagreement, however uncertain: p1 = p2 = (0.5, 0.5) -> H(mean) = mean H = ln 2, MI = 0
    assert mutual_information(logits_of([0.5, 0.5], [0.5, 0.5])).item() == pytest.approx(0.0, abs=1e-7)
    # confident and opposite: MI = ln 2 - 0 = log K, its maximum for K = 2
    sure = mutual_information(logits_of([1 - 1e-9, 1e-9], [1e-9, 1 - 1e-9])).item()
    assert sure == pytest.approx(math.log(2), abs=1e-6)
    # K = 3, p = (1,0,0)-ish, (0,1,0)-ish, (0.5,0.5,0)-ish: mean (0.5, 0.5, 0): H(mean) = ln 2,
    # mean H = (0 + 0 + ln 2) / 3, MI = 2/3 ln 2 = 0.462098
    three = logits_of([1 - 2e-9, 1e-9, 1e-9], [1e-9, 1 - 2e-9, 1e-9], [0.5 - 5e-10, 0.5 - 5e-10, 1e-9])
    assert mutual_information(three).item() == pytest.approx(2 / 3 * math.log(2), abs=1e-6)


def test_mutual_information_keeps_the_token_shape():
    logits = torch.randn(3, 2, 5, 7)  # [K, B, T, V]
    mi = mutual_information(logits)
    assert mi.shape == (2, 5) and (mi >= 0).all() and (mi <= math.log(3) + 1e-6).all()


def updates(*pairs):
    """(B_k [out, r], A_k [r, in]) pairs -> stacked A [K, r, in], B [K, out, r]."""
    return torch.stack([torch.tensor(a) for _, a in pairs]), torch.stack([torch.tensor(b) for b, _ in pairs])


def test_update_gram_is_the_frobenius_inner_product_of_the_updates():
    torch.manual_seed(0)
    a, b = torch.randn(3, 2, 5), torch.randn(3, 4, 2)  # K=3, r=2, in=5, out=4
    flat = torch.stack([(b[k] @ a[k]).flatten() for k in range(3)])  # [K, out*in]
    assert torch.allclose(update_gram(a, b), flat @ flat.T, atol=1e-5)


def test_distinctness_by_hand():
    # orthogonal updates e1 e1^T and e2 e2^T: cosines C = I, eigenvalues (1, 1): (1 + 1) / K = 1
    a, b = updates(([[1.0], [0.0]], [[1.0, 0.0]]), ([[0.0], [1.0]], [[0.0, 1.0]]))
    assert update_distinctness(a, b, eps=1e-12).item() == pytest.approx(1.0, abs=1e-6)
    # identical updates: C = [[1, 1], [1, 1]], eigenvalues (0, 2): sqrt(2) / 2 = 0.707107 (= 1 / sqrt(K))
    a, b = updates(([[1.0], [0.0]], [[1.0, 0.0]]), ([[2.0], [0.0]], [[3.0, 0.0]]))  # same direction, any scale
    assert update_distinctness(a, b, eps=1e-12).item() == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    # cosine 0.6: u1 = e1 e1^T, u2 = e1 (0.6, 0.8)^T; C = [[1, .6], [.6, 1]], eigenvalues 1.6 and 0.4:
    # (sqrt(1.6) + sqrt(0.4)) / 2 = (1.264911 + 0.632456) / 2 = 0.948683
    a, b = updates(([[1.0], [0.0]], [[1.0, 0.0]]), ([[1.0], [0.0]], [[0.6, 0.8]]))
    assert update_distinctness(a, b, eps=1e-12).item() == pytest.approx(0.948683, abs=1e-5)


def test_distinctness_has_finite_gradients_where_eigenvalues_repeat():
    a, b = updates(([[1.0], [0.0]], [[1.0, 0.0]]), ([[0.0], [1.0]], [[0.0, 1.0]]))  # C = I: repeated eigenvalue 1
    a.requires_grad_(True)
    b.requires_grad_(True)
    update_distinctness(a, b).backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    # two updates at cosine 0.6: raising distinctness turns them apart (the gradient is not zero)
    a, b = updates(([[1.0], [0.0]], [[1.0, 0.0]]), ([[1.0], [0.0]], [[0.6, 0.8]]))
    a.requires_grad_(True)
    update_distinctness(a, b).backward()
    assert a.grad.abs().sum() > 0


def test_distinctness_on_the_inputs_by_hand():
    # two rank-1 adapters with orthogonal weight updates u1 = e1^T, u2 = e2^T (one output): in weight space
    # C = I, distinctness (1 + 1) / 2 = 1, whatever the adapters do to the batch
    a = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # [K=2, r=1, in=2]
    b = torch.ones(2, 1, 1)  # [K, out=1, r]
    assert update_distinctness(a, b, eps=1e-12).item() == pytest.approx(1.0, abs=1e-6)
    # tokens x = (1, 1) and (2, 2): outputs U_1 = X u1^T = (1, 2) = U_2 = X u2^T, one direction: C = [[1, 1], [1, 1]],
    # eigenvalues (0, 2): sqrt(2) / 2 = 0.707107. S = X^T X = [[5, 5], [5, 5]]
    moment = torch.tensor([[5.0, 5.0], [5.0, 5.0]])
    assert update_distinctness(a, b, moment, eps=1e-12).item() == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    # tokens (1, 0) and (1, 1): U_1 = (1, 1), U_2 = (0, 1), cosine 1 / sqrt(2) = 0.707107; eigenvalues 1 -+ 0.707107:
    # (sqrt(0.292893) + sqrt(1.707107)) / 2 = (0.541196 + 1.306563) / 2 = 0.923880. S = [[2, 1], [1, 1]]
    moment = torch.tensor([[2.0, 1.0], [1.0, 1.0]])
    assert update_gram(a, b, moment).tolist() == [[2.0, 1.0], [1.0, 1.0]]  # <U_k, U_l>: |U_1|^2 = 2, |U_2|^2 = 1
    assert update_distinctness(a, b, moment, eps=1e-12).item() == pytest.approx(0.923880, abs=1e-5)


def test_the_ensemble_measures_distinctness_on_the_recorded_real_tokens():
    model = TwoLinears()  # q_proj: 3 -> 2
    ens = LoraEnsemble.attach(model, adapters=2, rank=1, alpha=1.0, target_modules=["q_proj"], init_std=1e-3, seed=0)
    with torch.no_grad():  # u1 = B_1 A_1 = (1, 1)^T e1^T, u2 = (1, 1)^T e2^T: orthogonal weight updates
        ens.lora_A["q_proj"].copy_(torch.tensor([[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]]))
        ens.lora_B["q_proj"].copy_(torch.ones(2, 2, 1))
    assert ens.distinctness().item() == pytest.approx(1.0, abs=1e-3)  # nothing recorded: the weight updates
    # one row of three tokens, the last one padding: x = (1, 1, 0), (2, 2, 5), pad (7, -3, 9)
    x = torch.tensor([[[1.0, 1.0, 0.0], [2.0, 2.0, 5.0], [7.0, -3.0, 9.0]]])
    with torch.no_grad(), ens.use(0), ens.recording(torch.tensor([[1, 1, 0]])):
        model(x)
    # S = sum over the two real tokens of x x^T: [[1+4, 1+4, 0+10], [5, 5, 10], [10, 10, 25]]
    assert ens.inputs["q_proj"].tolist() == [[5.0, 5.0, 10.0], [5.0, 5.0, 10.0], [10.0, 10.0, 25.0]]
    # on these tokens U_1 = U_2 (x_1 = x_2 on each): one direction, distinctness 1 / sqrt(2) = 0.707107
    assert ens.distinctness(eps=1e-12).item() == pytest.approx(1 / math.sqrt(2), abs=1e-4)
    model(x)  # a forward outside ``recording`` adds nothing
    assert ens.inputs["q_proj"][2, 2].item() == 25.0
    with pytest.raises(RuntimeError, match="the mask is"), ens.recording(torch.ones(1, 2)):
        model(x)


def test_nearly_identical_adapters_are_pushed_apart():
    # u1 = e1^T, u2 = (cos t, sin t) with t = 1e-3: cosine c = cos t, eigenvalues 1 - c = 5e-7 (< eps = 1e-6) and
    # 1 + c. D = (f(1 - c) + f(1 + c)) / 2 with f(l) = l / sqrt(l + eps): f'(5e-7) = (l/2 + eps) / (l + eps)^1.5
    # = 680 and f'(2) = 0.35, so dD/dc = (0.35 - 680) / 2 < 0: raising D lowers c, turns u2 away from u1 (its
    # sin component grows). A square root of the eigenvalue clamped at eps has f'(5e-7) = 0, and D would rise
    # with c: the term would pull the adapters together.
    t = 1e-3
    a = torch.tensor([[[1.0, 0.0]], [[math.cos(t), math.sin(t)]]], requires_grad=True)
    update_distinctness(a, torch.ones(2, 1, 1)).backward()
    assert a.grad[1, 0, 1].item() > 0


class TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(3, 2, bias=False), nn.Linear(3, 2, bias=False)

    def forward(self, x):
        return self.q_proj(x), self.k_proj(x)


def test_the_routed_forward_adds_the_chosen_adapters_update():
    torch.manual_seed(0)
    model = TwoLinears()
    ens = LoraEnsemble.attach(model, adapters=2, rank=1, alpha=2.0, target_modules=["q_proj"], init_std=0.5, seed=0)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [
        "rlpost_ensemble.lora_A.q_proj",
        "rlpost_ensemble.lora_B.q_proj",
    ]  # the base is frozen; only the target linear got adapters
    a, b = ens.lora_A["q_proj"], ens.lora_B["q_proj"]  # [2, 1, 3], [2, 2, 1]
    x = torch.tensor([[1.0, -2.0, 0.5]])
    base = x @ model.q_proj.weight.T
    scale = 2.0 / 1  # alpha / r
    update = [scale * (x @ a[k].T) @ b[k].T for k in range(2)]  # s * B_k A_k x
    for k in range(2):
        with ens.use(k):
            q, k_out = model(x)
        assert torch.allclose(q, base + update[k], atol=1e-6)
        assert torch.allclose(k_out, x @ model.k_proj.weight.T)  # not a target: untouched
    assert torch.allclose(model(x)[0], base + (update[0] + update[1]) / 2, atol=1e-6)  # outside use: the mean
    with ens.use(None):
        assert torch.allclose(model(x)[0], base)  # the frozen base
    with pytest.raises(ValueError, match="adapter 2 out of range"), ens.use(2):
        pass


def test_adapters_differ_from_the_start_and_per_seed():
    model = TwoLinears()
    ens = LoraEnsemble(model, adapters=3, rank=2, alpha=4.0, target_modules=["q_proj"], init_std=1e-3, seed=1)
    a = ens.lora_A["q_proj"]
    assert not torch.equal(a[0], a[1]) and ens.distinctness().item() > 0.9  # near-orthogonal random updates
    again = LoraEnsemble(TwoLinears(), adapters=3, rank=2, alpha=4.0, target_modules=["q_proj"], init_std=1e-3, seed=1)
    assert torch.equal(again.lora_A["q_proj"], a)  # the run's seed fixes the draw
    with pytest.raises(ValueError, match="no nn.Linear named any of"):
        LoraEnsemble(model, adapters=2, rank=1, alpha=1.0, target_modules=["o_proj"], init_std=1e-3, seed=0)


def test_rows_take_adapters_round_robin_inside_each_group():
    # G = 4, K = 3: completion j of a group -> j mod 3; the second group starts over
    assert adapter_of_rows(0, 8, 4, 3).tolist() == [0, 1, 2, 0, 0, 1, 2, 0]
    # the second process's 4 rows are global rows 4..7: the second group
    assert adapter_of_rows(4, 4, 4, 3).tolist() == [0, 1, 2, 0]
