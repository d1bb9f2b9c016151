#!/usr/bin/env python3
"""PDFs to Markdown with pymupdf4llm, one process for all files: the "theirs" side of bench_markdown.

    python scripts/pymupdf4llm_convert.py --out DIR FILE.pdf...
    python scripts/pymupdf4llm_convert.py --versions

Each PDF is converted with pymupdf4llm.to_markdown(path) at its default settings and written to
DIR/NAME.md, NAME being the PDF's file name without its `.pdf` (two PDFs of one name in different
directories would overwrite each other: the bench names none such). One JSON line per file on
stdout: {"path", "output", "pages", "seconds"}; then {"total_seconds"} for the conversions alone
(the bench times the whole process, Python's start and imports included). --versions prints the
versions of Python, pymupdf4llm and PyMuPDF as one JSON object. Run it with the venv's python made
by scripts/setup_markdown_corpus.sh.
"""

import argparse
import json
import os
import platform
import sys
import time
from importlib.metadata import version


def versions():
    return {
        "python": platform.python_version(),
        "pymupdf4llm": version("pymupdf4llm"),
        "pymupdf": version("pymupdf"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the directory the .md files are written into")
    parser.add_argument("--versions", action="store_true", help="print the versions and exit")
    parser.add_argument("pdfs", nargs="*", help="PDF files")
    args = parser.parse_args()
    if args.versions:
        print(json.dumps(versions()))
        return 0
    if not args.out or not args.pdfs:
        parser.error("--out DIR and at least one PDF are needed")

    # Imported here so that --versions stays cheap; the import is inside the timed process.
    import pymupdf
    import pymupdf4llm

    os.makedirs(args.out, exist_ok=True)
    total = time.perf_counter()
    for path in args.pdfs:
        name = os.path.basename(path)
        if name.lower().endswith(".pdf"):
            name = name[: -len(".pdf")]
        output = os.path.join(args.out, name + ".md")
        start = time.perf_counter()
        with pymupdf.open(path) as doc:
            pages = doc.page_count
            markdown = pymupdf4llm.to_markdown(doc)
        with open(output, "w", encoding="utf-8") as f:
            f.write(markdown)
        seconds = time.perf_counter() - start
        print(
            json.dumps({"path": path, "output": output, "pages": pages, "seconds": seconds}),
            flush=True,
        )
    print(json.dumps({"total_seconds": time.perf_counter() - total}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
