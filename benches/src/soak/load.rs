//! The load the soak drives at once, one thread per driver: chat at three priorities with keys
//! and limits, demand for the pooled models in turn (swaps), async jobs, lane jobs, documents
//! (the hostile ones included), oversized image questions, slow and vanishing clients; and the
//! poller that follows every acknowledged submission to its end.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::corpus::{self, Class};
use super::http::Http;
use super::ledger::{Kind, Ledger, Outcome};
use super::system::{ADMIN_KEY, KEYS, LANE, LANE_MODEL, POOL};

/// A chat class: the three priorities, then the pool's swap demand.
pub const CLASSES: [&str; 4] = ["high", "mid", "low", "swap"];

/// One chat class's minute.
#[derive(Debug, Clone, Default)]
pub struct ChatMinute {
    /// Answered 200 with the request's own nonce.
    pub ok: u64,
    /// Refused by a limit (429).
    pub limited: u64,
    /// Any other status, or no answer.
    pub failed: u64,
    /// Answered 200 without the request's nonce (someone else's answer).
    pub crossed: u64,
    /// The answered ones' latencies, ms.
    pub latencies_ms: Vec<f64>,
}

/// The deep health check's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// 200.
    Ready,
    /// 503 (or another status), with what it named.
    NotReady(String),
    /// 404: the route is not there (yet).
    Absent,
    /// No answer.
    Down(String),
}

/// What happened in one minute, besides what the ledger and the sampler keep.
#[derive(Debug, Clone, Default)]
pub struct Minute {
    /// Per chat class ([`CLASSES`]).
    pub chat: [ChatMinute; 4],
    /// The deep health answers: `(seconds since start, answer)`.
    pub health: Vec<(f64, Health)>,
    /// Oversized image questions refused 413.
    pub images_refused: u64,
    /// Oversized image questions answered otherwise (a miss).
    pub images_other: u64,
    /// Slow and vanishing clients sent.
    pub hostile_clients: u64,
    /// Finished documents deleted (`DELETE /api/v1/documents/ID`), and deletions refused.
    pub documents_deleted: (u64, u64),
}

/// An injected fault: from `start_s` to `end_s` (seconds since the start).
#[derive(Debug, Clone)]
pub struct Fault {
    /// What: `kill pool-a (pid 123)`, `disk full`.
    pub what: String,
    /// When it was injected.
    pub start_s: f64,
    /// When it was lifted (a kill: the moment it was sent), `None` while it lasts.
    pub end_s: Option<f64>,
}

/// What the drivers share.
pub struct Shared {
    /// The data plane.
    pub data: Http,
    /// The control plane.
    pub control: Http,
    /// The exactly-once ledger.
    pub ledger: Ledger,
    /// The minutes, by index.
    pub minutes: Mutex<Vec<Minute>>,
    /// The faults injected.
    pub faults: Mutex<Vec<Fault>>,
    /// The inbox documents are written to.
    pub inbox: std::path::PathBuf,
    /// The start.
    pub start: Instant,
    /// Set: the drivers stop submitting.
    pub stop_load: AtomicBool,
    /// Set: every thread ends.
    pub stop_all: AtomicBool,
    /// Keep finished documents (unset: each is deleted once its end is seen, so that the corpus
    /// stays steady and memory that grows with it is not taken for a leak).
    pub keep_documents: bool,
    /// Document classes not submitted (`--skip bomb,...`).
    pub skip_classes: Vec<Class>,
    nonce: AtomicU64,
}

impl Shared {
    /// Everything zero at `start`.
    pub fn new(data: Http, control: Http, inbox: std::path::PathBuf) -> Shared {
        Shared {
            data,
            control,
            ledger: Ledger::default(),
            minutes: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            inbox,
            start: Instant::now(),
            stop_load: AtomicBool::new(false),
            stop_all: AtomicBool::new(false),
            keep_documents: false,
            skip_classes: Vec::new(),
            nonce: AtomicU64::new(0),
        }
    }

