//! PDFs to Markdown by `horos-ref convert` (ours) and by pymupdf4llm (theirs), on the same files
//! on the same machine: the ground-truth corpus (`pdf/tests/corpus/`, each PDF scored against its
//! source with `horos_testkit::markdown_score`) and the public specifications found on this
//! machine (no truth: the structure each system wrote is counted). Each set runs through both
//! systems alternately (ours, theirs, ours, theirs, ...), each run one process for all the set's
//! files writing into a fresh directory, and each system's median wall time gives its pages per
//! second. Issue #53.
//!
//! `cargo run --release -p horos-benches --bin bench_markdown -- [--horos-ref PATH]
//! [--python PATH] [--rounds N] [--outputs DIR] [--write-reference]`
//!
//! - `--horos-ref`: the binary run as `horos-ref convert PATHS... --out DIR --json` (default
//!   `target/release/horos-ref`);
//! - `--python`: the python that runs `scripts/pymupdf4llm_convert.py` (default the venv of
//!   `scripts/setup_markdown_corpus.sh`, `${HOROS_CACHE:-~/.cache/horos}/markdown-venv/bin/python`);
//! - `--rounds`: runs per system and set (default 3);
//! - `--outputs DIR`: the last round's Markdown kept in `DIR/ours/` and `DIR/theirs/`;
//! - `--write-reference`: `pdf/tests/corpus/reference.tsv` rewritten from pymupdf4llm's scores.
//!
//! `scripts/bench_markdown.sh` installs the venv, builds in release and runs this.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use horos_benches::{BenchResult, median};
use horos_pdf::render::{RenderConfig, page_count};
use horos_testkit::markdown_score::{F1, Scores, score, scores_table};
use pulldown_cmark::{Event, Options, Parser, Tag};

/// The public PDFs the comparison used that Debian packages put on a machine (the other
/// two of the four are not installed here).
const PUBLIC: [&str; 2] = [
    "/usr/share/doc/libtasn1-doc/libtasn1.pdf",
    "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
];

/// The two converters compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    /// `horos-ref convert`.
    Ours,
    /// pymupdf4llm through `scripts/pymupdf4llm_convert.py`.
    Theirs,
}

impl System {
    const BOTH: [System; 2] = [System::Ours, System::Theirs];

    fn name(self) -> &'static str {
        match self {
            System::Ours => "ours (horos-ref convert)",
            System::Theirs => "theirs (pymupdf4llm)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            System::Ours => "ours",
            System::Theirs => "theirs",
        }
    }
}

/// The command line.
struct Args {
    horos_ref: PathBuf,
    python: PathBuf,
    rounds: usize,
    outputs: Option<PathBuf>,
    write_reference: bool,
}

impl Args {
    fn parse() -> BenchResult<Args> {
        let cache = std::env::var_os("HOROS_CACHE").map_or_else(
            || {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/horos")
            },
            PathBuf::from,
        );
        let mut args = Args {
            horos_ref: root().join("target/release/horos-ref"),
            python: cache.join("markdown-venv/bin/python"),
            rounds: 3,
            outputs: None,
            write_reference: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--horos-ref" => args.horos_ref = value()?.into(),
                "--python" => args.python = value()?.into(),
                "--rounds" => {
                    args.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?;
                }
                "--outputs" => args.outputs = Some(value()?.into()),
                "--write-reference" => args.write_reference = true,
                other => {
                    return Err(format!("unknown argument {other} (see the file's doc)").into());
                }
            }
        }
        if args.rounds == 0 {
            return Err("--rounds must be at least 1".into());
        }
        Ok(args)
    }
}

/// The workspace root (the benches crate's parent).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn corpus_dir() -> PathBuf {
    root().join("pdf/tests/corpus")
}

/// One input PDF and its page count.
struct Input {
    path: PathBuf,
    /// The file name, the key of its outputs.
    name: String,
    pages: u32,
}

impl Input {
    fn read(path: PathBuf) -> BenchResult<Input> {
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let pages = page_count(data, &RenderConfig::default())
            .map_err(|e| format!("{}: page count: {e}", path.display()))?;
        let name = file_name(&path)?;
        Ok(Input { path, name, pages })
    }
}

