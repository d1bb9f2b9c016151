//! `GET /status`: a server-rendered HTML page from the control plane's snapshot and the
//! metrics' atomics, with inline SVG charts of the GPUs' last hour, and the sections the
//! binary adds ([`StatusSection`]: lanes, ingest, ...). A few lines of inline script fetch
//! `/status?fragment=main` every 3 s and swap the page's body in place (without script the page
//! still works: reload it).
//!
//! The page is written with maud's `html!`: every value put into it (a model's name, a caller's
//! label, a log line, an error) is escaped by construction, in text and in attributes alike.
//! What the page takes unescaped is named, each with its reason: its constant style sheet and
//! scripts (`PreEscaped`, below), and the sections' own HTML (written into the page's buffer by
//! [`StatusSection::render_html`], which escapes its values).

mod charts;
mod operator;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use horos_server_control::{LogChunk, SlotState};
use maud::{DOCTYPE, Markup, PreEscaped, Render, html};

use crate::clock::now_ms;
use crate::control::snapshot::Snapshot;
use crate::data::metrics::{Metrics, Route};

pub use horos_server_control::{DetailError, DetailFuture, StatusSection};

/// A section's detail page: its body in the status page's style, with a link back.
pub fn render_detail(body: &str) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head())
            body {
                p { a href="/status" { "← status" } }
                // Unescaped on purpose: a section's detail page, HTML it built itself with its
                // values escaped (the `DetailFuture` contract), as its rows on the main page.
                (PreEscaped(body))
            }
        }
    }
    .into_string()
}

/// What the page shows beyond the snapshot.
pub struct PageParts<'a> {
    /// Whether cloud fallback is allowed now.
    pub allow_cloud: bool,
    /// The configured models.
    pub models: &'a [String],
    /// The owner's sections, in order.
    pub sections: &'a [Arc<dyn StatusSection>],
    /// The last lines of each server's log.
    pub logs: &'a [LogChunk],
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#eee}.alert{color:#fff;background:#c00;font-weight:bold}.READY{color:#070}.LOADING{color:#a60}.STOPPING{color:#a00}.SLEEPING{color:#36c}.charts{display:flex;flex-wrap:wrap;gap:1em}figure.chart{margin:0}figcaption{font-size:.8em;color:#555}";

/// Swaps the page's `<main>` for a fresh one every 3 s (no reload, no flicker). What the
/// operator typed (the admin key, its focus) and the last requeue's result survive the swap.
const REFRESH: &str = "setInterval(async()=>{try{const r=await fetch('/status?fragment=main');if(!r.ok)return;const html=await r.text();const $=i=>document.getElementById(i);const k=$('admin-key'),key=k?k.value:'',focused=k&&document.activeElement===k;const ids=['requeue-result','unload-result'],said=ids.map(i=>$(i)?$(i).textContent:'');$('main').innerHTML=html;const k2=$('admin-key');if(k2){k2.value=key;if(focused)k2.focus()}ids.forEach((i,n)=>{if($(i))$(i).textContent=said[n]})}catch(e){}},3000)";

/// Puts a dead letter back in its queue through the admin API, with the key typed on the page
/// (kept in the page only: never stored).
const REQUEUE: &str = "async function requeue(id){const k=document.getElementById('admin-key');const h=k&&k.value?{'authorization':'Bearer '+k.value}:{};const r=await fetch('/api/v1/dead/'+id+'/requeue',{method:'POST',headers:h});const o=document.getElementById('requeue-result');if(o){o.textContent=r.ok?('job '+id+' requeued'):('job '+id+': '+r.status+' '+(await r.text()))}}";

/// The page's `<head>`: its title and style sheet.
fn head() -> Markup {
    html! {
        head {
            meta charset="utf-8";
            title { "HOROS status" }
            // Unescaped on purpose: the constant style sheet above (CSS is raw text in
            // `<style>`: an escaped `>` would no longer be a selector).
            style { (PreEscaped(STYLE)) }
        }
    }
}

/// Renders the whole page.
pub fn render(snap: &Snapshot, metrics: &Metrics, parts: &PageParts<'_>) -> String {
    let mut page = html! {
        (DOCTYPE)
        html lang="en" {
            (head())
            body {
                main id="main" { (Main { snap, metrics, parts }) }
                // Unescaped on purpose: the constant scripts above, never built from a value
                // (script is raw text: an escaped `&&` would no longer be an operator).
                script { (PreEscaped(REFRESH)) }
                script { (PreEscaped(REQUEUE)) }
                script { (PreEscaped(operator::UNLOAD_ALL)) }
            }
        }
    }
    .into_string();
    page.push('\n');
    page
}

