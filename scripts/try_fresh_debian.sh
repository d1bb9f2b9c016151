#!/usr/bin/env bash
# A newcomer's first run, measured: `./scripts/demo.sh --exit` in a fresh Debian 12 container that
# holds only git and a Rust toolchain, as the README's requirements say.
#
#   scripts/try_fresh_debian.sh [DEMO OPTIONS...]      (as root, with a Docker engine)
#
# 1. The image `horos-fresh:bookworm`: `debootstrap --variant=minbase bookworm`, imported with
#    `docker import` (no image is pulled; made once, about 2 min). It has no git, curl, unzip,
#    python3, compiler or make.
# 2. In a new container from it (not timed: the README's preconditions): git and the CA
#    certificates from apt, this checkout cloned (its committed HEAD) into /root/horos-rs, and a
#    Rust toolchain mounted read-only from this machine (`HOROS_FRESH_RUST`, default the 1.95
#    toolchain under ~/.rustup) with an empty CARGO_HOME, so every crate is downloaded and built
#    cold.
# 3. Timed: `./scripts/demo.sh --exit` there; it prints each phase's time, this script the total.
#    The whole output is also in ${HOROS_FRESH_LOG:-/tmp/horos-fresh-demo.log}.
#
# This machine's registries need its own CA certificates (mounted from
# /usr/local/share/ca-certificates when present); a user's machine does not.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
IMAGE=horos-fresh:bookworm
RUST=${HOROS_FRESH_RUST:-$HOME/.rustup/toolchains/1.95.0-x86_64-unknown-linux-gnu}
LOG=${HOROS_FRESH_LOG:-/tmp/horos-fresh-demo.log}
log() { echo "[try_fresh_debian] $*" >&2; }

[ "$(id -u)" = 0 ] || { log "run as root (debootstrap and docker)"; exit 1; }
command -v docker >/dev/null || { log "needs a Docker engine"; exit 1; }
[ -x "$RUST/bin/cargo" ] || { log "no Rust toolchain at $RUST (set HOROS_FRESH_RUST)"; exit 1; }

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >&2
    rootfs=$(mktemp -d /var/tmp/horos-fresh-root.XXXXXX)
    log "debootstrap --variant=minbase bookworm $rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" >&2
    tar -C "$rootfs" -c . | docker import - "$IMAGE" >&2
    rm -rf "$rootfs"
fi

certs=()
if [ -d /usr/local/share/ca-certificates ]; then
    certs=(-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro
           -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt
           -e REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
           -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
fi

# The checkout as git sees it (HEAD), handed over as a bundle: no working files of this machine.
bundle=$(mktemp /tmp/horos-fresh.XXXXXX.bundle)
trap 'rm -f "$bundle"' EXIT
git -C "$ROOT" bundle create "$bundle" HEAD >/dev/null 2>&1

log "a fresh container: preconditions (git, CA certificates, the clone), then the timed demo"
docker run --rm --network host "${certs[@]}" \
    -v "$RUST":/opt/rust:ro -v "$bundle":/tmp/horos.bundle:ro \
    -e PATH=/opt/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -e CARGO_HOME=/root/.cargo -e DEBIAN_FRONTEND=noninteractive \
    "$IMAGE" bash -c '
set -euo pipefail
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends git ca-certificates >/dev/null
update-ca-certificates >/dev/null 2>&1
git clone -q /tmp/horos.bundle /root/horos-rs
cd /root/horos-rs
echo "[try_fresh_debian] Debian $(cat /etc/debian_version), $(nproc) cores, $(cargo --version)"
start=$(date +%s)
./scripts/demo.sh --exit
echo "[try_fresh_debian] demo.sh --exit succeeded in $(( $(date +%s) - start )) s"
' 2>&1 | tee "$LOG"