    /// Seconds since the start.
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A fresh nonce.
    pub fn nonce(&self, what: &str) -> String {
        format!("{what}-{:06}-q", self.nonce.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `f` on the current minute's record.
    pub fn record(&self, f: impl FnOnce(&mut Minute)) {
        let minute = (self.now_s() / 60.0) as usize;
        let mut m = self
            .minutes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.len() <= minute {
            m.resize_with(minute + 1, Minute::default);
        }
        f(&mut m[minute]);
    }

    fn load_on(&self) -> bool {
        !self.stop_load.load(Ordering::Relaxed) && !self.stop_all.load(Ordering::Relaxed)
    }

    /// Sleeps `d` in small steps, false once everything stops.
    pub fn nap(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.stop_all.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
        }
        true
    }
}

/// A chat's body carrying `nonce`.
fn chat_body(model: &str, nonce: &str, priority: i32) -> Value {
    json!({"model": model, "max_tokens": 16, "x_priority": priority, "x_timeout_s": 45,
           "messages": [{"role": "user", "content": format!("soak {nonce}")}]})
}

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap_or("")
}

/// Chats of class `class` (an index of [`CLASSES`]) with key `key` at `priority`, one every
/// `period`, for `model(n)` (the n-th chat's model).
pub fn chat(
    s: &Shared,
    class: usize,
    key: &str,
    priority: i32,
    period: Duration,
    model: impl Fn(u64) -> String,
) {
    let mut n = 0;
    while s.load_on() {
        let nonce = s.nonce(CLASSES[class]);
        let body = chat_body(&model(n), &nonce, priority);
        n += 1;
        let r = s.data.call(
            "POST",
            "/v1/chat/completions",
            Some(key),
            Some(&body),
            Duration::from_secs(60),
        );
        s.record(|m| {
            let c = &mut m.chat[class];
            match &r {
                Ok(r) if r.status == 200 && content(&r.json).contains(&nonce) => {
                    c.ok += 1;
                    c.latencies_ms.push(r.elapsed.as_secs_f64() * 1e3);
                }
                Ok(r) if r.status == 200 => c.crossed += 1,
                Ok(r) if r.status == 429 => c.limited += 1,
                _ => c.failed += 1,
            }
        });
        if !s.nap(period) {
            return;
        }
    }
}

/// The pooled models in turn (pool-a, pool-b, pool-c, ...): any two fit, the third evicts one.
pub fn swap_model(n: u64) -> String {
    POOL[(n % POOL.len() as u64) as usize].0.to_owned()
}

/// The lane's model.
pub fn lane_model(_: u64) -> String {
    LANE_MODEL.to_owned()
}

/// Async jobs (silver's key), one every `period`.
pub fn async_jobs(s: &Shared, period: Duration) {
    let key = KEYS[1].1;
    while s.load_on() {
        let nonce = s.nonce("async");
        let body = json!({"kind": "chat", "request": chat_body(LANE_MODEL, &nonce, 5)});
        if let Ok(r) = s.data.call(
            "POST",
            "/v1/jobs",
            Some(key),
            Some(&body),
            Duration::from_secs(30),
        ) && let Some(id) = r.json["id"].as_i64()
            && r.status < 300
        {
            s.ledger.submitted(Kind::Async, id, &nonce, "", s.now_s());
        }
        if !s.nap(period) {
            return;
        }
    }
}

/// Lane jobs (the admin API), `batch` every `period`.
pub fn lane_jobs(s: &Shared, batch: usize, period: Duration) {
    while s.load_on() {
        for _ in 0..batch {
            let nonce = s.nonce("lane");
            let body =
                json!({"queue": LANE, "prompt": format!("soak lane {nonce}"), "max_tokens": 16});
            if let Ok(r) = s.control.call(
                "POST",
                "/api/v1/lanes/jobs",
                Some(ADMIN_KEY),
                Some(&body),
                Duration::from_secs(30),
            ) && r.status < 300
                && let Some(id) = r.json["id"].as_i64().or(r.json["data"]["id"].as_i64())
            {
                s.ledger.submitted(Kind::Lane, id, &nonce, "", s.now_s());
            }
        }
        if !s.nap(period) {
            return;
        }
    }
}