/// The page's `<main>`, rendered straight into the page's buffer.
struct Main<'a> {
    snap: &'a Snapshot,
    metrics: &'a Metrics,
    parts: &'a PageParts<'a>,
}

impl Render for Main<'_> {
    fn render_to(&self, buffer: &mut String) {
        render_main(buffer, self.snap, self.metrics, self.parts);
    }
}

/// Renders the page's `<main>` content alone (what the page's script fetches).
pub fn render_main(o: &mut String, snap: &Snapshot, metrics: &Metrics, parts: &PageParts<'_>) {
    html! {
        (overview(snap, metrics, parts.allow_cloud))
        (models(snap, metrics, parts.models))
        (job_queues(snap))
        (queue_charts(snap))
        (modes(snap))
        (gpus(snap))
        (dead_letters(snap))
        (gpu_charts(snap))
    }
    .render_to(o);
    // The sections write their own HTML into the page's buffer, their values escaped (the
    // `StatusSection` contract).
    for section in parts.sections {
        section.render_html(o);
    }
    html! {
        (operator::logs(parts.logs))
        (usage(metrics))
        (requestors(metrics))
        (decisions(snap))
    }
    .render_to(o);
}

/// The title, the snapshot's age, whether cloud fallback is allowed, the requests in flight.
fn overview(snap: &Snapshot, metrics: &Metrics, allow_cloud: bool) -> Markup {
    let age = if snap.taken_ms == 0 {
        "no snapshot yet".to_owned()
    } else {
        format!("snapshot {} ms old", now_ms().saturating_sub(snap.taken_ms))
    };
    html! {
        h1 { "HOROS status" }
        p {
            (age) " · cloud fallback: "
            b { @if allow_cloud { "allowed" } @else { "blocked" } }
            " · in flight: "
            @for r in Route::ALL {
                (r.label()) " " (metrics.in_flight(r).load(Ordering::Relaxed)) " "
            }
        }
    }
}

/// Every model, configured or pooled, with its slot's state and its counters; the admin actions.
fn models(snap: &Snapshot, metrics: &Metrics, configured: &[String]) -> Markup {
    let mut names: Vec<&str> = configured.iter().map(String::as_str).collect();
    for s in &snap.slots {
        if !names.contains(&s.model.as_str()) {
            names.push(&s.model);
        }
    }
    names.sort_unstable();
    html! {
        h2 { "Models" }
        (operator::admin_actions())
        table {
            tr {
                th { "model" } th { "state" } th { "GPUs" } th { "port" } th { "active" }
                th { "pinned" } th { "idle s" } th { "waiting" } th { "admitted" } th { "loads" }
                th { "avg load s" }
            }
            @for m in names { (model_row(snap, metrics, m)) }
        }
    }
}

/// One model's row.
fn model_row(snap: &Snapshot, metrics: &Metrics, m: &str) -> Markup {
    let slot = snap.slots.iter().find(|s| s.model == m);
    let state = slot.map_or(SlotState::Idle, |s| s.state).as_str();
    let mm = metrics.model(m);
    let avg_load_s = snap.loads.get(m).and_then(|l| l.avg_s);
    html! {
        tr {
            td { (m) }
            td class=(state) {
                (state)
                // Asleep: at which level (l1: its weights in host RAM).
                @if let Some(level) = slot.and_then(|s| s.sleep_level) { " l" (level.number()) }
            }
            td {
                @for (i, g) in slot.map_or(&[][..], |s| &s.gpus[..]).iter().enumerate() {
                    @if i > 0 { ", " }
                    (g.gpu) " (" (g.mb) " MB)"
                }
            }
            td { @if let Some(p) = slot.and_then(|s| s.port) { (p) } }
            td { (slot.map_or(0, |s| s.active)) }
            td { (slot.is_some_and(|s| s.pinned)) }
            td { @if let Some(s) = slot { (format!("{:.0}", s.idle_s)) } }
            td { (mm.waiting.load(Ordering::Relaxed)) }
            td { (mm.running.load(Ordering::Relaxed)) }
            td { (mm.loads.load(Ordering::Relaxed)) }
            td {
                @match avg_load_s {
                    Some(a) => { (format!("{a:.1}")) }
                    None => { "-" }
                }
            }
        }
    }
}

