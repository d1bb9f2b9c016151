//! `GET /status`: a server-rendered HTML page from the control plane's snapshot and the
//! metrics' atomics, with inline SVG charts of the GPUs' last hour, and the sections the
//! binary adds ([`StatusSection`]: lanes, ingest, ...). A few lines of inline script fetch
//! `/status?fragment=main` every 3 s and swap the page's body in place (without script the page
//! still works: reload it).

mod charts;
mod operator;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use horos_server_control::{LogChunk, SlotState};

use crate::clock::now_ms;
use crate::control::snapshot::Snapshot;
use crate::data::metrics::{Metrics, Route};

pub use horos_server_control::{DetailError, DetailFuture, StatusSection, html_escape};

/// A section's detail page: its body in the status page's style, with a link back.
pub fn render_detail(body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>HOROS status</title>\
         <style>{STYLE}</style></head><body><p><a href=\"/status\">&larr; status</a></p>{body}</body></html>"
    )
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
const REFRESH: &str = "<script>setInterval(async()=>{try{const r=await fetch('/status?fragment=main');if(!r.ok)return;const html=await r.text();const $=i=>document.getElementById(i);const k=$('admin-key'),key=k?k.value:'',focused=k&&document.activeElement===k;const ids=['requeue-result','unload-result'],said=ids.map(i=>$(i)?$(i).textContent:'');$('main').innerHTML=html;const k2=$('admin-key');if(k2){k2.value=key;if(focused)k2.focus()}ids.forEach((i,n)=>{if($(i))$(i).textContent=said[n]})}catch(e){}},3000)</script>";

/// Renders the whole page.
pub fn render(snap: &Snapshot, metrics: &Metrics, parts: &PageParts<'_>) -> String {
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>HOROS status</title>\
         <style>{STYLE}</style></head><body><main id=\"main\">"
    );
    render_main(&mut o, snap, metrics, parts);
    let _ = writeln!(
        o,
        "</main>{REFRESH}{REQUEUE}{}</body></html>",
        operator::UNLOAD_ALL
    );
    o
}

