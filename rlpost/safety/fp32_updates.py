"""Float32 policy updates for a 16-bit model (seed 000 #16: "float32 precision during PPO updates").

Reading chosen (the abstract only says the PPO updates run in fp32 because bf16 importance ratios
overflowed): the model keeps its 16-bit weights for every forward (rollouts and the training
forward), and the *update* is fp32 end to end:

1. the LM head and the log-softmax run in fp32 (TRL's ``cast_lm_head_to_fp32``, set by
   ``BuiltRun.grpo_config_kwargs``), so log-probs, ratios, KL and the loss are fp32 tensors;
2. the optimizer owns fp32 *master* copies of the 16-bit trainable parameters. Before each step the
   16-bit gradients are copied up to the masters, AdamW updates the masters (fp32 moments), and the
   masters are copied back, rounded, into the model. Small updates that a bf16 weight would round
   away accumulate in the master instead.

Choices: implemented as two optimizer step hooks (``register_step_pre_hook`` /
``register_step_post_hook``) on TRL's own optimizer, whose parameter groups are re-pointed at the
masters before its first step, so weight decay groups, schedulers and checkpointed optimizer state
are unchanged; fp32 parameters (e.g. the fp32 LM head) are used as they are. The masters travel in
the checkpoint's component state (``rlpost_state.pt``). With ``model.dtype=float32`` there is
nothing to do for the weights (a warning when the run has no 16-bit part at all: see ``config.py``).
Gradient clipping still runs on the model's 16-bit gradients (before the copy).
"""

from __future__ import annotations

import torch

SIXTEEN_BIT = (torch.bfloat16, torch.float16)


class MasterWeights:
    """fp32 masters of the 16-bit parameters an optimizer updates (see the module docstring)."""

    def __init__(self):
        self.pairs: list[tuple[torch.nn.Parameter, torch.nn.Parameter]] = []  # (model param, fp32 master)
        self._master: dict[int, torch.nn.Parameter] = {}

    def adopt(self, optimizer: torch.optim.Optimizer) -> None:
        """Re-point ``optimizer`` (before its first step) at fp32 masters of its 16-bit parameters."""
        if any(optimizer.state.values()):
            raise RuntimeError("fp32 master weights must be installed before the optimizer's first step")
        for group in optimizer.param_groups:
            params = []
            for p in group["params"]:
                if p.dtype in SIXTEEN_BIT:
                    master = torch.nn.Parameter(p.detach().float().clone())
                    self.pairs.append((p, master))
                    self._master[id(p)] = master
                    p = master
                params.append(p)
            group["params"] = params
        optimizer.register_step_pre_hook(self._grads_up)
        optimizer.register_step_post_hook(self._weights_down)

    def master_of(self, param: torch.nn.Parameter) -> torch.nn.Parameter:
        """The tensor the optimizer updates for ``param`` (its master, or itself)."""
        return self._master.get(id(param), param)

    @torch.no_grad()
    def write(self, param: torch.nn.Parameter, value: torch.Tensor) -> None:
        """Set ``param`` (and its master) to ``value``."""
        master = self.master_of(param)
        master.copy_(value)
        if master is not param:
            param.copy_(master)

    def _grads_up(self, optimizer, args, kwargs) -> None:
        for p, master in self.pairs:
            master.grad = None if p.grad is None else p.grad.detach().float()

    @torch.no_grad()
    def _weights_down(self, optimizer, args, kwargs) -> None:
        for p, master in self.pairs:
            p.copy_(master)
            master.grad = None

    def state_dict(self) -> dict:
        return {"masters": [master.detach().cpu() for _, master in self.pairs]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        masters = state.get("masters", [])
        if len(masters) != len(self.pairs):
            raise RuntimeError(f"checkpoint has {len(masters)} fp32 master tensors, this model {len(self.pairs)}")
        for (p, master), saved in zip(self.pairs, masters):
            master.copy_(saved)
            p.copy_(master)