fn file_name(path: &Path) -> BenchResult<String> {
    Ok(path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: no UTF-8 file name", path.display()))?
        .to_owned())
}

/// A set of inputs run together: the corpus, or the public PDFs.
struct Set {
    name: &'static str,
    inputs: Vec<Input>,
}

impl Set {
    fn pages(&self) -> u32 {
        self.inputs.iter().map(|i| i.pages).sum()
    }
}

/// One run of one system over one set: its wall time, the Markdown written per input file name,
/// and per-file seconds where the system reports them.
struct Run {
    seconds: f64,
    markdown: BTreeMap<String, String>,
    per_file: BTreeMap<String, f64>,
}

/// `horos-ref convert PATHS... --out DIR --json`, as a user runs it, into a fresh directory.
fn run_ours(horos_ref: &Path, set: &Set) -> BenchResult<Run> {
    let out = tempfile::tempdir()?;
    let start = Instant::now();
    let output = Command::new(horos_ref)
        .arg("convert")
        .args(set.inputs.iter().map(|i| &i.path))
        .arg("--out")
        .arg(out.path())
        .arg("--json")
        .output()
        .map_err(|e| format!("{}: {e}", horos_ref.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!(
            "horos-ref convert failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("horos-ref convert --json printed no JSON object: {e}"))?;
    let files = summary["files"]
        .as_array()
        .ok_or("horos-ref convert --json: no \"files\"")?;
    let mut markdown = BTreeMap::new();
    for file in files {
        let (Some(path), Some(written)) = (file["path"].as_str(), file["output"].as_str()) else {
            return Err(
                format!("horos-ref convert --json: a file without path or output: {file}").into(),
            );
        };
        let text = std::fs::read_to_string(written).map_err(|e| format!("{written}: {e}"))?;
        markdown.insert(file_name(Path::new(path))?, text);
    }
    Ok(Run {
        seconds,
        markdown,
        per_file: BTreeMap::new(),
    })
}

/// `scripts/pymupdf4llm_convert.py --out DIR PATHS...` by the venv's python, into a fresh
/// directory.
fn run_theirs(python: &Path, set: &Set) -> BenchResult<Run> {
    let out = tempfile::tempdir()?;
    let start = Instant::now();
    let output = Command::new(python)
        .arg(root().join("scripts/pymupdf4llm_convert.py"))
        .arg("--out")
        .arg(out.path())
        .args(set.inputs.iter().map(|i| &i.path))
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!(
            "pymupdf4llm_convert.py failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let mut markdown = BTreeMap::new();
    let mut per_file = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("pymupdf4llm_convert.py printed {line:?}: {e}"))?;
        let (Some(path), Some(written)) = (v["path"].as_str(), v["output"].as_str()) else {
            continue;
        };
        let name = file_name(Path::new(path))?;
        let text = std::fs::read_to_string(written).map_err(|e| format!("{written}: {e}"))?;
        markdown.insert(name.clone(), text);
        per_file.insert(name, v["seconds"].as_f64().unwrap_or(f64::NAN));
    }
    Ok(Run {
        seconds,
        markdown,
        per_file,
    })
}

/// What both systems did on one set: every run's wall time, per-file times (theirs), and the
/// last round's Markdown.
struct Measured {
    seconds: [Vec<f64>; 2],
    per_file: BTreeMap<String, Vec<f64>>,
    markdown: [BTreeMap<String, String>; 2],
}

impl Measured {
    fn pages_per_s(&self, set: &Set, system: usize) -> f64 {
        let mut s = self.seconds[system].clone();
        f64::from(set.pages()) / median(&mut s)
    }

    fn markdown(&self, system: System, name: &str) -> BenchResult<&str> {
        self.markdown[system as usize]
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("{}: no output for {name}", system.short()).into())
    }
}

/// The set through both systems, alternating, `rounds` times each.
fn measure(args: &Args, set: &Set) -> BenchResult<Measured> {
    let mut m = Measured {
        seconds: [Vec::new(), Vec::new()],
        per_file: BTreeMap::new(),
        markdown: [BTreeMap::new(), BTreeMap::new()],
    };
    for round in 1..=args.rounds {
        for system in System::BOTH {
            let run = match system {
                System::Ours => run_ours(&args.horos_ref, set)?,
                System::Theirs => run_theirs(&args.python, set)?,
            };
            eprintln!(
                "[bench_markdown] {} round {round}: {} {:.2} s",
                set.name,
                system.short(),
                run.seconds
            );
            m.seconds[system as usize].push(run.seconds);
            for (name, s) in run.per_file {
                m.per_file.entry(name).or_default().push(s);
            }
            m.markdown[system as usize] = run.markdown;
        }
    }
    Ok(m)
}

/// The truth of a corpus PDF: the `.md` named by the PDF's file name up to its first dot, less
/// its first line (the renderer's options).
fn truth(pdf_name: &str) -> BenchResult<String> {
    let stem = pdf_name.split('.').next().unwrap_or(pdf_name);
    let path = corpus_dir().join(format!("{stem}.md"));
    let source = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(source
        .split_once('\n')
        .map_or("", |(_, rest)| rest)
        .to_owned())
}

/// The structure a Markdown document holds, counted by pulldown-cmark with GFM tables and
/// footnotes (the scorer's options).
#[derive(Default)]
struct Structure {
    headings: usize,
    list_items: usize,
    code_blocks: usize,
    tables: usize,
    table_cells: usize,
}

impl Structure {
    fn of(markdown: &str) -> Structure {
        let mut s = Structure::default();
        for event in Parser::new_ext(markdown, Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES) {
            match event {
                Event::Start(Tag::Heading { .. }) => s.headings += 1,
                Event::Start(Tag::Item) => s.list_items += 1,
                Event::Start(Tag::CodeBlock(_)) => s.code_blocks += 1,
                Event::Start(Tag::Table(_)) => s.tables += 1,
                Event::Start(Tag::TableCell) => s.table_cells += 1,
                _ => {}
            }
        }
        s
    }
}

/// One line naming the CPU (model, cores) and the kernel.
fn machine() -> String {
    let cpu = horos_benches::cpu();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "?".into(), |k| k.trim().to_owned());
    format!("{cpu}, Linux {kernel}")
}