/// A batch of every [`Class`] every `period` (the bomb every `bomb_every`-th batch), written
/// to the inbox and submitted; and an oversized image question with each batch.
pub fn documents(s: &Shared, period: Duration, bomb_every: u64) {
    let mut batch = 0u64;
    while s.load_on() {
        for class in Class::ALL {
            if class == Class::Bomb && !batch.is_multiple_of(bomb_every)
                || s.skip_classes.contains(&class)
            {
                continue;
            }
            let nonce = s.nonce(class.name());
            let name = format!("{nonce}.pdf");
            if std::fs::write(s.inbox.join(&name), corpus::document(class, &nonce)).is_err() {
                continue; // the disk-full phase
            }
            let body = json!({"path": name});
            if let Ok(r) = s.control.call(
                "POST",
                "/api/v1/documents",
                Some(ADMIN_KEY),
                Some(&body),
                Duration::from_secs(30),
            ) && r.status < 300
                && let Some(id) = r.json["document"].as_i64()
            {
                s.ledger.submitted(
                    Kind::Document,
                    id,
                    &nonce,
                    &format!("{} #{batch}", class.name()),
                    s.now_s(),
                );
            }
        }
        image_question(s);
        batch += 1;
        if !s.nap(period) {
            return;
        }
    }
}

/// An image question declaring 11585 x 11585 pixels: refused from its header (413).
fn image_question(s: &Shared) {
    use base64::Engine as _;
    let png = horos_testkit::png::declaring(11585, 11585);
    let body = json!({"query": "", "image": base64::engine::general_purpose::STANDARD.encode(png)});
    let r = s.data.call(
        "POST",
        "/v1/search",
        Some(KEYS[1].1),
        Some(&body),
        Duration::from_secs(30),
    );
    s.record(|m| match r {
        Ok(r) if r.status == 413 => m.images_refused += 1,
        _ => m.images_other += 1,
    });
}

/// Slow and vanishing clients, one every `period`, in turn: a head sent a few bytes a
/// second, a streamed chat left after its first bytes, a body promised and never sent.
pub fn hostile_clients(s: &Shared, period: Duration) {
    let mut n = 0u64;
    while s.load_on() {
        let addr = s.data.addr;
        let key = KEYS[2].1;
        let body = chat_body(LANE_MODEL, &s.nonce("hostile"), 9);
        let _ = (|| -> std::io::Result<()> {
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(20)))?;
            match n % 3 {
                0 => {
                    let mut stream = body.clone();
                    stream["stream"] = json!(true);
                    let b = stream.to_string();
                    let head = format!(
                        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nauthorization: Bearer {key}\r\n\
                         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        b.len()
                    );
                    for chunk in head.as_bytes().chunks(16) {
                        c.write_all(chunk)?;
                        std::thread::sleep(Duration::from_millis(250));
                    }
                    c.write_all(b.as_bytes())?;
                    let mut buf = [0u8; 64];
                    let _ = c.read(&mut buf)?;
                }
                1 => {
                    let mut stream = body.clone();
                    stream["stream"] = json!(true);
                    let b = stream.to_string();
                    write!(
                        c,
                        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nauthorization: Bearer {key}\r\n\
                         content-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
                        b.len()
                    )?;
                    let mut buf = [0u8; 8];
                    let _ = c.read(&mut buf)?;
                }
                _ => {
                    write!(
                        c,
                        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
                         content-length: 100000\r\n\r\n{{\"model\":"
                    )?;
                }
            }
            Ok(())
        })();
        n += 1;
        s.record(|m| m.hostile_clients += 1);
        if !s.nap(period) {
            return;
        }
    }
}

/// Follows every open submission of the ledger to its end, a pass every second, until
/// everything stops.
pub fn poller(s: &Shared) {
    while !s.stop_all.load(Ordering::Relaxed) {
        for (kind, id) in s.ledger.open() {
            if s.stop_all.load(Ordering::Relaxed) {
                return;
            }
            poll_one(s, kind, id);
        }
        if !s.nap(Duration::from_secs(1)) {
            return;
        }
    }
}

