"""Scale-out on existing engines: DeepSpeed ZeRO configs, ``accelerate launch`` re-launch, vLLM server.

rlpost never schedules processes itself: ``deepspeed.py`` writes the DeepSpeed config that
transformers' Trainer consumes (``deepspeed=``), ``accelerate.py`` re-runs ``rlpost train`` under
``python -m accelerate.commands.launch`` when ``hardware.num_processes > 1``, ``vllm.py`` starts TRL's
vLLM server (``rlpost serve``), and ``checks.py`` holds the hardware cross-checks of ``check_run``.
"""
