#!/usr/bin/env bash
# The GPU suite: every check of rlpost's CUDA path in one prepared script, sized for one H200-class GPU
# and a 10-minute slot (at most SUITE_SECONDS=540 s: each stage is cut to what is left). Run it first whenever a session has a GPU.
#   1. tests/integration/test_gpu.py (pytest -m gpu): compact head on CUDA, bf16 training, equality with plain TRL,
#      ZeRO-2/3 on one GPU, SIGKILL + resume=auto
#   2. bench/step_time.py --hardware gpu: rlpost against plain TRL on a SmolLM2-shaped model (30 layers,
#      hidden 576; random weights: the SmolLM2 GGUF wheel is 98 MB, over what travels to the device)
#   3. vLLM colocated rollouts (bench/gpu_smoke.sh) when vllm is importable; skipped with a line otherwise
# Where the machine lacks packages (trl, hydra, datasets, ...), `bash bench/gpu_prepare.sh` (run beforehand, here)
# puts them as wheels in .whl/ and the SmolLM2 tokenizer in .gpu-cache/; carry both; they are installed here.
# Everything is logged to $OUT/suite.log; tables to $OUT/gpu_step_time.md.
set -uo pipefail
OUT=${OUT:-outputs/gpu_suite}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/suite.log") 2>&1
start=$(date +%s)
deadline=$(( start + ${SUITE_SECONDS:-540} ))  # every stage is cut to what is left of this
step() { echo; echo "=== $1 (at $(( $(date +%s) - start )) s)"; }
left() { local l=$(( deadline - $(date +%s) )); (( l < 1 )) && l=1; (( l < $1 )) && echo "$l" || echo "$1"; }  # min(budget, left), at least 1
export PYTHONWARNINGS=ignore::SyntaxWarning PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false

step "packages"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  for sdist in .whl/*.tar.gz; do  # sdists (no wheel for this Python on PyPI): built here
    [ -e "$sdist" ] && python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site "$sdist"
  done
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
[ -d .gpu-cache ] && export RLPOST_CACHE="$PWD/.gpu-cache"
python3 - <<'PY'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
for name in ["transformers", "trl", "accelerate", "peft", "datasets", "hydra", "deepspeed", "vllm", "triton"]:
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as err:  # noqa: BLE001
        print(name, "NOT IMPORTABLE:", type(err).__name__, str(err)[:200])
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

step "tests/integration/test_gpu.py"
timeout "$(left 300)" python3 -m pytest tests/integration/test_gpu.py -m gpu -v -p no:cacheprovider --timeout 150 --junitxml="$OUT/gpu_tests.xml"
echo "pytest exit code: $?"

step "bench/step_time.py --hardware gpu (SmolLM2-shaped, 8 x 32 and 8 x 256 tokens)"
SMOL=(--model tiny-random --set model.tiny_layers=30 --set model.tiny_hidden=576 --set model.tiny_heads=9
      --set model.tiny_intermediate=1536 --hardware gpu --suites trl --reps 1 --steps 5 --warmup 2
      --trl-variants TRL)  # TRL + torch_compile: its compile time does not fit the slot
timeout "$(left 150)" python3 bench/step_time.py "${SMOL[@]}" --out "$OUT/gpu_step_time.md"
echo "step_time (32 tokens) exit code: $?"
timeout "$(left 150)" python3 bench/step_time.py "${SMOL[@]}" --max-completion-length 256 --out "$OUT/gpu_step_time.md"
echo "step_time (256 tokens) exit code: $?"

step "vLLM colocate"
if python3 -c "import vllm" 2>/dev/null; then
  timeout "$(left 200)" bash bench/gpu_smoke.sh
else
  echo "vllm is not importable here: vLLM rollouts not checked"
fi
step "done"
