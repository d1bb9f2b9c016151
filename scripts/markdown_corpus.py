#!/usr/bin/env python3
"""Render the Markdown ground-truth corpus (pdf/tests/corpus/*.md) to PDFs beside the sources.

Each NAME.md is turned into HTML by Python-Markdown (extensions: tables, fenced_code, footnotes)
and into NAME.pdf by WeasyPrint, with one stylesheet put together from the options on the
document's first line, an HTML comment such as

    <!-- corpus: two-column justify -->

Options (any order, separated by spaces; unknown ones are an error):

- ``serif``: DejaVu Serif body text (otherwise DejaVu Sans).
- ``justify``: justified paragraphs and list items with automatic hyphenation (``hyphens: auto``,
  ``lang="en"``, pyphen's dictionary), so that some words are split at line ends with a hyphen:
  an ASCII hyphen-minus (``hyphenate-character: "-"``, what most producers draw), the same
  character as in compounds such as "born-digital" that may also fall at a line end.
- ``unicode-hyphen``: with ``justify``, the split is marked by WeasyPrint's default hyphenation
  character instead, U+2010 HYPHEN ("‐"), which a text layer reader must treat as a hyphen too.
- ``two-column``: the body flows in two columns (``column-count: 2``); the title spans both.
- ``ruled-tables``: every table cell has a border; without it, tables have no rules at all and
  their columns are aligned by whitespace only.
- ``page-footnotes``: each footnote is set at the bottom of the page that calls it (CSS
  ``float: footnote``, numbered by WeasyPrint's footnote counter, under a short rule) instead of
  Python-Markdown's list at the end of the document. The truth still has the definitions last:
  a layout engine is expected to gather them there.

Every document gets, whatever its options: A4 pages, headings bigger and bold, code in DejaVu Sans
Mono, a running header with the document's title (its first ``# `` heading) at the top of each
page and the page number at the bottom. Header and page numbers are not in the ground truth: a
layout engine must drop them. Footnotes are Python-Markdown's by default: a numbered list at the
end of the document after a rule, their back-links removed.

The same inputs and versions give byte-identical PDFs (SOURCE_DATE_EPOCH fixes the fonts'
timestamps).

A second producer, so that the corpus does not measure one producer's habits only: pandoc reads
the same Markdown (GFM with footnotes, the options line removed) and writes LaTeX, which pdfTeX
sets as NAME.latex.pdf: URW's Type 1 fonts (``serif``: Nimbus Roman, i.e. Times, otherwise
Nimbus Sans, i.e. Helvetica; code in Nimbus Mono, i.e. Courier), TeX's own line breaking and
hyphenation (Knuth-Plass, hyphen from the font), LaTeX's article text block, indented paragraphs
with no space between them, ``\maketitle`` for the title, booktabs rules (horizontal only) for
``ruled-tables`` and none otherwise, footnotes always at the bottom of their page, and
``fancyhdr`` for the running header (the title, small italics) and the page number.
``justify`` is TeX's default (otherwise ``\RaggedRight``), ``two-column`` is the ``twocolumn``
class option, ``unicode-hyphen`` and ``page-footnotes`` change nothing there.
It needs ``pandoc`` and ``pdflatex`` on the PATH (scripts/setup_markdown_corpus.sh installs them
with apt); without them that pass is skipped with a message. SOURCE_DATE_EPOCH and
FORCE_SOURCE_DATE make pdfTeX's output byte-identical too.

Usage: python scripts/markdown_corpus.py [--producer all|weasyprint|latex] [NAME.md ...]
  (default: both producers, every .md but README.md)
Run it with the python that scripts/setup_markdown_corpus.sh prints.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import markdown
import weasyprint

# fontTools stamps each embedded font subset with the time unless this is set: with it, the same
# versions write byte-identical PDFs.
os.environ.setdefault("SOURCE_DATE_EPOCH", "1767225600")

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "pdf" / "tests" / "corpus"
OPTIONS = {"serif", "justify", "unicode-hyphen", "two-column", "ruled-tables", "page-footnotes"}
HEADER = re.compile(r"\A<!--\s*corpus:([^>]*?)-->\s*\n")

BASE_CSS = """
@page {
  size: A4;
  margin: 2.2cm 2cm 2.2cm 2cm;
  @top-center { content: "%(title)s"; font: italic 8.5pt "DejaVu Sans"; color: #444; }
  @bottom-center { content: counter(page); font: 8.5pt "DejaVu Sans"; color: #444; }
}
html { font: 10.5pt/1.4 %(body_font)s; }
h1 { font-size: 20pt; font-weight: bold; margin: 0 0 0.8em; line-height: 1.2; }
h2 { font-size: 14.5pt; font-weight: bold; margin: 1.2em 0 0.5em; line-height: 1.2; }
h3 { font-size: 12pt; font-weight: bold; margin: 1em 0 0.4em; line-height: 1.2; }
h1, h2, h3 { break-after: avoid; hyphens: manual; text-align: left; }
p { margin: 0 0 0.6em; }
ul, ol { margin: 0 0 0.6em; padding-left: 1.6em; }
li > ul, li > ol { margin: 0.2em 0 0.2em; }
li { margin: 0 0 0.15em; }
a { color: #1a4c8b; text-decoration: none; }
code { font-family: "DejaVu Sans Mono"; font-size: 0.9em; }
pre { font-family: "DejaVu Sans Mono"; font-size: 8.5pt; line-height: 1.3;
      margin: 0.4em 0 0.8em 1em; white-space: pre; hyphens: manual; text-align: left; }
pre code { font-size: 1em; }
table { border-collapse: collapse; margin: 0.4em 0 0.9em; font-size: 9.5pt; }
th, td { padding: 0.15em 1.1em 0.15em 0; text-align: left; vertical-align: top; hyphens: manual; }
th { font-weight: bold; }
.footnote { font-size: 8.5pt; margin-top: 1.5em; }
.footnote hr { border: 0; border-top: 0.5pt solid #666; width: 30%%; margin: 0 0 0.5em; }
sup { font-size: 0.7em; line-height: 0; }
"""
JUSTIFY_CSS = "p, li { text-align: justify; hyphens: auto; }\n"
ASCII_HYPHEN_CSS = 'p, li { hyphenate-character: "-"; }\n'
TWO_COLUMN_CSS = "body { column-count: 2; column-gap: 0.9cm; } h1 { column-span: all; }\n"
# No padding or margin on the footnote area: WeasyPrint 70 then defers every footnote to the next
# page.
PAGE_FOOTNOTES_CSS = """
@page { @footnote { border-top: 0.5pt solid #666; } }
.fn { float: footnote; font-size: 8.5pt; text-align: left; hyphens: manual; line-height: 1.3; }
::footnote-call { content: counter(footnote); vertical-align: super; font-size: 0.7em;
                  line-height: 0; }
::footnote-marker { content: counter(footnote) ". "; }
"""
RULED_CSS = """
th, td { border: 0.6pt solid #333; padding: 0.2em 0.5em; }
"""


def options_of(text: str, name: str) -> tuple[set[str], str]:
    """The corpus options on the first line, and the text without that line."""
    match = HEADER.match(text)
    if not match:
        return set(), text
    options = set(match.group(1).split())
    unknown = options - OPTIONS
    if unknown:
        sys.exit(f"{name}: unknown corpus options {sorted(unknown)} (known: {sorted(OPTIONS)})")
    return options, text[match.end():]


def title_of(text: str, name: str) -> str:
    """The first level-1 heading's text, for the running header."""
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    sys.exit(f"{name}: no '# ' title")


def stylesheet(options: set[str], title: str) -> str:
    body_font = '"DejaVu Serif"' if "serif" in options else '"DejaVu Sans"'
    css_title = title.replace("\\", "\\\\").replace('"', '\\"')
    css = BASE_CSS % {"title": css_title, "body_font": body_font}
    if "justify" in options:
        css += JUSTIFY_CSS
        if "unicode-hyphen" not in options:
            css += ASCII_HYPHEN_CSS
    if "two-column" in options:
        css += TWO_COLUMN_CSS
    if "ruled-tables" in options:
        css += RULED_CSS
    if "page-footnotes" in options:
        css += PAGE_FOOTNOTES_CSS
    return css


BACKREF = re.compile(r'(&#160;)?<a class="footnote-backref"[^>]*>.*?</a>')
FOOTNOTES = re.compile(r'<div class="footnote">.*?</div>', re.S)
FOOTNOTE = re.compile(r'<li id="fn:([^"]+)">\s*<p>(.*?)</p>\s*</li>', re.S)
FOOTNOTE_REF = re.compile(r'<sup id="fnref:([^"]+)"><a class="footnote-ref"[^>]*>[^<]*</a></sup>')


def footnotes_at_page_bottom(html: str, name: str) -> str:
    """Each single-paragraph footnote moved to its call, as a ``float: footnote`` span."""
    block = FOOTNOTES.search(html)
    if not block:
        return html
    notes = dict(FOOTNOTE.findall(block.group(0)))
    html = html[: block.start()] + html[block.end():]

    def call(match: re.Match) -> str:
        if match.group(1) not in notes:
            sys.exit(f"{name}: footnote {match.group(1)} has no single-paragraph definition")
        return f'<span class="fn">{notes[match.group(1)]}</span>'

    return FOOTNOTE_REF.sub(call, html)


def render(source: pathlib.Path) -> pathlib.Path:
    text = source.read_text(encoding="utf-8")
    options, body = options_of(text, source.name)
    title = title_of(body, source.name)
    html_body = markdown.markdown(body, extensions=["tables", "fenced_code", "footnotes"])
    html_body = BACKREF.sub("", html_body)
    if "page-footnotes" in options:
        html_body = footnotes_at_page_bottom(html_body, source.name)
    html = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{stylesheet(options, title)}</style></head>"
        f"<body>{html_body}</body></html>"
    )
    out = source.with_suffix(".pdf")
    document = weasyprint.HTML(string=html, base_url=str(source.parent)).render()
    document.write_pdf(out)
    print(f"{out.name}: {len(document.pages)} page(s), {out.stat().st_size // 1024} KiB, "
          f"options {sorted(options) or '-'}")
    return out


# After pandoc's own preamble (--include-in-header). \maketitle empties \@title, so the running
# header keeps a copy; the title page gets the same header (plain is redefined).
LATEX_HEADER = r"""
\usepackage{courier}
\usepackage{fancyhdr}
\makeatletter\AtBeginDocument{\let\corpustitle\@title}\makeatother
\fancypagestyle{corpus}{%
  \fancyhf{}%
  \fancyhead[C]{\small\itshape\corpustitle}%
  \fancyfoot[C]{\small\thepage}%
  \renewcommand{\headrulewidth}{0pt}}
\fancypagestyle{plain}{\pagestyle{corpus}}
\pagestyle{corpus}
"""
LATEX_SANS = r"\usepackage[scaled=0.92]{helvet}\renewcommand{\familydefault}{\sfdefault}" "\n"
LATEX_RAGGED = r"\usepackage{ragged2e}\AtBeginDocument{\RaggedRight}" "\n"
# pandoc writes booktabs' \toprule, \midrule, \bottomrule around every table: gone, the table has
# no rules at all.
LATEX_UNRULED = (
    r"\AtBeginDocument{\def\toprule{\noalign{}}\def\midrule{\noalign{}}"
    r"\def\bottomrule{\noalign{}}}" "\n"
)


def latex_tools() -> str | None:
    """Why the LaTeX pass cannot run, or None when it can."""
    missing = [tool for tool in ("pandoc", "pdflatex") if shutil.which(tool) is None]
    if missing:
        return (f"{' and '.join(missing)} not found (bash scripts/setup_markdown_corpus.sh "
                "installs them with apt)")
    return None


def render_latex(source: pathlib.Path) -> pathlib.Path:
    """NAME.md set by pandoc (GFM to LaTeX) and pdfTeX as NAME.latex.pdf."""
    text = source.read_text(encoding="utf-8")
    options, body = options_of(text, source.name)
    title_of(body, source.name)
    header = LATEX_HEADER
    if "serif" not in options:
        header += LATEX_SANS
    if "justify" not in options:
        header += LATEX_RAGGED
    if "ruled-tables" not in options:
        header += LATEX_UNRULED
    out = source.with_suffix(".latex.pdf")
    env = dict(os.environ, FORCE_SOURCE_DATE="1")
    with tempfile.TemporaryDirectory(prefix="corpus-latex-") as tmp:
        work = pathlib.Path(tmp)
        (work / "body.md").write_text(body, encoding="utf-8")
        (work / "header.tex").write_text(header, encoding="utf-8")
        pandoc = [
            "pandoc", "--from=gfm+footnotes", "--to=latex", "--standalone",
            # The single '# ' heading becomes the document's title (\maketitle), '## ' \section.
            "--shift-heading-level-by=-1",
            # Highlighting needs framed.sty (texlive-latex-extra): plain verbatim instead.
            "--no-highlight",
            "--include-in-header=header.tex",
            # URW's Times (Nimbus Roman) for the text: one design size, where Latin Modern's
            # optical sizes would embed twice the fonts (over 200 KB a document).
            "--variable=fontfamily:mathptmx",
            "--variable=papersize:a4",
            # Narrow columns in 12 pt: more breaks and hyphens, and a second page.
            f"--variable=fontsize:{'12pt' if 'two-column' in options else '11pt'}",
            # No geometry: article's own A4 text block, lines of some 70 characters.
            "--variable=indent",
            "--output=doc.tex", "body.md",
        ]
        if "two-column" in options:
            pandoc.append("--variable=classoption:twocolumn")
        subprocess.run(pandoc, cwd=work, env=env, check=True)
        # Twice: longtable's column widths settle on the second run.
        for _ in range(2):
            run = subprocess.run(
                ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                cwd=work, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{source.name}: pdflatex failed:\n{run.stdout[-3000:]}")
        pages = re.search(r"Output written on doc\.pdf \((\d+) pages?", run.stdout)
        shutil.copyfile(work / "doc.pdf", out)
    print(f"{out.name}: {pages.group(1) if pages else '?'} page(s), "
          f"{out.stat().st_size // 1024} KiB, options {sorted(options) or '-'}")
    return out


PRODUCERS = ("all", "weasyprint", "latex")


def main(argv: list[str]) -> None:
    producer = "all"
    if argv and argv[0].startswith("--producer"):
        flag = argv.pop(0)
        producer = flag.split("=", 1)[1] if "=" in flag else (argv.pop(0) if argv else "")
        if producer not in PRODUCERS:
            sys.exit(f"--producer {producer!r}: one of {', '.join(PRODUCERS)}")
    if argv:
        sources = [pathlib.Path(a).resolve() for a in argv]
    else:
        sources = sorted(p for p in CORPUS.glob("*.md") if p.name != "README.md")
    if producer in ("all", "weasyprint"):
        for source in sources:
            render(source)
    if producer in ("all", "latex"):
        why_not = latex_tools()
        if why_not:
            print(f"skipping the LaTeX pass (NAME.latex.pdf): {why_not}", file=sys.stderr)
            if producer == "latex":
                sys.exit(1)
        else:
            for source in sources:
                render_latex(source)


if __name__ == "__main__":
    main(sys.argv[1:])
