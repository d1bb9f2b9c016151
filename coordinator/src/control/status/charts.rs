//! Small inline SVG line charts for the status page: no script, no library, a few hundred bytes
//! each.

use std::fmt::Write as _;

use maud::{Markup, html};

/// Width and height of a chart, px.
const W: f64 = 240.0;
const H: f64 = 60.0;

/// One chart: `points` as (seconds relative to now, ≤ 0; value), over the last `span_s`
/// seconds, the value axis from 0 to `y_max`; `threshold` (e.g. the temperature alert) drawn as
/// a dashed red line. Its `data-points` attribute says how many points it draws.
///
/// The SVG's shapes are closed explicitly (`<rect …></rect>`): inside `<svg>` an HTML parser
/// keeps an unclosed start tag open, and what followed would be drawn inside it (not at all).
pub fn line_chart(
    title: &str,
    points: &[(f64, f64)],
    span_s: f64,
    y_max: f64,
    threshold: Option<f64>,
) -> Markup {
    let span_s = if span_s > 0.0 { span_s } else { 1.0 };
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let x = |t: f64| (W * (1.0 + t / span_s)).clamp(0.0, W);
    let y = |v: f64| (H - H * v / y_max).clamp(0.0, H);
    let last = points
        .last()
        .map_or(String::from("no data"), |p| format!("{:.0} now", p.1));
    let mut line = String::with_capacity(points.len() * 12);
    for &(t, v) in points {
        let _ = write!(line, "{:.1},{:.1} ", x(t), y(v));
    }
    html! {
        figure class="chart" {
            svg viewBox=(format!("0 0 {W} {H}")) width=(W) height=(H) role="img"
                data-points=(points.len()) {
                title { (title) }
                rect width=(W) height=(H) fill="#f8f8f8" {}
                @if let Some(t) = threshold {
                    @let at = format!("{:.1}", y(t));
                    line class="threshold" x1="0" x2=(W) y1=(at) y2=(at) stroke="#c00"
                        stroke-dasharray="4 3" {}
                }
                @if !points.is_empty() {
                    polyline fill="none" stroke="#036" stroke-width="1.5" points=(line) {}
                }
                // The latest reading as a dot: visible even when the line is one point (a new
                // run).
                @if let Some(&(t, v)) = points.last() {
                    circle class="now" cx=(format!("{:.1}", x(t).min(W - 3.0)))
                        cy=(format!("{:.1}", y(v).clamp(3.0, H - 3.0))) r="3" fill="#036" {}
                }
            }
            figcaption { (title) " (" (last) ")" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_the_points_and_the_threshold_inside_the_box() {
        let svg = line_chart(
            "GPU 0 <temp>",
            &[(-3600.0, 40.0), (-1800.0, 90.0), (0.0, 200.0)],
            3600.0,
            100.0,
            Some(80.0),
        )
        .into_string();
        assert!(svg.contains("data-points=\"3\""), "{svg}");
        assert!(
            svg.contains("points=\"0.0,36.0 120.0,6.0 240.0,0.0 \""),
            "{svg}"
        );
        assert!(svg.contains("y1=\"12.0\""), "{svg}");
        // The latest reading's dot, kept inside the box.
        assert!(
            svg.contains("<circle class=\"now\" cx=\"237.0\" cy=\"3.0\""),
            "{svg}"
        );
        assert!(svg.contains("GPU 0 &lt;temp&gt;"));
        assert!(!svg.contains("<temp>"));
        let empty = line_chart("x", &[], 0.0, 0.0, None).into_string();
        assert!(empty.contains("data-points=\"0\"") && !empty.contains("polyline"));
        assert!(!empty.contains("circle"));
    }

    #[test]
    fn every_shape_is_closed_so_none_swallows_the_next() {
        let svg = line_chart("t", &[(-1.0, 1.0), (0.0, 2.0)], 10.0, 4.0, Some(3.0)).into_string();
        assert!(svg.starts_with("<figure class=\"chart\"><svg viewBox=\"0 0 240 60\" width=\"240\" height=\"60\" role=\"img\" data-points=\"2\"><title>t</title><rect width=\"240\" height=\"60\" fill=\"#f8f8f8\"></rect><line class=\"threshold\""), "{svg}");
        for shape in ["rect", "line", "polyline", "circle"] {
            assert_eq!(
                svg.matches(&format!("<{shape} ")).count(),
                svg.matches(&format!("</{shape}>")).count(),
                "{shape}: {svg}"
            );
        }
        assert!(
            svg.ends_with("</svg><figcaption>t (2 now)</figcaption></figure>"),
            "{svg}"
        );
    }
}
