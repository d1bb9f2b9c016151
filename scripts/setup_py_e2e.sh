#!/usr/bin/env bash
# Install the Python side of the end-to-end tests: a virtual environment with the official `openai`
# client (coordinator/tests/py/openai_e2e.py), the official MCP SDK `mcp`
# (horos-ref/tests/py/mcp_sdk_e2e.py) and `jinja2`, the engine transformers renders chat templates
# with (manifest/tests/jinja_reference.py, the reference of manifest/tests/conformance.rs), all
# from PyPI.
#
# Everything goes to ${HOROS_CACHE:-$HOME/.cache/horos}/py-e2e/ (outside the clone) and the script
# is idempotent: a complete install of these versions is detected and reused; an older venv (one
# without `mcp` or `jinja2`, or other versions) is upgraded in place. It prints the venv's python on stdout
# (the last line). Needs python3 (>= 3.10, for `mcp`) with the venv module (Debian: python3-venv)
# and access to PyPI.
set -euo pipefail

OPENAI_VERSION=${HOROS_OPENAI_VERSION:-3.51.0}
MCP_VERSION=${HOROS_MCP_VERSION:-2.3.0}
JINJA2_VERSION=${HOROS_JINJA2_VERSION:-3.1.6}
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
D="$CACHE/py-e2e"
VENV="$D/venv"
PY=${PYTHON:-python3}
STAMP="$D/.complete-openai-$OPENAI_VERSION-mcp-$MCP_VERSION-jinja2-$JINJA2_VERSION"

log() { echo "[setup_py_e2e] $*" >&2; }

mkdir -p "$D"
# One installer at a time (parallel test binaries or CI jobs may race on the same cache).
exec 9>"$D/.lock"
if command -v flock >/dev/null; then flock 9; fi

if [ -f "$STAMP" ] && "$VENV/bin/python" -c "import openai, mcp, jinja2" >/dev/null 2>&1; then
    log "already installed in $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

rm -f "$D"/.complete-*
start=$(date +%s)
if ! [ -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check "openai==$OPENAI_VERSION" "mcp==$MCP_VERSION" \
    "jinja2==$JINJA2_VERSION"
"$VENV/bin/python" -c "import openai; print('[setup_py_e2e] openai', openai.__version__)" >&2
"$VENV/bin/python" -c "from importlib.metadata import version; import mcp.client.stdio
print('[setup_py_e2e] mcp', version('mcp'))" >&2
"$VENV/bin/python" -c "import jinja2; print('[setup_py_e2e] jinja2', jinja2.__version__)" >&2
touch "$STAMP"
log "installed in $VENV in $(( $(date +%s) - start )) s"
echo "$VENV/bin/python"
