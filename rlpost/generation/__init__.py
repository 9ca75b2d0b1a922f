"""Every CPU speed path of sampling and its C++ kernels: oneDNN linears, the decode kernel, fused decode
steps, the parallel sampling draw, the preallocated KV cache, shared-prefix generation.

With ``rlpost/logprobs/``, the only place that patches torch or transformers at run time; each patching module
declares the internals it relies on (``PATCHES``, ``OPS``, ``LAYER_PARTS``, ...), which
tests/trainer/test_internals_contract.py pins against the installed libraries.
"""
