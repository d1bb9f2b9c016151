#!/usr/bin/env bash
# Stops the cluster started by scripts/setup_postgres.sh (fast shutdown; its data is kept).
set -uo pipefail
DIR=${HOROS_PG_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/pg}
DATA=$DIR/data
[ -f "$DATA/PG_VERSION" ] || exit 0
BIN=
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && BIN=$d; done
[ -n "$BIN" ] || BIN=$(dirname "$(command -v pg_ctl)")
if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
else
    "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
fi