/// Renders the page's `<main>` content alone (what the page's script fetches).
pub fn render_main(o: &mut String, snap: &Snapshot, metrics: &Metrics, parts: &PageParts<'_>) {
    let e = html_escape;
    let (allow_cloud, models) = (parts.allow_cloud, parts.models);
    o.push_str("<h1>HOROS status</h1>");
    let age = if snap.taken_ms == 0 {
        "no snapshot yet".to_owned()
    } else {
        format!("snapshot {} ms old", now_ms().saturating_sub(snap.taken_ms))
    };
    let _ = write!(
        o,
        "<p>{} &middot; cloud fallback: <b>{}</b> &middot; in flight: ",
        e(&age),
        if allow_cloud { "allowed" } else { "blocked" }
    );
    for r in Route::ALL {
        let _ = write!(
            o,
            "{} {} ",
            r.label(),
            metrics.in_flight(r).load(Ordering::Relaxed)
        );
    }
    o.push_str("</p>");

    o.push_str("<h2>Models</h2>");
    operator::admin_actions(o);
    o.push_str("<table><tr><th>model</th><th>state</th><th>GPUs</th><th>port</th><th>active</th><th>pinned</th><th>idle s</th><th>waiting</th><th>admitted</th><th>loads</th><th>avg load s</th></tr>");
    let mut names: Vec<String> = models.to_vec();
    for s in &snap.slots {
        if !names.contains(&s.model) {
            names.push(s.model.clone());
        }
    }
    names.sort();
    for m in &names {
        let slot = snap.slots.iter().find(|s| &s.model == m);
        let state = slot.map_or(SlotState::Idle, |s| s.state).as_str();
        // Asleep: at which level (l1: its weights in host RAM).
        let shown = match slot.and_then(|s| s.sleep_level) {
            Some(level) => format!("{state} l{}", level.number()),
            None => state.to_owned(),
        };
        let mm = metrics.model(m);
        let lf = snap.loads.get(m);
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e(m),
            e(state),
            e(&shown),
            slot.map_or(String::new(), |s| {
                s.gpus
                    .iter()
                    .map(|g| format!("{} ({} MB)", g.gpu, g.mb))
                    .collect::<Vec<_>>()
                    .join(", ")
            }),
            slot.and_then(|s| s.port)
                .map_or(String::new(), |p| p.to_string()),
            slot.map_or(0, |s| s.active),
            slot.is_some_and(|s| s.pinned),
            slot.map_or(String::new(), |s| format!("{:.0}", s.idle_s)),
            mm.waiting.load(Ordering::Relaxed),
            mm.running.load(Ordering::Relaxed),
            mm.loads.load(Ordering::Relaxed),
            lf.and_then(|l| l.avg_s)
                .map_or(String::from("-"), |a| format!("{a:.1}")),
        );
    }
    o.push_str("</table>");

    o.push_str("<h2>Job queues</h2><table><tr><th>queue</th><th>ready</th><th>in flight</th><th>delayed</th><th>done</th><th>dead</th><th>oldest ready</th></tr>");
    for q in &snap.queues {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e(&q.queue),
            q.ready,
            q.in_flight,
            q.delayed,
            q.done,
            q.dead,
            q.oldest_ready_age_ms
                .map_or(String::new(), |a| format!("{:.1} s", a as f64 / 1000.0)),
        );
    }
    o.push_str("</table>");
    queue_charts(o, snap);

    if !snap.modes.is_empty() {
        o.push_str(
            "<h2>Modes</h2><table><tr><th>gpu</th><th>mode</th><th>state</th><th>since</th></tr>",
        );
        let now = now_ms();
        for m in &snap.modes {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0} s ago</td></tr>",
                m.gpu,
                e(&m.mode),
                e(&m.state.to_string()),
                now.saturating_sub(m.since_ms) as f64 / 1000.0
            );
        }
        o.push_str("</table>");
    }

    if !snap.gpus.is_empty() {
        o.push_str("<h2>GPUs</h2><table><tr><th>gpu</th><th>name</th><th>temperature</th><th>memory</th><th>utilization</th><th>temperature alert</th><th>models</th></tr>");
        for g in &snap.gpus {
            // Models whose weights are (partly) on this GPU, from the pool's placements.
            let on_gpu: Vec<String> = snap
                .slots
                .iter()
                .filter_map(|s| {
                    s.gpus.iter().find(|sh| sh.gpu == g.index).map(|sh| {
                        format!("{} ({} MB, {})", e(&s.model), sh.mb, e(s.state.as_str()))
                    })
                })
                .collect();
            let alert = match (g.alert_active, g.alerts_total) {
                (Some(true), n) => {
                    format!("<td class=\"alert\">ALERT ({} raised)</td>", n.unwrap_or(1))
                }
                (Some(false), n) => format!("<td>ok ({} raised)</td>", n.unwrap_or(0)),
                (None, _) => "<td></td>".to_owned(),
            };
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} / {} MB</td><td>{}</td>{alert}<td>{}</td></tr>",
                g.index,
                e(&g.name),
                g.temperature_c
                    .map_or(String::new(), |t| format!("{t:.0} °C")),
                g.memory_used_mb,
                g.memory_total_mb,
                g.utilization_pct
                    .map_or(String::new(), |u| format!("{u} %")),
                on_gpu.join(", "),
            );
        }
        o.push_str("</table>");
    }

    dead_letters(o, snap);
    gpu_charts(o, snap);
    for section in parts.sections {
        section.render_html(o);
    }
    operator::logs(o, parts.logs);

    let usage = metrics.usage.totals();
    if !usage.is_empty() {
        o.push_str("<h2>Usage since start</h2><table><tr><th>caller</th><th>model</th><th>requests</th><th>prompt tokens</th><th>completion tokens</th></tr>");
        for ((caller, model), n) in &usage {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                e(caller),
                e(model),
                n.requests,
                n.prompt_tokens,
                n.completion_tokens
            );
        }
        o.push_str("</table>");
    }

    requestors(o, metrics);

    o.push_str("<h2>Recent decisions</h2><table><tr><th>age</th><th>request</th><th>client</th><th>model</th><th>decision</th><th>reason</th></tr>");
    let now = now_ms();
    for d in &snap.decisions {
        let _ = write!(
            o,
            "<tr><td>{:.1} s</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            now.saturating_sub(d.at_ms) as f64 / 1000.0,
            d.request,
            e(d.client.as_deref().unwrap_or("")),
            e(&d.model),
            e(d.action.as_str()),
            e(&d.reason),
        );
    }
    o.push_str("</table>");
}

/// Puts a dead letter back in its queue through the admin API, with the key typed on the page
/// (kept in the page only: never stored).
const REQUEUE: &str = "<script>async function requeue(id){const k=document.getElementById('admin-key');const h=k&&k.value?{'authorization':'Bearer '+k.value}:{};const r=await fetch('/api/v1/dead/'+id+'/requeue',{method:'POST',headers:h});const o=document.getElementById('requeue-result');if(o){o.textContent=r.ok?('job '+id+' requeued'):('job '+id+': '+r.status+' '+(await r.text()))}}</script>";