/// A command's first line of output, or what went wrong.
fn first_line(program: &Path, args: &[&str], dir: &Path) -> String {
    match Command::new(program).args(args).current_dir(dir).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned(),
        Ok(o) => format!("({} failed: {})", program.display(), o.status),
        Err(e) => format!("({}: {e})", program.display()),
    }
}

fn print_versions(args: &Args) {
    let root = root();
    let commit = first_line(
        Path::new("git"),
        &["describe", "--always", "--dirty", "--abbrev=12"],
        &root,
    );
    println!("machine: {}", machine());
    println!(
        "ours: {} ({}), workspace at commit {commit}",
        first_line(&args.horos_ref, &["--version"], &root),
        args.horos_ref.display()
    );
    println!(
        "theirs: {} ({})",
        first_line(
            &args.python,
            &[
                &root
                    .join("scripts/pymupdf4llm_convert.py")
                    .to_string_lossy(),
                "--versions"
            ],
            &root,
        ),
        args.python.display()
    );
}

/// An F1 cell: `f1 (matched/truth/found)`, `-` when both sides are empty.
fn f1_cell(f: &F1) -> String {
    if f.truth == 0 && f.found == 0 {
        "-".into()
    } else {
        format!("{:.3} ({}/{}/{})", f.f1(), f.matched, f.truth, f.found)
    }
}

/// F1 counts summed over documents (the pooled F1 of the whole corpus).
fn pooled(fs: impl Iterator<Item = F1>) -> F1 {
    fs.fold(F1::default(), |a, f| F1 {
        truth: a.truth + f.truth,
        found: a.found + f.found,
        matched: a.matched + f.matched,
    })
}

