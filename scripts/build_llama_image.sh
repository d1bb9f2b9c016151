#!/usr/bin/env bash
# Build a Docker image of llama-server WITHOUT pulling anything (no registry is reachable): a root file
# system made of the binary, every shared library `ldd` finds for it (plus the dynamic loader at its
# PT_INTERP path) and, for llama-server, the model GGUF; imported with `docker import` (no builder, no
# base image: the equivalent of `FROM scratch`).
#
#   scripts/build_llama_image.sh
#       horos/llama-server:local from $HOROS_LLAMA_SERVER and $HOROS_SMOLLM2_GGUF (when unset, read from
#       the newest ${HOROS_CACHE:-$HOME/.cache/horos}/llama-*/env that scripts/setup_llama.sh wrote).
#       Layout: /app/llama-server, /app/*.so* (LD_LIBRARY_PATH=/app), /models/model.gguf.
#       Entrypoint: /app/llama-server; the container's command gives the arguments, e.g.
#       `-m /models/model.gguf --host 0.0.0.0 --port 8080`.
#   scripts/build_llama_image.sh --binary PATH --tag TAG
#       Any dynamically linked binary (the horos-fakeai binary, a test binary acting as one) the same
#       way, as /app/<name>, without a model. Used by the horos-servers Docker tests for crash and hang
#       faults.
#
# Idempotent: the image carries a label `horos.inputs` = sha256 over the inputs (file contents and
# names); an image with the same label is left alone. Prints the image tag on stdout (last line).
# Exit status: 0 built or up to date; 3 llama-server or the model is absent (callers may skip);
# other: failure.
set -euo pipefail

log() { echo "[build_llama_image] $*" >&2; }

BINARY=""
TAG=""
MODEL=""
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) BINARY=$2; shift 2 ;;
        --tag) TAG=$2; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) log "unknown argument $1"; exit 2 ;;
    esac
done

if [ -z "$BINARY" ]; then
    # llama-server mode.
    TAG=${TAG:-horos/llama-server:local}
    if [ -z "${HOROS_LLAMA_SERVER:-}" ] || [ -z "${HOROS_SMOLLM2_GGUF:-}" ]; then
        CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
        ENV_FILE=$(ls -t "$CACHE"/llama-*/env 2>/dev/null | head -n1 || true)
        if [ -n "$ENV_FILE" ]; then
            # shellcheck disable=SC1090
            . "$ENV_FILE"
        fi
    fi
    BINARY=${HOROS_LLAMA_SERVER:-}
    MODEL=${HOROS_SMOLLM2_GGUF:-}
    if [ -z "$BINARY" ] || [ ! -x "$BINARY" ]; then
        log "llama-server not found (HOROS_LLAMA_SERVER unset or not executable; run scripts/setup_llama.sh)"
        exit 3
    fi
    if [ -z "$MODEL" ] || [ ! -s "$MODEL" ]; then
        log "model not found (HOROS_SMOLLM2_GGUF unset or empty)"
        exit 3
    fi
else
    [ -n "$TAG" ] || { log "--binary needs --tag"; exit 2; }
    [ -x "$BINARY" ] || { log "$BINARY is not an executable file"; exit 3; }
fi

command -v docker >/dev/null || { log "docker CLI not found"; exit 1; }
command -v ldd >/dev/null || { log "ldd not found"; exit 1; }

NAME=$(basename "$BINARY")
BINDIR=$(cd "$(dirname "$BINARY")" && pwd)

# The libraries: what ldd resolves (`name => /path (addr)`), and the loader (`/lib64/ld-... (addr)`).
LIBS=()
LOADER=""
while read -r line; do
    case "$line" in
        *"=> not found"*) log "ldd: $line"; exit 1 ;;
        *"=> /"*) LIBS+=("$(echo "$line" | sed -E 's/^[[:space:]]*([^ ]+) => ([^ ]+) .*/\1 \2/')") ;;
        /*) LOADER=$(echo "$line" | awk '{print $1}') ;;
    esac
done < <(ldd "$BINARY")
[ -n "$LOADER" ] || log "no dynamic loader in ldd's output: a static binary, copied alone"

# ggml loads its CPU/GPU backends with dlopen from the binary's directory: take every libggml* there.
EXTRA=()
for f in "$BINDIR"/libggml*.so*; do
    [ -e "$f" ] && EXTRA+=("$f")
done

# The inputs' fingerprint: contents and names, so that a new binary, library or model rebuilds.
INPUTS=$(
    {
        echo "layout 1 $NAME"
        sha256sum "$BINARY" | awk '{print $1" bin"}'
        if [ -n "$LOADER" ]; then sha256sum "$LOADER" | awk -v n="$LOADER" '{print $1" "n}'; fi
        for pair in "${LIBS[@]}"; do
            set -- $pair
            sha256sum "$2" | awk -v n="$1" '{print $1" "n}'
        done
        for f in "${EXTRA[@]}"; do sha256sum "$f" | awk -v n="$(basename "$f")" '{print $1" "n}'; done
        if [ -n "$MODEL" ]; then sha256sum "$MODEL" | awk '{print $1" model"}'; fi
    } | sha256sum | awk '{print $1}'
)

HAVE=$(docker image inspect -f '{{ index .Config.Labels "horos.inputs" }}' "$TAG" 2>/dev/null || true)
if [ "$HAVE" = "$INPUTS" ]; then
    log "$TAG is up to date (inputs $INPUTS)"
    echo "$TAG"
    exit 0
fi

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/horos-image.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT/app" "$ROOT/tmp"
if [ -n "$LOADER" ]; then
    mkdir -p "$ROOT$(dirname "$LOADER")"
    cp -L "$LOADER" "$ROOT$LOADER"
fi
cp -L "$BINARY" "$ROOT/app/$NAME"
for pair in "${LIBS[@]}"; do
    set -- $pair
    cp -L "$2" "$ROOT/app/$1"
done
for f in "${EXTRA[@]}"; do cp -L "$f" "$ROOT/app/$(basename "$f")"; done
chmod 1777 "$ROOT/tmp"
if [ -n "$MODEL" ]; then
    mkdir -p "$ROOT/models"
    # A hard link when on the same file system (no 100 MB copy), else a copy.
    ln "$MODEL" "$ROOT/models/model.gguf" 2>/dev/null || cp -L "$MODEL" "$ROOT/models/model.gguf"
fi

OLD_ID=$(docker image inspect -f '{{.Id}}' "$TAG" 2>/dev/null || true)
log "importing $TAG from $ROOT ($(du -sh "$ROOT" | awk '{print $1}'))"
tar -C "$ROOT" -c . | docker import \
    --change "ENTRYPOINT [\"/app/$NAME\"]" \
    --change "ENV LD_LIBRARY_PATH=/app" \
    --change "WORKDIR /app" \
    --change "LABEL horos.inputs=$INPUTS" \
    --change "LABEL horos.managed-image=true" \
    - "$TAG" >/dev/null
log "built $TAG (inputs $INPUTS)"
# The image this tag named before is now untagged: remove it unless a container still uses it.
if [ -n "$OLD_ID" ]; then docker rmi "$OLD_ID" >/dev/null 2>&1 || true; fi
echo "$TAG"
