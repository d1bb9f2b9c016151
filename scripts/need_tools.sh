#!/usr/bin/env bash
# need_tools TOOL...: every tool present, or installed with apt-get (as root, or with sudo), or
# named with the one command that installs it; returns 1 then. Sourced by scripts/demo.sh and
# scripts/test.sh before they do anything else. `python3-venv` stands for Python's venv and
# ensurepip modules; any other name is a command and its Debian package.
need_tools() {
    local tool missing=()
    for tool in "$@"; do
        case $tool in
            python3-venv) python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv) ;;
            *) command -v "$tool" >/dev/null || missing+=("$tool") ;;
        esac
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local apt_log=${TMPDIR:-/tmp}/horos-apt.log as_root=()
    if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null; then
            echo "[need_tools] missing: ${missing[*]}; install them as root first: apt-get install ${missing[*]}" >&2
            return 1
        fi
        as_root=(sudo)
    fi
    echo "[need_tools] installing ${missing[*]} (apt-get; its output in $apt_log)" >&2
    if ! { "${as_root[@]}" apt-get update -q &&
           "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
               apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
        tail -n 20 "$apt_log" >&2
        echo "[need_tools] apt-get could not install ${missing[*]} (above: the end of $apt_log)" >&2
        return 1
    fi
}
