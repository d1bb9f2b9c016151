#!/usr/bin/env bash
# Installs PostgreSQL (Debian packages, when root and missing) and starts a private cluster for the
# tests and benches: data in ${HOROS_PG_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/pg}/data, listening on
# 127.0.0.1:${HOROS_PG_PORT:-15432} only (no other address, Unix socket inside the directory), one
# superuser `horos` with a generated password (stored in the directory's `password`, mode 600) and a
# database `horos`. Idempotent: a running cluster is reused, a stopped one started.
# initdb and postgres refuse to run as root: as root they run as the `postgres` user (created by the
# Debian package), which then owns the data directory. Stop with scripts/stop_postgres.sh.
# For a cluster that containers must reach (the multi-node Docker test), HOROS_PG_LISTEN adds
# addresses to listen on (e.g. a Docker network's gateway: "127.0.0.1,172.30.0.1") and
# HOROS_PG_ALLOW a client network allowed in with the password (e.g. "172.30.0.0/16"); both are
# for clusters of their own (HOROS_PG_DIR), the default stays on 127.0.0.1.
# The last line printed is a line to source:
#   export HOROS_PG_URL=postgres://horos:PASSWORD@127.0.0.1:15432/horos
set -euo pipefail
log() { echo "[setup_postgres] $*" >&2; }

DIR=${HOROS_PG_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/pg}
PORT=${HOROS_PG_PORT:-15432}
DATA=$DIR/data
PWFILE=$DIR/password

find_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
    return 1
}

if ! BIN=$(find_bin); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "installing PostgreSQL from Debian packages"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends postgresql >/dev/null
        # The package starts a cluster of its own on 5432; ours is separate and it stays as it was.
        BIN=$(find_bin) || { log "PostgreSQL installed but initdb not found"; exit 1; }
    else
        log "PostgreSQL is not installed (install the Debian package postgresql, or run as root)"
        exit 1
    fi
fi

# As root, the server runs as `postgres`; otherwise as the caller.
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    as_pg() { runuser -u postgres -- "$@"; }
else
    as_pg() { "$@"; }
fi

mkdir -p "$DIR"
chmod 700 "$DIR" 2>/dev/null || true
if [ "$(id -u)" = 0 ]; then
    # `postgres` must reach the data directory: every parent needs the search (x) bit for others.
    chmod 711 "$DIR"
    p=$DIR
    while p=$(dirname "$p"); [ "$p" != / ]; do
        if ! runuser -u postgres -- test -x "$p"; then
            log "granting search permission (o+x, no listing) on $p so that postgres can reach $DATA"
            chmod o+x "$p"
        fi
    done
fi

if [ ! -s "$PWFILE" ]; then
    ( umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$PWFILE" )
fi
chmod 600 "$PWFILE"
PASSWORD=$(cat "$PWFILE")

if [ ! -f "$DATA/PG_VERSION" ]; then
    log "initdb $DATA"
    rm -rf "$DATA"
    mkdir -p "$DATA"
    tmp_pw=$(mktemp)
    printf '%s\n' "$PASSWORD" > "$tmp_pw"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$DATA" "$tmp_pw"
    fi
    chmod 700 "$DATA"
    as_pg "$BIN/initdb" -D "$DATA" --username=horos --pwfile="$tmp_pw" \
        --auth-host=scram-sha-256 --auth-local=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
        > "$DIR/initdb.log" 2>&1 || { rm -f "$tmp_pw"; cat "$DIR/initdb.log" >&2; exit 1; }
    rm -f "$tmp_pw"
    cat >> "$DATA/postgresql.conf" <<CONF
# scripts/setup_postgres.sh
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
max_connections = 300
shared_buffers = 128MB
CONF
fi

if [ -n "${HOROS_PG_ALLOW:-}" ] && ! grep -q "^host all all ${HOROS_PG_ALLOW} " "$DATA/pg_hba.conf"; then
    echo "host all all ${HOROS_PG_ALLOW} scram-sha-256" >> "$DATA/pg_hba.conf"
fi
LISTEN=${HOROS_PG_LISTEN:-127.0.0.1}

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" >/dev/null 2>&1; }

if as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "cluster already running ($DATA)"
else
    log "starting PostgreSQL on 127.0.0.1:$PORT"
    logfile=$DATA/server.log
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$logfile" -o "-p $PORT -c listen_addresses=$LISTEN" \
        -w -t 60 start >/dev/null \
        || { tail -n 30 "$logfile" >&2 || true; exit 1; }
fi
for _ in $(seq 1 100); do ready && break; sleep 0.1; done
ready || { log "PostgreSQL does not answer on 127.0.0.1:$PORT"; exit 1; }

if ! PGPASSWORD=$PASSWORD "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U horos -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'horos'" | grep -q 1; then
    PGPASSWORD=$PASSWORD "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U horos horos
fi
echo "export HOROS_PG_URL=postgres://horos:$PASSWORD@127.0.0.1:$PORT/horos"