/// Both systems' scores per document in one table, and a last row pooling the corpus.
fn side_by_side(rows: &[(String, Scores, Scores)]) -> String {
    let mut out = String::from(
        "| document | text ours | text theirs | headings ours | headings theirs | list items ours \
         | list items theirs | code ours | code theirs | table cells ours | table cells theirs \
         | order errors ours | order errors theirs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let fs = |s: &Scores| [s.heading, s.list_item, s.code_block, s.table_cell];
    let mut line = |name: &str, text: [f64; 2], f: [[F1; 4]; 2], order: [usize; 2]| {
        let mut cells = vec![format!("{:.3}", text[0]), format!("{:.3}", text[1])];
        for (o, t) in f[0].iter().zip(&f[1]) {
            cells.push(f1_cell(o));
            cells.push(f1_cell(t));
        }
        cells.push(order[0].to_string());
        cells.push(order[1].to_string());
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    };
    for (name, ours, theirs) in rows {
        line(
            name,
            [ours.text_similarity, theirs.text_similarity],
            [fs(ours), fs(theirs)],
            [ours.reading_order_errors, theirs.reading_order_errors],
        );
    }
    let n = rows.len().max(1) as f64;
    let mean = |pick: fn(&(String, Scores, Scores)) -> f64| rows.iter().map(pick).sum::<f64>() / n;
    let pool = |side: usize, k: usize| {
        pooled(rows.iter().map(|r| {
            let s = if side == 0 { &r.1 } else { &r.2 };
            fs(s)[k]
        }))
    };
    let total = |side: usize| {
        rows.iter()
            .map(|r| {
                if side == 0 {
                    r.1.reading_order_errors
                } else {
                    r.2.reading_order_errors
                }
            })
            .sum()
    };
    line(
        "**all** (mean text, pooled F1, total errors)",
        [mean(|r| r.1.text_similarity), mean(|r| r.2.text_similarity)],
        [
            [pool(0, 0), pool(0, 1), pool(0, 2), pool(0, 3)],
            [pool(1, 0), pool(1, 1), pool(1, 2), pool(1, 3)],
        ],
        [total(0), total(1)],
    );
    out
}

fn print_speed(set: &Set, m: &Measured) {
    println!(
        "### Speed on {} ({} files, {} pages; median of {} runs each, alternating)",
        set.name,
        set.inputs.len(),
        set.pages(),
        m.seconds[0].len()
    );
    println!();
    println!("| system | runs (s) | median (s) | pages/s |");
    println!("|---|---|---:|---:|");
    let mut rates = [0.0; 2];
    for system in System::BOTH {
        let i = system as usize;
        let runs: Vec<String> = m.seconds[i].iter().map(|s| format!("{s:.2}")).collect();
        rates[i] = m.pages_per_s(set, i);
        println!(
            "| {} | {} | {:.2} | {:.1} |",
            system.name(),
            runs.join(", "),
            median(&mut m.seconds[i].clone()),
            rates[i]
        );
    }
    println!();
    println!(
        "ours / theirs: {:.1}× the pages per second",
        rates[0] / rates[1]
    );
    println!();
    println!("pymupdf4llm per file (median of its own timing, inside the process):");
    println!();
    println!("| file | pages | seconds | pages/s |");
    println!("|---|---:|---:|---:|");
    for input in &set.inputs {
        let Some(times) = m.per_file.get(&input.name) else {
            continue;
        };
        let s = median(&mut times.clone());
        println!(
            "| {} | {} | {s:.2} | {:.1} |",
            input.name,
            input.pages,
            f64::from(input.pages) / s
        );
    }
    println!();
}

/// `pdf/tests/corpus/reference.tsv` from pymupdf4llm's scores.
fn write_reference(rows: &[(String, Scores, Scores)], versions: &str) -> BenchResult<()> {
    let mut tsv = format!(
        "# pymupdf4llm {versions} on each corpus PDF, scored by horos_testkit::markdown_score (F1; - where the document has none).\n\
         # Written by `bench_markdown --write-reference`; the corpus test holds the layout engine to at least these.\n\
         pdf\ttext\theadings\tlist_items\tcode_blocks\ttable_cells\n"
    );
    for (name, _, theirs) in rows {
        let f = |f: &F1| {
            if f.truth == 0 && f.found == 0 {
                "-".to_owned()
            } else {
                format!("{:.3}", f.f1())
            }
        };
        let _ = writeln!(
            tsv,
            "{name}\t{:.3}\t{}\t{}\t{}\t{}",
            theirs.text_similarity,
            f(&theirs.heading),
            f(&theirs.list_item),
            f(&theirs.code_block),
            f(&theirs.table_cell)
        );
    }
    let path = corpus_dir().join("reference.tsv");
    std::fs::write(&path, tsv).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// pymupdf4llm's version, for the reference file's comment.
fn pymupdf4llm_version(args: &Args) -> String {
    let line = first_line(
        &args.python,
        &[
            &root()
                .join("scripts/pymupdf4llm_convert.py")
                .to_string_lossy(),
            "--versions",
        ],
        &root(),
    );
    serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v["pymupdf4llm"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "(unknown version)".into())
}

fn keep_outputs(dir: &Path, sets: &[(&Set, &Measured)]) -> BenchResult<()> {
    for system in System::BOTH {
        let sub = dir.join(system.short());
        std::fs::create_dir_all(&sub)?;
        for (set, m) in sets {
            for input in &set.inputs {
                let stem = input.name.strip_suffix(".pdf").unwrap_or(&input.name);
                std::fs::write(
                    sub.join(format!("{stem}.md")),
                    m.markdown(system, &input.name)?,
                )?;
            }
        }
    }
    println!("outputs kept in {}/{{ours,theirs}}/", dir.display());
    Ok(())
}

fn corpus_set() -> BenchResult<Set> {
    let mut pdfs: Vec<PathBuf> = std::fs::read_dir(corpus_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pdf"))
        .collect();
    pdfs.sort();
    if pdfs.is_empty() {
        return Err(format!("no PDF in {}", corpus_dir().display()).into());
    }
    Ok(Set {
        name: "the corpus",
        inputs: pdfs
            .into_iter()
            .map(Input::read)
            .collect::<BenchResult<_>>()?,
    })
}

fn public_set() -> BenchResult<Set> {
    let mut inputs = Vec::new();
    for path in PUBLIC {
        if Path::new(path).is_file() {
            inputs.push(Input::read(path.into())?);
        } else {
            eprintln!("[bench_markdown] {path} is not on this machine: left out");
        }
    }
    Ok(Set {
        name: "the public PDFs",
        inputs,
    })
}

fn main() -> BenchResult<()> {
    let args = Args::parse()?;
    println!("bench_markdown: PDFs to Markdown, horos-ref convert against pymupdf4llm");
    println!();
    print_versions(&args);
    println!();
    let corpus = corpus_set()?;
    let public = public_set()?;
    let measured_corpus = measure(&args, &corpus)?;
    let measured_public = if public.inputs.is_empty() {
        None
    } else {
        Some(measure(&args, &public)?)
    };

    // Scores on the corpus.
    let mut rows = Vec::new();
    for input in &corpus.inputs {
        let truth = truth(&input.name)?;
        let ours = score(&truth, measured_corpus.markdown(System::Ours, &input.name)?);
        let theirs = score(
            &truth,
            measured_corpus.markdown(System::Theirs, &input.name)?,
        );
        rows.push((input.name.clone(), ours, theirs));
    }
    println!("## Scores on the corpus");
    println!();
    println!("F1 cells: f1 (matched/truth/found); `-`: none in the truth nor the output.");
    println!();
    println!("{}", side_by_side(&rows));
    for (i, system) in System::BOTH.iter().enumerate() {
        println!("### {}", system.name());
        println!();
        let table: Vec<(&str, &Scores)> = rows
            .iter()
            .map(|(n, o, t)| (n.as_str(), if i == 0 { o } else { t }))
            .collect();
        println!("{}", scores_table(&table));
    }

    println!("## Speed");
    println!();
    print_speed(&corpus, &measured_corpus);
    if let Some(m) = &measured_public {
        print_speed(&public, m);

        println!("## Structure written on the public PDFs (no truth)");
        println!();
        println!(
            "| file | pages | system | headings | list items | code blocks | tables (cells) |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|");
        for input in &public.inputs {
            for system in System::BOTH {
                let s = Structure::of(m.markdown(system, &input.name)?);
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} ({}) |",
                    input.name,
                    input.pages,
                    system.short(),
                    s.headings,
                    s.list_items,
                    s.code_blocks,
                    s.tables,
                    s.table_cells
                );
            }
        }
        println!();
    }

    if let Some(dir) = &args.outputs {
        let mut sets = vec![(&corpus, &measured_corpus)];
        if let Some(m) = &measured_public {
            sets.push((&public, m));
        }
        keep_outputs(dir, &sets)?;
    }
    if args.write_reference {
        write_reference(&rows, &pymupdf4llm_version(&args))?;
    }
    Ok(())
}
