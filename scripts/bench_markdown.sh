#!/usr/bin/env bash
# The Markdown comparison bench (issue #53): horos-ref convert against pymupdf4llm on the ground-truth
# corpus (pdf/tests/corpus/) and the public PDFs on this machine, alternating, in one run.
#
# Installs the venv with pymupdf4llm (scripts/setup_markdown_corpus.sh), builds horos-ref and the
# bench in release, and runs the bench; its output is tee'd to /tmp/bench_markdown-DATE.txt and the
# last round's Markdown of both systems is kept under /tmp/bench_markdown-outputs/{ours,theirs}/.
# Arguments go to the bench (e.g. --rounds 5, --write-reference to rewrite
# pdf/tests/corpus/reference.tsv from pymupdf4llm's scores). See docs/benchmarks-markdown.md.
set -euo pipefail

cd "$(dirname "$0")/.."
# The bench reads the committed PDFs: it needs pymupdf4llm, not the renderers' LaTeX.
PYTHON=$(HOROS_CORPUS_LATEX=${HOROS_CORPUS_LATEX:-0} bash scripts/setup_markdown_corpus.sh | tail -n 1)
cargo build --release -p horos-ref -p horos-benches --bin horos-ref --bin bench_markdown
LOG=/tmp/bench_markdown-$(date -u +%Y%m%dT%H%M%SZ).txt
OUTPUTS=/tmp/bench_markdown-outputs
rm -rf "$OUTPUTS"
target/release/bench_markdown --horos-ref target/release/horos-ref --python "$PYTHON" \
    --outputs "$OUTPUTS" "$@" | tee "$LOG"
echo "[bench_markdown.sh] output in $LOG, Markdown in $OUTPUTS/{ours,theirs}/" >&2
