#!/usr/bin/env bash
# CPU OCR and PDF tools for ingest-pipeline: Tesseract 5 (English, orientation) and qpdf (used by
# scripts/fetch_sample_pdfs.sh to derive the malformed test inputs). Debian/Ubuntu, as root.
# About 20 s on a fresh machine; a no-op when already installed.
set -euo pipefail
need=()
command -v tesseract >/dev/null || need+=(tesseract-ocr)
[ -e /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ] || [ -e /usr/share/tesseract-ocr/4.00/tessdata/eng.traineddata ] || need+=(tesseract-ocr-eng)
# osd: the orientation check that reads a sideways or upside-down scan upright.
[ -e /usr/share/tesseract-ocr/5/tessdata/osd.traineddata ] || [ -e /usr/share/tesseract-ocr/4.00/tessdata/osd.traineddata ] || need+=(tesseract-ocr-osd)
command -v qpdf >/dev/null || need+=(qpdf)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi
tesseract --version 2>&1 | head -1
# Tesseract's OpenMP threads slow it down 5x on 2 cores when several run at once.
echo "set OMP_THREAD_LIMIT=1 for tesseract (ingest-pipeline sets it on the processes it starts)"