/// Each job queue's counts.
fn job_queues(snap: &Snapshot) -> Markup {
    html! {
        h2 { "Job queues" }
        table {
            tr {
                th { "queue" } th { "ready" } th { "in flight" } th { "delayed" } th { "done" }
                th { "dead" } th { "oldest ready" }
            }
            @for q in &snap.queues {
                tr {
                    td { (q.queue) } td { (q.ready) } td { (q.in_flight) } td { (q.delayed) }
                    td { (q.done) } td { (q.dead) }
                    td {
                        @if let Some(a) = q.oldest_ready_age_ms {
                            (format!("{:.1} s", a as f64 / 1000.0))
                        }
                    }
                }
            }
        }
    }
}

/// What each GPU's mode is doing, where modes are in use.
fn modes(snap: &Snapshot) -> Markup {
    let now = now_ms();
    html! {
        @if !snap.modes.is_empty() {
            h2 { "Modes" }
            table {
                tr { th { "gpu" } th { "mode" } th { "state" } th { "since" } }
                @for m in &snap.modes {
                    tr {
                        td { (m.gpu) } td { (m.mode) } td { (m.state) }
                        td {
                            (format!("{:.0} s ago", now.saturating_sub(m.since_ms) as f64 / 1000.0))
                        }
                    }
                }
            }
        }
    }
}