fn poll_one(s: &Shared, kind: Kind, id: i64) {
    let t = Duration::from_secs(10);
    let (http, path, key) = match kind {
        Kind::Async => (s.data, format!("/v1/jobs/{id}"), KEYS[1].1),
        Kind::Lane => (s.control, format!("/api/v1/lanes/jobs/{id}"), ADMIN_KEY),
        Kind::Document => (s.control, format!("/api/v1/documents/{id}"), ADMIN_KEY),
    };
    let Ok(r) = http.call("GET", &path, Some(key), None, t) else {
        return;
    };
    if r.status != 200 {
        return;
    }
    let v = &r.json;
    let data = if v["data"].is_object() { &v["data"] } else { v };
    match kind {
        Kind::Async => match data["state"].as_str().unwrap_or("") {
            "succeeded" => {
                let text = content(&data["result"]).to_owned();
                s.ledger
                    .finished(kind, id, Outcome::Done, Some(&text), s.now_s());
            }
            "failed" | "cancelled" => {
                s.ledger.finished(
                    kind,
                    id,
                    Outcome::Dead(data["error"].to_string()),
                    None,
                    s.now_s(),
                );
            }
            _ => {}
        },
        Kind::Lane => match data["state"].as_str().unwrap_or("") {
            "done" => {
                let text = data["answer"].as_str().unwrap_or("").to_owned();
                s.ledger
                    .finished(kind, id, Outcome::Done, Some(&text), s.now_s());
            }
            "dead" => {
                let why = data["last_error"].as_str().unwrap_or("dead").to_owned();
                s.ledger
                    .finished(kind, id, Outcome::Dead(why), None, s.now_s());
            }
            _ => {}
        },
        Kind::Document => {
            let doc = if data["document"].is_object() {
                &data["document"]
            } else {
                data
            };
            let status = doc["status"].as_str().unwrap_or("");
            match status {
                "done" => {
                    let failed = data["failed_pages"].as_array().map_or(0, Vec::len);
                    let outcome = if failed == 0 {
                        Outcome::Done
                    } else {
                        Outcome::Dead(format!(
                            "done, {failed} page(s) failed: {}",
                            data["failed_pages"]
                        ))
                    };
                    s.ledger.finished(kind, id, outcome, None, s.now_s());
                }
                "failed" => {
                    let why = doc["error"]
                        .as_str()
                        .map_or_else(|| doc.to_string(), str::to_owned);
                    s.ledger.finished(
                        kind,
                        id,
                        Outcome::Dead(format!("failed: {why}")),
                        None,
                        s.now_s(),
                    );
                }
                _ => {}
            }
            if matches!(status, "done" | "failed") && !s.keep_documents {
                let deleted = s
                    .control
                    .call("DELETE", &path, Some(ADMIN_KEY), None, t)
                    .is_ok_and(|r| r.status < 300);
                s.record(|m| {
                    if deleted {
                        m.documents_deleted.0 += 1;
                    } else {
                        m.documents_deleted.1 += 1;
                    }
                });
            }
        }
    }
}

/// The deep health check every `period`: `GET /health/ready` on the control plane.
pub fn health(s: &Shared, period: Duration) {
    while !s.stop_all.load(Ordering::Relaxed) {
        let r = s.control.call(
            "GET",
            "/health/ready",
            Some(ADMIN_KEY),
            None,
            Duration::from_secs(10),
        );
        let h = match r {
            Ok(r) if r.status == 200 => Health::Ready,
            Ok(r) if r.status == 404 => Health::Absent,
            Ok(r) => Health::NotReady(format!(
                "{} {}",
                r.status,
                r.text.chars().take(200).collect::<String>()
            )),
            Err(e) => Health::Down(e),
        };
        let at = s.now_s();
        s.record(|m| m.health.push((at, h)));
        if !s.nap(period) {
            return;
        }
    }
}

/// Starts `f` on a thread of its own, named `name`.
///
/// # Errors
///
/// No thread could be started.
pub fn spawn(
    name: &str,
    s: &Arc<Shared>,
    f: impl FnOnce(&Shared) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let s = Arc::clone(s);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || f(&s))
}