/// The newest dead letters with their reason and a requeue action (behind the admin key).
fn dead_letters(o: &mut String, snap: &Snapshot) {
    if snap.dead.is_empty() {
        return;
    }
    let e = html_escape;
    let now = now_ms();
    o.push_str(
        "<h2>Dead letters</h2><p>requeue with the admin key typed above \
         <span id=\"requeue-result\"></span></p><table><tr><th>job</th>\
         <th>queue</th><th>attempts</th><th>died</th><th>last error</th><th></th></tr>",
    );
    for d in &snap.dead {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0} s ago</td><td>{}</td>\
             <td><button onclick=\"requeue({})\">requeue</button></td></tr>",
            d.id,
            e(&d.queue),
            d.attempts,
            now.saturating_sub(u64::try_from(d.died_at_ms).unwrap_or(0)) as f64 / 1000.0,
            e(d.last_error.as_deref().unwrap_or("")),
            d.id
        );
    }
    o.push_str("</table>");
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
fn queue_charts(o: &mut String, snap: &Snapshot) {
    let now = now_ms();
    let span_ms = crate::control::snapshot::DEPTH_COLUMN_MS * CHART_POINTS as u64;
    let span_s = span_ms as f64 / 1000.0;
    let mut opened = false;
    for (queue, history) in snap.queue_history.iter() {
        let points: Vec<(f64, f64)> = history
            .iter()
            .filter(|(at, _)| now.saturating_sub(*at) < span_ms)
            .map(|&(at, depth)| (-(now.saturating_sub(at) as f64) / 1000.0, depth as f64))
            .collect();
        let highest = points.iter().map(|p| p.1).fold(0.0, f64::max);
        if highest == 0.0 {
            continue; // idle all hour: nothing to draw
        }
        if !opened {
            o.push_str("<div class=\"charts\">");
            opened = true;
        }
        o.push_str(&charts::line_chart(
            &format!("{queue} depth (jobs)"),
            &points,
            span_s,
            highest,
            None,
        ));
    }
    if opened {
        o.push_str("</div>");
    }
}

/// Each GPU's last hour (or what the history holds): temperature with its alert line, memory,
/// utilisation; at most one point per pixel column, so the page costs the same with an hour of
/// one-second samples as with a minute.
fn gpu_charts(o: &mut String, snap: &Snapshot) {
    if snap.gpu_history.is_empty() || snap.gpus.is_empty() {
        return;
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
    for (g, s) in snap.gpus.iter().zip(&series) {
        let temps = points(&s.temperature, span_s);
        let hottest = temps.iter().map(|p| p.1).fold(100.0, f64::max);
        let _ = write!(o, "<h3>GPU {}</h3><div class=\"charts\">", g.index);
        o.push_str(&charts::line_chart(
            &format!("GPU {} temperature °C", g.index),
            &temps,
            span_s,
            hottest,
            g.alert_threshold_c,
        ));
        o.push_str(&charts::line_chart(
            &format!("GPU {} memory used MB of {}", g.index, g.memory_total_mb),
            &points(&s.memory, span_s),
            span_s,
            g.memory_total_mb as f64,
            None,
        ));
        o.push_str(&charts::line_chart(
            &format!("GPU {} utilisation %", g.index),
            &points(&s.utilisation, span_s),
            span_s,
            100.0,
            None,
        ));
        o.push_str("</div>");
    }
}

/// Who calls: requests, refusals, last call, and the cooldown left of those cooling down.
fn requestors(o: &mut String, metrics: &Metrics) {
    let all = metrics.requestors.all();
    if all.is_empty() {
        return;
    }
    let now = now_ms();
    o.push_str("<h2>Requestors</h2><table><tr><th>caller</th><th>requests</th><th>refused</th><th>last call</th><th>cooldown</th></tr>");
    for (caller, r) in &all {
        let cooldown = if r.cooldown_until_ms > now {
            format!("{:.0} s left", (r.cooldown_until_ms - now) as f64 / 1000.0)
        } else {
            String::new()
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1} s ago</td><td>{}</td></tr>",
            html_escape(caller),
            r.requests,
            r.refused,
            now.saturating_sub(r.last_seen_ms) as f64 / 1000.0,
            cooldown
        );
    }
    o.push_str("</table>");
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