/// Each GPU's gauges, its temperature alert and the models whose weights are on it.
fn gpus(snap: &Snapshot) -> Markup {
    html! {
        @if !snap.gpus.is_empty() {
            h2 { "GPUs" }
            table {
                tr {
                    th { "gpu" } th { "name" } th { "temperature" } th { "memory" }
                    th { "utilization" } th { "temperature alert" } th { "models" }
                }
                @for g in &snap.gpus {
                    tr {
                        td { (g.index) }
                        td { (g.name) }
                        td { @if let Some(t) = g.temperature_c { (format!("{t:.0} °C")) } }
                        td { (g.memory_used_mb) " / " (g.memory_total_mb) " MB" }
                        td { @if let Some(u) = g.utilization_pct { (u) " %" } }
                        @match (g.alert_active, g.alerts_total) {
                            (Some(true), n) => {
                                td class="alert" { "ALERT (" (n.unwrap_or(1)) " raised)" }
                            }
                            (Some(false), n) => { td { "ok (" (n.unwrap_or(0)) " raised)" } }
                            (None, _) => { td {} }
                        }
                        td {
                            // Models whose weights are (partly) on this GPU, from the pool's
                            // placements.
                            @let on_gpu = snap.slots.iter().filter_map(|s| {
                                s.gpus.iter().find(|sh| sh.gpu == g.index).map(|sh| (s, sh))
                            });
                            @for (i, (s, sh)) in on_gpu.enumerate() {
                                @if i > 0 { ", " }
                                (s.model) " (" (sh.mb) " MB, " (s.state.as_str()) ")"
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The newest dead letters with their reason and a requeue action (behind the admin key).
fn dead_letters(snap: &Snapshot) -> Markup {
    let now = now_ms();
    html! {
        @if !snap.dead.is_empty() {
            h2 { "Dead letters" }
            p { "requeue with the admin key typed above " span id="requeue-result" {} }
            table {
                tr {
                    th { "job" } th { "queue" } th { "attempts" } th { "died" } th { "last error" }
                    th {}
                }
                @for d in &snap.dead {
                    @let died_ms = u64::try_from(d.died_at_ms).unwrap_or(0);
                    tr {
                        td { (d.id) }
                        td { (d.queue) }
                        td { (d.attempts) }
                        td { (format!("{:.0} s ago", now.saturating_sub(died_ms) as f64 / 1000.0)) }
                        td { (d.last_error.as_deref().unwrap_or("")) }
                        td { button onclick={ "requeue(" (d.id) ")" } { "requeue" } }
                    }
                }
            }
        }
    }
}

/// Points per chart at most: one per pixel column of a chart.
const CHART_POINTS: usize = 240;

/// One GPU's series, one slot per pixel column (the last sample of the column).
struct GpuSeries {
    temperature: Vec<Option<f64>>,
    memory: Vec<Option<f64>>,
    utilisation: Vec<Option<f64>>,
}

impl GpuSeries {
    fn new() -> Self {
        GpuSeries {
            temperature: vec![None; CHART_POINTS],
            memory: vec![None; CHART_POINTS],
            utilisation: vec![None; CHART_POINTS],
        }
    }
}

/// The columns that have a sample, as (seconds ago ≤ 0, value).
fn points(column: &[Option<f64>], span_s: f64) -> Vec<(f64, f64)> {
    let n = column.len() as f64;
    column
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| ((i as f64 + 1.0) / n * span_s - span_s, v)))
        .collect()
}

/// The depth of each queue that held work in the last hour, one chart per queue.
fn queue_charts(snap: &Snapshot) -> Markup {
    let now = now_ms();
    let span_ms = crate::control::snapshot::DEPTH_COLUMN_MS * CHART_POINTS as u64;
    let span_s = span_ms as f64 / 1000.0;
    let charts: Vec<Markup> = snap
        .queue_history
        .iter()
        .filter_map(|(queue, history)| {
            let points: Vec<(f64, f64)> = history
                .iter()
                .filter(|(at, _)| now.saturating_sub(*at) < span_ms)
                .map(|&(at, depth)| (-(now.saturating_sub(at) as f64) / 1000.0, depth as f64))
                .collect();
            let highest = points.iter().map(|p| p.1).fold(0.0, f64::max);
            // Idle all hour: nothing to draw.
            (highest > 0.0).then(|| {
                charts::line_chart(
                    &format!("{queue} depth (jobs)"),
                    &points,
                    span_s,
                    highest,
                    None,
                )
            })
        })
        .collect();
    html! {
        @if !charts.is_empty() {
            div class="charts" { @for c in &charts { (c) } }
        }
    }
}

/// Each GPU's last hour (or what the history holds): temperature with its alert line, memory,
/// utilisation; at most one point per pixel column, so the page costs the same with an hour of
/// one-second samples as with a minute.
fn gpu_charts(snap: &Snapshot) -> Markup {
    if snap.gpu_history.is_empty() || snap.gpus.is_empty() {
        return html! {};
    }
    let now = now_ms();
    let span_ms: u64 = 3_600_000;
    let mut series: Vec<GpuSeries> = snap.gpus.iter().map(|_| GpuSeries::new()).collect();
    for p in snap.gpu_history.iter() {
        let age = now.saturating_sub(p.at_ms);
        if age >= span_ms {
            continue;
        }
        let Some(k) = snap.gpus.iter().position(|g| g.index == p.gpu) else {
            continue;
        };
        let column =
            ((span_ms - age) as usize * CHART_POINTS / span_ms as usize).min(CHART_POINTS - 1);
        let s = &mut series[k];
        if let Some(t) = p.temperature_c {
            s.temperature[column] = Some(t);
        }
        s.memory[column] = Some(p.memory_used_mb as f64);
        if let Some(u) = p.utilization_pct {
            s.utilisation[column] = Some(f64::from(u));
        }
    }
    let span_s = span_ms as f64 / 1000.0;
    html! {
        @for (g, s) in snap.gpus.iter().zip(&series) {
            @let temps = points(&s.temperature, span_s);
            @let hottest = temps.iter().map(|p| p.1).fold(100.0, f64::max);
            h3 { "GPU " (g.index) }
            div class="charts" {
                (charts::line_chart(
                    &format!("GPU {} temperature °C", g.index),
                    &temps,
                    span_s,
                    hottest,
                    g.alert_threshold_c,
                ))
                (charts::line_chart(
                    &format!("GPU {} memory used MB of {}", g.index, g.memory_total_mb),
                    &points(&s.memory, span_s),
                    span_s,
                    g.memory_total_mb as f64,
                    None,
                ))
                (charts::line_chart(
                    &format!("GPU {} utilisation %", g.index),
                    &points(&s.utilisation, span_s),
                    span_s,
                    100.0,
                    None,
                ))
            }
        }
    }
}

/// Requests and tokens by caller and model since start.
fn usage(metrics: &Metrics) -> Markup {
    let usage = metrics.usage.totals();
    html! {
        @if !usage.is_empty() {
            h2 { "Usage since start" }
            table {
                tr {
                    th { "caller" } th { "model" } th { "requests" } th { "prompt tokens" }
                    th { "completion tokens" }
                }
                @for ((caller, model), n) in &usage {
                    tr {
                        td { (caller) } td { (model) } td { (n.requests) }
                        td { (n.prompt_tokens) } td { (n.completion_tokens) }
                    }
                }
            }
        }
    }
}

/// Who calls: requests, refusals, last call, and the cooldown left of those cooling down.
fn requestors(metrics: &Metrics) -> Markup {
    let all = metrics.requestors.all();
    let now = now_ms();
    html! {
        @if !all.is_empty() {
            h2 { "Requestors" }
            table {
                tr {
                    th { "caller" } th { "requests" } th { "refused" } th { "last call" }
                    th { "cooldown" }
                }
                @for (caller, r) in &all {
                    tr {
                        td { (caller) }
                        td { (r.requests) }
                        td { (r.refused) }
                        td {
                            (format!("{:.1} s ago", now.saturating_sub(r.last_seen_ms) as f64 / 1000.0))
                        }
                        td {
                            @if r.cooldown_until_ms > now {
                                (format!("{:.0} s left", (r.cooldown_until_ms - now) as f64 / 1000.0))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The routing decisions the snapshot keeps, newest as they come.
fn decisions(snap: &Snapshot) -> Markup {
    let now = now_ms();
    html! {
        h2 { "Recent decisions" }
        table {
            tr {
                th { "age" } th { "request" } th { "client" } th { "model" } th { "decision" }
                th { "reason" }
            }
            @for d in &snap.decisions {
                tr {
                    td { (format!("{:.1} s", now.saturating_sub(d.at_ms) as f64 / 1000.0)) }
                    td { (d.request) }
                    td { (d.client.as_deref().unwrap_or("")) }
                    td { (d.model) }
                    td { (d.action.as_str()) }
                    td { (d.reason) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_lists_models() {
        let m = Metrics::new(["<m>".to_owned()]);
        let models = ["<m>".to_owned()];
        let parts = PageParts {
            allow_cloud: false,
            models: &models,
            sections: &[],
            logs: &[],
        };
        let page = render(&Snapshot::default(), &m, &parts);
        assert!(page.contains("&lt;m&gt;"));
        assert!(!page.contains("<m>"));
        assert!(page.contains("blocked"));
    }

    /// What a caller or a configuration controls, with markup and both quotes in it: on the
    /// page only as text, in every table that shows it.
    #[test]
    fn a_hostile_value_is_escaped_wherever_the_page_shows_it() {
        use crate::control::snapshot::{DeadView, GpuGauge, ModeView};
        use crate::data::decision::{Decision, DecisionAction};
        use crate::tenancy::caller::Caller;
        const EVIL: &str = "x\"'><script>alert('1')</script>";
        const SAFE: &str = "x&quot;'&gt;&lt;script&gt;alert('1')&lt;/script&gt;";
        let model = format!("model{EVIL}");
        let m = Metrics::new([model.clone()]);
        m.usage
            .record(&Caller::Client(format!("caller{EVIL}")), &model, 1, 2);
        m.requestors.seen(&format!("requestor{EVIL}"), now_ms());
        let snap = Snapshot {
            queues: vec![squeueha::QueueStats {
                queue: format!("queue{EVIL}"),
                ready: 0,
                in_flight: 0,
                delayed: 0,
                done: 0,
                dead: 1,
                oldest_ready_age_ms: None,
            }],
            gpus: vec![GpuGauge {
                index: 0,
                name: format!("gpu{EVIL}"),
                temperature_c: None,
                memory_used_mb: 0,
                memory_total_mb: 1000,
                utilization_pct: None,
                alert_active: None,
                alerts_total: None,
                alert_threshold_c: None,
            }],
            modes: vec![ModeView {
                gpu: 0,
                mode: format!("mode{EVIL}"),
                state: format!("switching to state{EVIL}").as_str().into(),
                since_ms: now_ms(),
            }],
            decisions: vec![Decision {
                at_ms: now_ms(),
                request: 1,
                client: Some(format!("client{EVIL}")),
                model: model.clone(),
                action: DecisionAction::Other(format!("action{EVIL}")),
                reason: format!("reason{EVIL}"),
            }],
            dead: vec![DeadView {
                id: 7,
                queue: format!("queue{EVIL}"),
                attempts: 3,
                last_error: Some(format!("error{EVIL}")),
                died_at_ms: 0,
            }],
            ..Snapshot::default()
        };
        let logs = [LogChunk {
            name: format!("log{EVIL}"),
            text: format!("line{EVIL}"),
            next: 0,
        }];
        let parts = PageParts {
            allow_cloud: false,
            models: std::slice::from_ref(&model),
            sections: &[],
            logs: &logs,
        };
        let page = render(&snap, &m, &parts);
        // The page's own three scripts, and no other.
        assert_eq!(page.matches("<script>").count(), 3, "{page}");
        assert!(!page.contains(EVIL), "{page}");
        for shown in [
            "model",
            "caller",
            "requestor",
            "queue",
            "gpu",
            "mode",
            "state",
            "client",
            "action",
            "reason",
            "error",
            "log",
            "line",
        ] {
            assert!(page.contains(&format!("{shown}{SAFE}")), "{shown}: {page}");
        }
        // In an attribute too: the model's state class is from a fixed set, and the requeue
        // button's argument is a number.
        assert!(
            page.contains("<button onclick=\"requeue(7)\">requeue</button>"),
            "{page}"
        );
        // The fragment the page's script swaps in is escaped alike.
        let mut main = String::new();
        render_main(&mut main, &snap, &m, &parts);
        assert!(!main.contains("<script") && main.contains(&format!("reason{SAFE}")));
    }

    #[test]
    fn the_page_keeps_its_shell_scripts_and_admin_controls() {
        let page = render(
            &Snapshot::default(),
            &Metrics::new([]),
            &PageParts {
                allow_cloud: true,
                models: &[],
                sections: &[],
                logs: &[],
            },
        );
        assert!(
            page.starts_with(
                "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                 <title>HOROS status</title><style>body{font-family:sans-serif;"
            ),
            "{page}"
        );
        assert!(
            page.contains("<body><main id=\"main\"><h1>HOROS status</h1>"),
            "{page}"
        );
        // The scripts as written (an escaped `&&` or `=>` would no longer be script).
        assert!(
            page.contains(&format!("</main><script>{REFRESH}</script>")),
            "{page}"
        );
        assert!(
            page.contains(&format!("<script>{REQUEUE}</script>")),
            "{page}"
        );
        assert!(
            page.ends_with(&format!(
                "<script>{}</script></body></html>\n",
                operator::UNLOAD_ALL
            )),
            "{page}"
        );
        assert!(page.contains("cloud fallback: <b>allowed</b>"), "{page}");
        assert!(page.contains(
            "<form id=\"admin-actions\" onsubmit=\"return false\"><label>admin key \
             <input id=\"admin-key\" type=\"password\" autocomplete=\"off\"></label> \
             <button type=\"button\" onclick=\"unloadAll()\">Unload all</button> \
             <span id=\"unload-result\"></span></form>"
        ));
        let detail = render_detail("<h1>doc 12</h1>");
        assert!(
            detail.ends_with(
                "<body><p><a href=\"/status\">← status</a></p><h1>doc 12</h1></body></html>"
            ),
            "{detail}"
        );
    }

    #[test]
    fn shows_the_models_of_each_gpu() {
        use crate::control::snapshot::GpuGauge;
        use crate::upstream::SlotView;
        use horos_server_control::Share;
        let m = Metrics::new(["m".to_owned()]);
        let snap = Snapshot {
            slots: vec![SlotView {
                sleep_level: None,
                model: "m".into(),
                state: horos_server_control::SlotState::Ready,
                port: Some(9000),
                active: 0,
                pinned: false,
                idle_s: 1.0,
                gpus: vec![Share { gpu: 1, mb: 600 }],
            }],
            gpus: (0..2)
                .map(|i| GpuGauge {
                    index: i,
                    name: "sim".into(),
                    temperature_c: None,
                    memory_used_mb: 0,
                    memory_total_mb: 1000,
                    utilization_pct: None,
                    alert_active: None,
                    alerts_total: None,
                    alert_threshold_c: None,
                })
                .collect(),
            ..Snapshot::default()
        };
        let models = ["m".to_owned()];
        let parts = PageParts {
            allow_cloud: true,
            models: &models,
            sections: &[],
            logs: &[],
        };
        let page = render(&snap, &m, &parts);
        assert!(page.contains("<td>1 (600 MB)</td>"), "{page}");
        assert!(
            page.contains("<td>0 / 1000 MB</td><td></td><td></td><td></td></tr>"),
            "{page}"
        );
        assert!(page.contains("<td>m (600 MB, READY)</td></tr>"), "{page}");
    }
}
