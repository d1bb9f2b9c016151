//! The soak and chaos bench (issue 48): `horos-ref run` started from one configuration as a
//! user starts it, driven for `--minutes` at once with chat at three priorities, demand for
//! three pooled models on one GPU (swaps), async jobs, lane jobs, documents (malformed,
//! encrypted and bomb PDFs among them), oversized image questions and slow or vanishing
//! clients, while upstream servers are SIGKILLed every few minutes and the data directory's
//! disk fills for a while. A row a minute; the targets checked at the end (see `docs/soak.md`).
//!
//! - [`system`]: the configuration, `run`, and its processes read from `/proc`;
//! - [`load`]: the drivers, the poller that follows each submission, the deep health poll;
//! - [`ledger`]: the exactly-once ledger; [`corpus`]: the documents; [`chaos`]: the faults;
//! - [`report`]: the rows and the targets.

pub mod chaos;
pub mod corpus;
pub mod http;
pub mod ledger;
pub mod load;
pub mod report;
pub mod system;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use self::ledger::{Kind, Outcome};
use self::load::{Health, Shared};
use self::report::{Row, Sample, Target};
use self::system::{ADMIN_KEY, KEYS, System};
use crate::BenchResult;

/// What the soak is asked.
#[derive(Debug, Clone)]
pub struct Args {
    /// How long the load runs, in minutes (a drain follows).
    pub minutes: f64,
    /// Where the report's files go.
    pub out: PathBuf,
    /// Drivers not started (names of [`DRIVERS`]) and document classes not submitted (names of
    /// [`corpus::Class`]): to find which load a figure follows.
    pub skip: Vec<String>,
    /// Keep every document ingested (default: each is deleted once finished, a steady corpus).
    pub keep_documents: bool,
}

/// The RSS growth allowed after the warm-up.
const RSS_GROWTH: f64 = 0.10;
/// The descriptors run may hold above the warm-up's (connections in flight vary).
const FD_SLACK: u64 = 32;
/// How long after a kill the deep health may stay red (the supervisor's restart, a reload).
const KILL_GRACE_S: f64 = 60.0;
/// How long after the disk-full phase the deep health may stay red.
const DISK_GRACE_S: f64 = 30.0;

/// When each phase happens, for a run of `total_s` seconds.
#[derive(Debug, Clone)]
struct Plan {
    total_s: f64,
    /// The end of the warm-up: the RSS and descriptors' baseline.
    baseline_s: f64,
    kills_s: Vec<f64>,
    /// The disk-full phase: start and hold.
    disk_full: (f64, f64),
    drain_s: f64,
}

impl Plan {
    fn new(total_s: f64) -> Plan {
        let every = (total_s / 4.0).clamp(60.0, 180.0);
        let disk_full = (0.6 * total_s, (0.05 * total_s).clamp(15.0, 30.0));
        let kills_s = (1..)
            .map(|k| k as f64 * every)
            .take_while(|t| *t < total_s - 30.0)
            .filter(|t| (t - disk_full.0).abs() > 30.0)
            .collect();
        Plan {
            total_s,
            baseline_s: (0.2 * total_s).min(600.0),
            kills_s,
            disk_full,
            drain_s: (0.1 * total_s).clamp(60.0, 120.0),
        }
    }
}

