#!/usr/bin/env bash
# GPU smoke test of the scale-out paths (rlpost/launch/): NOT RUN on the CPU machine this was written on
# (no GPU, no vllm there); it needs one CUDA GPU, `pip install 'rlpost[vllm,deepspeed]'`, and takes
# under 5 minutes on one H100/H200-class GPU (SmolLM2-135M-Instruct, 3 steps per run).
#   1. GRPO with vLLM rollouts colocated in the trainer (hardware=vllm-colocate, TRL vllm_mode=colocate)
#   2. GRPO under DeepSpeed ZeRO-2 on 1 GPU (hardware=zero2; deepspeed.json written to the run directory)
# Each run must exit 0 and log finite losses; the script stops at the first failure.
# Usage: bash bench/gpu_smoke.sh [extra overrides]
set -euo pipefail
OUT=${OUT:-outputs/gpu_smoke}
COMMON=(model=smollm2-135m data=basic_arithmetic train.steps=3 train.completions_per_step=16
        train.max_completion_length=64 eval.size=20 logging.trackers=[] logging.plots=false "$@")

check() {  # a run directory: summary.json exists and every logged loss is finite
  python - "$1" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if l.strip()]
losses = [r["loss"] for r in rows if "loss" in r]
assert losses and all(math.isfinite(x) for x in losses), losses
print(sys.argv[1], "ok:", len(losses), "steps, losses", [round(x, 4) for x in losses])
PY
}

start=$(date +%s)
rlpost train "${COMMON[@]}" hardware=vllm-colocate hydra.run.dir="$OUT/vllm-colocate"
check "$OUT/vllm-colocate"
rlpost train "${COMMON[@]}" hardware=zero2 hydra.run.dir="$OUT/zero2"
check "$OUT/zero2"
test -f "$OUT/zero2/deepspeed.json"
echo "gpu smoke passed in $(( $(date +%s) - start )) s"
