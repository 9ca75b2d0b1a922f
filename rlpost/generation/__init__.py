"""Every CPU speed path of sampling and its C++ kernels: oneDNN linears, the decode kernel, fused decode
steps, the parallel sampling draw, the preallocated KV cache, shared-prefix generation.

With ``rlpost/logprobs/``, the only place that patches torch or transformers at run time; each patched
internal is pinned by tests/trainer/test_trl_contract.py.
"""
