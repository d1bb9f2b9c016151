#!/usr/bin/env bash
# Install what renders the Markdown ground-truth corpus (pdf/tests/corpus/) and what it is compared
# against: a virtual environment with Python-Markdown (the .md to HTML), WeasyPrint (the HTML to
# PDF, with pango's shaping and pyphen's hyphenation) and pymupdf4llm (a reference PDF-to-Markdown
# converter for the comparison bench), all from PyPI at pinned versions.
#
# Everything goes to ${HOROS_CACHE:-$HOME/.cache/horos}/markdown-venv/ (outside the clone) and the
# script is idempotent: a complete install of these versions is detected and reused; another
# version is replaced in place. It prints the venv's python on stdout (the last line). Needs
# python3 (>= 3.10) with the venv module (Debian: python3-venv), pango (Debian 12: libpango-1.0-0,
# libpangoft2-1.0-0), the DejaVu fonts (fonts-dejavu-core) and access to PyPI.
#
# The corpus's second producer (NAME.latex.pdf: pandoc to LaTeX, set by pdfTeX) needs Debian
# packages, installed with apt-get when pandoc or pdflatex is missing and the script may (root, or
# sudo without a password): pandoc, texlive-latex-base, texlive-latex-recommended,
# texlive-fonts-recommended, without recommends (75 MB to download, 341 MB installed on Debian
# 12). HOROS_CORPUS_LATEX=0 skips them; without them markdown_corpus.py skips
# the LaTeX PDFs with a message.
#
# Then: python scripts/markdown_corpus.py (with that python) regenerates the PDFs.
set -euo pipefail

MARKDOWN_VERSION=${HOROS_MARKDOWN_VERSION:-3.11.3}
WEASYPRINT_VERSION=${HOROS_WEASYPRINT_VERSION:-70.0}
# 2.0 on PyPI is an empty wheel (no module, no requirements): 1.28.2 is the last working release.
PYMUPDF4LLM_VERSION=${HOROS_PYMUPDF4LLM_VERSION:-1.28.2}
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
VENV="$CACHE/markdown-venv"
PY=${PYTHON:-python3}
STAMP="$VENV/.complete-markdown-$MARKDOWN_VERSION-weasyprint-$WEASYPRINT_VERSION-pymupdf4llm-$PYMUPDF4LLM_VERSION"

log() { echo "[setup_markdown_corpus] $*" >&2; }

LATEX_PACKAGES=(pandoc texlive-latex-base texlive-latex-recommended texlive-fonts-recommended)
latex_ready() {
    command -v pandoc >/dev/null && command -v pdflatex >/dev/null || return 1
    local sty
    for sty in fancyhdr booktabs longtable ragged2e mathptmx helvet courier; do
        kpsewhich "$sty.sty" >/dev/null || return 1
    done
}
install_latex() {
    if [ "${HOROS_CORPUS_LATEX:-1}" = 0 ]; then
        return
    fi
    if latex_ready; then
        return
    fi
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            log "no root to install ${LATEX_PACKAGES[*]} (apt-get install" \
                "--no-install-recommends): markdown_corpus.py will skip the LaTeX PDFs"
            return
        fi
    fi
    if ! command -v apt-get >/dev/null; then
        log "no apt-get: install pandoc and TeX Live (fancyhdr, booktabs, ragged2e, psnfss)" \
            "for the LaTeX PDFs"
        return
    fi
    log "installing ${LATEX_PACKAGES[*]} with apt-get"
    "${sudo[@]}" apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${LATEX_PACKAGES[@]}" >&2
}

mkdir -p "$CACHE"
# One installer at a time (parallel test binaries or CI jobs may race on the same cache).
exec 9>"$CACHE/.markdown-venv.lock"
if command -v flock >/dev/null; then flock 9; fi

install_latex

if [ -f "$STAMP" ] && "$VENV/bin/python" -c "import markdown, weasyprint, pymupdf4llm" >/dev/null 2>&1; then
    log "already installed in $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

start=$(date +%s)
if ! [ -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
rm -f "$VENV"/.complete-*
"$VENV/bin/pip" install -q --disable-pip-version-check "markdown==$MARKDOWN_VERSION" \
    "weasyprint==$WEASYPRINT_VERSION" "pymupdf4llm==$PYMUPDF4LLM_VERSION"
"$VENV/bin/python" -c "from importlib.metadata import version as v
for p in ('markdown', 'weasyprint', 'pymupdf4llm', 'pymupdf', 'pyphen'):
    print('[setup_markdown_corpus]', p, v(p))" >&2
touch "$STAMP"
log "installed in $VENV in $(( $(date +%s) - start )) s"
echo "$VENV/bin/python"
