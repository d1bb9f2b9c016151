#!/usr/bin/env bash
# CPU text-to-speech for the `tts` backend kind (servers/py/tts_worker.py): eSpeak NG, a real
# speech synthesiser (WAV and pcm), and sox (flac). Debian/Ubuntu, as root. A few seconds on a
# fresh machine; a no-op when already installed. (ffmpeg, when installed, adds mp3, opus, aac.)
set -euo pipefail
need=()
command -v espeak-ng >/dev/null || need+=(espeak-ng)
command -v sox >/dev/null || need+=(sox)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi
espeak-ng --version
sox --version