/// Runs the soak; `Ok(true)` when every target is met.
///
/// # Errors
///
/// The system could not be started, or the report not written.
pub fn run(args: &Args) -> BenchResult<bool> {
    std::fs::create_dir_all(&args.out)?;
    let plan = Plan::new(args.minutes * 60.0);
    let mut sys = System::start()?;
    let run_pid = sys.run.id();
    println!(
        "soak: run (pid {run_pid}) serves {} (control {}), data dir {} ({}), {:.1} min of load, \
         baseline after {:.0} s, kills at {:?} s, disk full at {:.0} s for {:.0} s, drivers skipped: {:?}",
        sys.data.addr,
        sys.control.addr,
        sys.dir.display(),
        if sys.tmpfs.is_some() {
            "a tmpfs of its own"
        } else {
            "no tmpfs: no disk-full phase"
        },
        args.minutes,
        plan.baseline_s,
        plan.kills_s,
        plan.disk_full.0,
        plan.disk_full.1,
        args.skip
    );
    let mut shared = Shared::new(sys.data, sys.control, sys.inbox.clone());
    shared.keep_documents = args.keep_documents;
    shared.skip_classes = args
        .skip
        .iter()
        .filter_map(|n| corpus::Class::from_name(n))
        .collect();
    let s = Arc::new(shared);
    let threads = start_drivers(&s, &plan, &args.skip)?;
    let mut csv = std::fs::File::create(args.out.join("soak-minutes.csv"))?;
    writeln!(csv, "{}", report::CSV_HEADER)?;
    let mut jsonl = std::fs::File::create(args.out.join("soak-minutes.jsonl"))?;
    println!("{}", report::HEADER);

    let mut samples: Vec<Sample> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut died: Option<String> = None;
    let mut next_kill = 0;
    let mut disk_note = None;
    let mut disk_thread = None;
    let mut loaded = true;
    let end_s = plan.total_s + plan.drain_s;
    while s.now_s() < end_s {
        let t = s.now_s();
        if let Some(status) = sys.exited() {
            died = Some(format!("run exited at {t:.0} s: {status}"));
            break;
        }
        samples.push(Sample {
            t,
            procs: system::tree(run_pid),
        });
        if next_kill < plan.kills_s.len() && t >= plan.kills_s[next_kill] {
            if !chaos::kill_upstream(&s, run_pid, next_kill) {
                println!("soak: no upstream to kill at {t:.0} s");
            }
            next_kill += 1;
        }
        if disk_thread.is_none() && disk_note.is_none() && t >= plan.disk_full.0 {
            match &sys.tmpfs {
                Some(dir) => {
                    let (s2, dir, hold) = (Arc::clone(&s), dir.clone(), plan.disk_full.1);
                    disk_thread = Some(std::thread::spawn(move || {
                        chaos::disk_full(&s2, &dir, Duration::from_secs_f64(hold))
                    }));
                }
                None => disk_note = Some("skipped: not root, no tmpfs of our own".to_owned()),
            }
        }
        if loaded && t >= plan.total_s {
            loaded = false;
            s.stop_load.store(true, Ordering::Relaxed);
            println!(
                "soak: load stopped at {t:.0} s; draining (at most {:.0} s)",
                plan.drain_s
            );
        }
        if !loaded && s.ledger.open().is_empty() {
            break;
        }
        let minute = (t / 60.0) as usize;
        if rows.len() < minute {
            let row = close_minute(&s, rows.len() + 1, &samples, &sys);
            println!("{}", report::line(&row));
            writeln!(csv, "{}", report::csv(&row))?;
            writeln!(jsonl, "{}", report::json_row(&row))?;
            rows.push(row);
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    // The last (partial) minute.
    let row = close_minute(&s, rows.len() + 1, &samples, &sys);
    println!("{}", report::line(&row));
    writeln!(csv, "{}", report::csv(&row))?;
    writeln!(jsonl, "{}", report::json_row(&row))?;
    rows.push(row);
    s.stop_load.store(true, Ordering::Relaxed);
    s.stop_all.store(true, Ordering::Relaxed);
    if let Some(t) = disk_thread {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => disk_note = Some(format!("failed: {e}")),
            Err(_) => disk_note = Some("its thread panicked".to_owned()),
        }
    }
    let log_tail = sys.log_tail();
    let exit = sys.stop();
    for t in threads {
        let _ = t.join();
    }
    let panicked = std::fs::read_to_string(&sys.log)
        .unwrap_or_default()
        .contains("panicked");
    let targets = targets(&s, &plan, &samples, died.as_deref(), panicked);
    let summary = summary(&s, &plan, &rows, &targets, disk_note.as_deref(), exit);
    std::fs::write(
        args.out.join("soak-summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("\nsoak: targets");
    for t in &targets {
        println!("{}", t.line());
    }
    if let Some(note) = &disk_note {
        println!("soak: disk-full phase {note}");
    }
    for d in s.ledger.duplicates().iter().take(10) {
        println!("soak: duplicate: {d}");
    }
    println!("soak: report in {}", args.out.display());
    if targets.iter().any(|t| t.met == Some(false)) {
        println!("soak: run's log, last lines:\n{log_tail}");
    }
    Ok(targets.iter().all(|t| t.met != Some(false)))
}

/// A driver: its name (what `--skip` names) and its body.
type Driver = (&'static str, Box<dyn FnOnce(&Shared) + Send>);

/// The drivers `--skip` names, in the order they start.
pub const DRIVERS: [&str; 8] = [
    "high",
    "mid",
    "low",
    "swap",
    "async",
    "lane",
    "documents",
    "hostile",
];

fn start_drivers(
    s: &Arc<Shared>,
    plan: &Plan,
    skip: &[String],
) -> BenchResult<Vec<std::thread::JoinHandle<()>>> {
    let ms = Duration::from_millis;
    let doc_period = Duration::from_secs_f64((plan.total_s / 10.0).clamp(20.0, 45.0));
    let drivers: Vec<Driver> = vec![
        (
            "high",
            Box::new(move |s: &Shared| {
                load::chat(s, 0, KEYS[0].1, KEYS[0].2, ms(500), load::lane_model)
            }),
        ),
        (
            "mid",
            Box::new(move |s: &Shared| {
                load::chat(s, 1, KEYS[1].1, KEYS[1].2, ms(300), load::lane_model)
            }),
        ),
        (
            "mid",
            Box::new(move |s: &Shared| {
                load::chat(s, 1, KEYS[1].1, KEYS[1].2, ms(300), load::lane_model)
            }),
        ),
        (
            "low",
            Box::new(move |s: &Shared| {
                load::chat(s, 2, KEYS[2].1, KEYS[2].2, ms(200), load::lane_model)
            }),
        ),
        (
            "swap",
            Box::new(move |s: &Shared| {
                load::chat(s, 3, KEYS[1].1, KEYS[1].2, ms(3000), load::swap_model)
            }),
        ),
        (
            "async",
            Box::new(move |s: &Shared| load::async_jobs(s, ms(2000))),
        ),
        (
            "lane",
            Box::new(move |s: &Shared| load::lane_jobs(s, 4, ms(5000))),
        ),
        (
            "documents",
            Box::new(move |s: &Shared| load::documents(s, doc_period, 2)),
        ),
        (
            "hostile",
            Box::new(move |s: &Shared| load::hostile_clients(s, ms(4000))),
        ),
        ("poller", Box::new(load::poller)),
        (
            "health",
            Box::new(move |s: &Shared| load::health(s, ms(3000))),
        ),
    ];
    let mut threads = Vec::new();
    for (name, body) in drivers {
        if !skip.iter().any(|x| x == name) {
            threads.push(load::spawn(name, s, body)?);
        }
    }
    Ok(threads)
}

/// The row of minute `minute` (1-based): its samples, the ledger, /metrics.
fn close_minute(s: &Shared, minute: usize, samples: &[Sample], sys: &System) -> Row {
    let (from, to) = ((minute - 1) as f64 * 60.0, minute as f64 * 60.0);
    let in_minute: Vec<&Sample> = samples.iter().filter(|x| x.t >= from && x.t < to).collect();
    let mut row = Row {
        minute,
        ..Row::default()
    };
    if let Some(last) = in_minute.last() {
        row.run_rss_mb = last.run().0;
        row.run_anon_mb = last.run_anon();
        row.children = last.children();
        row.procs = last.procs.clone();
    }
    row.run_rss_max_mb = in_minute.iter().map(|x| x.run().0).fold(0.0, f64::max);
    let mut fds: Vec<u64> = in_minute.iter().map(|x| x.run().1).collect();
    fds.sort_unstable();
    row.run_fds = fds.get(fds.len() / 2).copied().unwrap_or(0);
    let t = ledger_tally(s, to.min(s.now_s()));
    row.jobs = t;
    let minutes = s
        .minutes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(m) = minutes.get(minute - 1) {
        report::fill_from_minute(&mut row, m);
    }
    drop(minutes);
    row.swaps = swaps(sys);
    let faults = s
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    row.faults = faults
        .iter()
        .filter(|f| f.start_s >= from && f.start_s < to)
        .map(|f| f.what.clone())
        .collect();
    row
}

fn ledger_tally(s: &Shared, until_s: f64) -> (u64, u64, u64, u64) {
    let t = s.ledger.tally(None, until_s);
    (t.submitted, t.done, t.dead, t.lost)
}

/// The pool's loads that displaced a resident model, and every swap operation carried out
/// (loads, wakes, sleeps, stops), so far, from /metrics.
fn swaps(sys: &System) -> (f64, f64) {
    let Ok(r) = sys.control.call(
        "GET",
        "/metrics",
        Some(ADMIN_KEY),
        None,
        Duration::from_secs(10),
    ) else {
        return (f64::NAN, f64::NAN);
    };
    let sum = |name: &str| -> f64 {
        r.text
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (
        sum("horos_coordinator_model_swaps_total"),
        sum("horos_swaps_total"),
    )
}

/// The targets, checked.
fn targets(
    s: &Shared,
    plan: &Plan,
    samples: &[Sample],
    died: Option<&str>,
    panicked: bool,
) -> Vec<Target> {
    let mut out = Vec::new();
    // RSS and descriptors: the minute after the warm-up against the load's last minute.
    let window = |from: f64, to: f64| -> Vec<&Sample> {
        samples.iter().filter(|x| x.t >= from && x.t < to).collect()
    };
    let base = window(plan.baseline_s, plan.baseline_s + 60.0);
    let last = window(plan.total_s - 60.0, plan.total_s + 1.0);
    let median = |v: &[&Sample], f: &dyn Fn(&Sample) -> f64| -> f64 {
        let mut x: Vec<f64> = v.iter().map(|s| f(s)).collect();
        x.sort_by(f64::total_cmp);
        x.get(x.len() / 2).copied().unwrap_or(0.0)
    };
    let rss = |x: &Sample| x.run().0;
    let fds = |x: &Sample| x.run().1 as f64;
    let (rss0, rss1) = (median(&base, &rss), median(&last, &rss));
    let rss_max = samples
        .iter()
        .filter(|x| x.t >= plan.baseline_s)
        .map(rss)
        .fold(0.0, f64::max);
    let anon = |x: &Sample| x.run_anon();
    let (anon0, anon1) = (median(&base, &anon), median(&last, &anon));
    out.push(Target {
        name: "run's RSS grows <= 10% after the warm-up",
        met: (rss0 > 0.0 && rss1 > 0.0).then_some(rss1 <= rss0 * (1.0 + RSS_GROWTH)),
        detail: format!(
            "median {rss0:.1} MB in the minute from {:.0} s, {rss1:.1} MB in the load's last minute ({:+.1}%), highest after the warm-up {rss_max:.1} MB; anonymous part {anon0:.1} -> {anon1:.1} MB ({:+.1}%)",
            plan.baseline_s,
            (rss1 / rss0.max(1e-9) - 1.0) * 100.0,
            (anon1 / anon0.max(1e-9) - 1.0) * 100.0
        ),
    });
    let (fd0, fd1) = (median(&base, &fds), median(&last, &fds));
    out.push(Target {
        name: "run's descriptors flat (slack 32)",
        met: (fd0 > 0.0).then_some(fd1 <= fd0 + FD_SLACK as f64),
        detail: format!(
            "median {fd0:.0} in the minute after the warm-up, {fd1:.0} in the load's last minute"
        ),
    });
    let t = s.ledger.tally(None, f64::MAX);
    let crossed: u64 = {
        let m = s
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.iter()
            .flat_map(|m| m.chat.iter())
            .map(|c| c.crossed)
            .sum()
    };
    let kinds: Vec<String> = [Kind::Async, Kind::Lane, Kind::Document]
        .iter()
        .map(|k| {
            let x = s.ledger.tally(Some(*k), f64::MAX);
            format!(
                "{} {}/{}/{}/{}",
                k.name(),
                x.submitted,
                x.done,
                x.dead,
                x.lost
            )
        })
        .collect();
    out.push(Target {
        name: "0 lost",
        met: Some(t.lost == 0),
        detail: format!(
            "submitted/done/dead/lost: {} ({})",
            kinds.join(", "),
            t.lost
        ),
    });
    out.push(Target {
        name: "0 duplicated",
        met: Some(t.duplicated == 0 && crossed == 0),
        detail: format!(
            "{} in the ledger, {crossed} chats answered with another's nonce",
            t.duplicated
        ),
    });
    out.push(bombs_alone(s));
    out.push(health_target(s));
    out.push(Target {
        name: "run never restarts or dies",
        met: Some(died.is_none() && !panicked),
        detail: died.map_or_else(
            || {
                format!(
                    "one pid throughout{}",
                    if panicked {
                        ", but its log says `panicked`"
                    } else {
                        ""
                    }
                )
            },
            str::to_owned,
        ),
    });
    out
}

/// Every bomb ends (its page or its document failed) and the documents that must be ingested
/// in its batch are.
fn bombs_alone(s: &Shared) -> Target {
    let entries: Vec<_> = s
        .ledger
        .entries()
        .into_iter()
        .filter(|e| e.kind == Kind::Document)
        .collect();
    let batch = |label: &str| {
        label
            .split_once(" #")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    };
    let class = |label: &str| {
        label
            .split_once(" #")
            .and_then(|(c, _)| corpus::Class::from_name(c))
    };
    let mut bombs = 0;
    let mut bad = Vec::new();
    for bomb in entries
        .iter()
        .filter(|e| class(&e.label) == Some(corpus::Class::Bomb))
    {
        bombs += 1;
        match &bomb.outcome {
            Some((Outcome::Dead(_), _)) => {}
            Some((Outcome::Done, _)) => {
                bad.push(format!("bomb {} done with no page failed", bomb.id))
            }
            None => bad.push(format!("bomb {} never ended", bomb.id)),
        }
        let b = batch(&bomb.label);
        for e in entries.iter().filter(|e| {
            batch(&e.label) == b && class(&e.label).is_some_and(corpus::Class::must_finish)
        }) {
            if !matches!(e.outcome, Some((Outcome::Done, _))) {
                bad.push(format!(
                    "{} {} in the bomb's batch: {:?}",
                    e.label, e.id, e.outcome
                ));
            }
        }
    }
    let mut by_class = std::collections::BTreeMap::<String, (u64, u64, u64)>::new();
    for e in &entries {
        let c = by_class
            .entry(e.label.split(" #").next().unwrap_or("").to_owned())
            .or_default();
        match e.outcome {
            Some((Outcome::Done, _)) => c.0 += 1,
            Some((Outcome::Dead(_), _)) => c.1 += 1,
            None => c.2 += 1,
        }
    }
    let classes: Vec<String> = by_class
        .iter()
        .map(|(k, (d, f, o))| format!("{k} {d} done/{f} failed/{o} open"))
        .collect();
    Target {
        name: "every bomb fails alone",
        met: (bombs > 0).then_some(bad.is_empty()),
        detail: format!(
            "{bombs} bombs; {}{}",
            classes.join(", "),
            if bad.is_empty() {
                String::new()
            } else {
                format!("; {}", bad.join("; "))
            }
        ),
    }
}

/// The deep health green outside the faults (and their grace), `None` while the route is absent.
fn health_target(s: &Shared) -> Target {
    let faults = s
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let in_fault = |t: f64| {
        faults.iter().any(|f| {
            let grace = if f.what == "disk full" {
                DISK_GRACE_S
            } else {
                KILL_GRACE_S
            };
            t >= f.start_s && t <= f.end_s.unwrap_or(f64::MAX) + grace
        })
    };
    let minutes = s
        .minutes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let answers: Vec<(f64, Health)> = minutes.iter().flat_map(|m| m.health.clone()).collect();
    drop(minutes);
    let absent = answers.iter().filter(|(_, h)| *h == Health::Absent).count();
    let red_outside: Vec<String> = answers
        .iter()
        .filter(|(t, h)| !matches!(h, Health::Ready | Health::Absent) && !in_fault(*t))
        .map(|(t, h)| format!("{t:.0} s: {h:?}"))
        .collect();
    let red_inside = answers
        .iter()
        .filter(|(t, h)| !matches!(h, Health::Ready | Health::Absent) && in_fault(*t))
        .count();
    let total = answers.len();
    Target {
        name: "deep health green except during faults",
        met: (absent < total).then_some(red_outside.is_empty()),
        detail: format!(
            "{total} answers: {absent} absent (404), {} red outside faults, {red_inside} red during faults{}",
            red_outside.len(),
            red_outside
                .first()
                .map(|r| format!("; first: {r}"))
                .unwrap_or_default()
        ),
    }
}

fn summary(
    s: &Shared,
    plan: &Plan,
    rows: &[Row],
    targets: &[Target],
    disk_note: Option<&str>,
    exit: Option<i32>,
) -> serde_json::Value {
    let faults = s
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let all_high: Vec<f64> = {
        let m = s
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.iter()
            .flat_map(|m| m.chat[0].latencies_ms.clone())
            .collect()
    };
    let classes: Vec<serde_json::Value> = {
        let m = s
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        load::CLASSES
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let lat: Vec<f64> = m.iter().flat_map(|m| m.chat[i].latencies_ms.clone()).collect();
                let sum = |f: &dyn Fn(&load::ChatMinute) -> u64| -> u64 { m.iter().map(|m| f(&m.chat[i])).sum() };
                json!({"class": name, "ok": sum(&|c| c.ok), "limited": sum(&|c| c.limited),
                       "failed": sum(&|c| c.failed), "crossed": sum(&|c| c.crossed),
                       "p50_ms": report::quantile(&lat, 0.5), "p99_ms": report::quantile(&lat, 0.99)})
            })
            .collect()
    };
    let (images_refused, images_other, hostile, deleted, not_deleted) = {
        let m = s
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (
            m.iter().map(|m| m.images_refused).sum::<u64>(),
            m.iter().map(|m| m.images_other).sum::<u64>(),
            m.iter().map(|m| m.hostile_clients).sum::<u64>(),
            m.iter().map(|m| m.documents_deleted.0).sum::<u64>(),
            m.iter().map(|m| m.documents_deleted.1).sum::<u64>(),
        )
    };
    let red: Vec<String> = {
        let m = s
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.iter()
            .flat_map(|m| m.health.iter())
            .filter(|(_, h)| !matches!(h, Health::Ready | Health::Absent))
            .map(|(t, h)| format!("{t:.0} s: {h:?}"))
            .collect()
    };
    let dead: Vec<String> = s
        .ledger
        .entries()
        .iter()
        .filter_map(|e| match &e.outcome {
            Some((Outcome::Dead(why), _)) => Some(format!(
                "{} {} {}: {why:.200}",
                e.kind.name(),
                e.id,
                e.label
            )),
            _ => None,
        })
        .collect();
    json!({
        "chat": classes,
        "image_questions": {"refused_413": images_refused, "other": images_other},
        "hostile_clients": hostile,
        "documents_deleted": {"deleted": deleted, "refused": not_deleted, "kept": s.keep_documents},
        "health_red": red,
        "dead": dead,
        "minutes_of_load": plan.total_s / 60.0,
        "baseline_s": plan.baseline_s,
        "run_exit_code_at_sigterm": exit,
        "high_priority": {"answered": all_high.len(), "p50_ms": report::quantile(&all_high, 0.5),
                          "p99_ms": report::quantile(&all_high, 0.99)},
        "faults": faults.iter().map(|f| json!({"what": f.what, "start_s": f.start_s, "end_s": f.end_s})).collect::<Vec<_>>(),
        "disk_full": disk_note.unwrap_or("done"),
        "duplicates": s.ledger.duplicates(),
        "targets": targets.iter().map(|t| json!({"name": t.name, "met": t.met, "detail": t.detail})).collect::<Vec<_>>(),
        "rows": rows.iter().map(report::json_row).collect::<Vec<_>>(),
    })
}
