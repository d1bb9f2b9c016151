#!/usr/bin/env bash
# Real PDF inputs for ingest-pipeline's tests and benchmarks, from Debian packages (no other
# network). Usage: scripts/fetch_sample_pdfs.sh [DIR]   (default: ~/.cache/horos-rs/sample-pdfs)
# Prints DIR at the end; tests read it from HOROS_SAMPLE_PDFS (or use the default).
#
# Produces in DIR:
#   manual.pdf       camlidl-doc's manual: 26 A4 pages of text, grammar and type tables (pdfTeX)
#   amc-sample.pdf   auto-multiple-choice-doc-pdf's sample exam sheet: 30 letter pages, boxes, forms
#   excerpt.pdf      manual.pdf's pages 3-6 (page 3 of the excerpt is the attribute table), for quick tests
#   truncated.pdf    manual.pdf cut in the middle
#   encrypted.pdf    manual.pdf encrypted with a user password (qpdf, AES-256)
#   huge-page.pdf    manual.pdf with every page's MediaBox set to 20000 x 20000 points (qpdf + fix-qdf)
#   not-a-pdf.pdf    a text file (a licence) named .pdf
#   empty.pdf        an empty file
# Needs: apt-get (download only: no install of the -doc packages), dpkg-deb, qpdf (installed if
# missing and running as root). Idempotent; about 5 s on a warm apt cache.
set -euo pipefail
DIR=${1:-${HOROS_SAMPLE_PDFS:-$HOME/.cache/horos-rs/sample-pdfs}}
mkdir -p "$DIR"
if [ -s "$DIR/.complete-v3" ]; then echo "$DIR"; exit 0; fi
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
if ! command -v qpdf >/dev/null || ! command -v fix-qdf >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q qpdf >/dev/null; else echo "need qpdf (apt-get install qpdf)" >&2; exit 1; fi
fi
download() { apt-get download "$1" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download "$1" >/dev/null; }; }
download camlidl-doc
download auto-multiple-choice-doc-pdf
dpkg-deb -x camlidl-doc_*.deb x
dpkg-deb -x auto-multiple-choice-doc-pdf_*.deb x
cp x/usr/share/doc/camlidl/camlidl-*.doc.pdf "$DIR/manual.pdf"
cp x/usr/share/doc/auto-multiple-choice/latex/sample-amc.pdf "$DIR/amc-sample.pdf"
qpdf "$DIR/manual.pdf" --pages "$DIR/manual.pdf" 3-6 -- "$DIR/excerpt.pdf"
size=$(stat -c %s "$DIR/manual.pdf")
head -c $((size / 2)) "$DIR/manual.pdf" > "$DIR/truncated.pdf"
qpdf --encrypt horos-user-pw horos-owner-pw 256 -- "$DIR/manual.pdf" "$DIR/encrypted.pdf"
qpdf --qdf --object-streams=disable "$DIR/manual.pdf" qdf.pdf
# QDF writes arrays one value a line: join each MediaBox array before replacing it.
sed -E '/\/MediaBox *\[/{:a;/\]/!{N;ba};s|/MediaBox *\[[^]]*\]|/MediaBox [0 0 20000 20000]|}' qdf.pdf > qdf-huge.pdf
fix-qdf qdf-huge.pdf > "$DIR/huge-page.pdf"
cp /usr/share/common-licenses/GPL-3 "$DIR/not-a-pdf.pdf"
: > "$DIR/empty.pdf"
date -u +%FT%TZ > "$DIR/.complete-v3"
echo "$DIR"
