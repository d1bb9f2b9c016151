//! The server's Prometheus `/metrics`: a small text-format parser and the load figures a scheduler
//! needs (requests running and waiting).

/// One sample of the Prometheus text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name, e.g. `vllm:num_requests_running`.
    pub name: String,
    /// The labels, in order of appearance.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// Parses the Prometheus text exposition format. Comments, and lines that do not parse, are skipped
/// (a metrics page is never a reason to fail).
pub fn parse_prometheus(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(r)?;
        labels = parsed;
        rest = after;
    }
    // value [timestamp]
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_owned();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    value.push(match e {
                        'n' => '\n',
                        other => other,
                    });
                }
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

/// Requests a server is processing and holding back, from its `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerLoad {
    /// Requests being processed (in the running batch / holding a slot).
    pub running: u64,
    /// Requests queued, waiting for room.
    pub waiting: u64,
}

/// Metric names of requests running: vLLM, then llama-server.
const RUNNING: &[&str] = &["vllm:num_requests_running", "llamacpp:requests_processing"];
/// Metric names of requests waiting: vLLM, then llama-server.
const WAITING: &[&str] = &["vllm:num_requests_waiting", "llamacpp:requests_deferred"];

impl ServerLoad {
    /// Extracts the load from samples (vLLM's `vllm:num_requests_running` / `vllm:num_requests_waiting`,
    /// llama-server's `llamacpp:requests_processing` / `llamacpp:requests_deferred`), summed over label
    /// sets (one per model). `None` when the page has neither running metric.
    pub fn from_samples(samples: &[Sample]) -> Option<ServerLoad> {
        let sum = |names: &[&str]| -> Option<f64> {
            // the first family present wins, so that one server's figures are never added to another's
            names.iter().find_map(|n| {
                let mut found = false;
                let total = samples
                    .iter()
                    .filter(|s| s.name == *n)
                    .inspect(|_| found = true)
                    .map(|s| s.value)
                    .sum::<f64>();
                found.then_some(total)
            })
        };
        let running = sum(RUNNING)?;
        let waiting = sum(WAITING).unwrap_or(0.0);
        let to_count = |v: f64| {
            if v.is_finite() && v > 0.0 {
                v.round() as u64
            } else {
                0
            }
        };
        Some(ServerLoad {
            running: to_count(running),
            waiting: to_count(waiting),
        })
    }

    /// Parses a metrics page and extracts the load.
    pub fn parse(text: &str) -> Option<ServerLoad> {
        Self::from_samples(&parse_prometheus(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vllm_page() {
        let page = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 5.0
vllm:num_requests_running{engine="1",model_name="smollm2"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a \"b\" c"} 7 1700000000
garbage line here
"#;
        let s = parse_prometheus(page);
        assert_eq!(s.len(), 4);
        assert_eq!(s[3].labels[0], ("le".into(), "+Inf".into()));
        assert_eq!(s[3].labels[1], ("model_name".into(), "a \"b\" c".into()));
        assert_eq!(s[3].value, 7.0);
        assert_eq!(
            ServerLoad::parse(page),
            Some(ServerLoad {
                running: 4,
                waiting: 5
            })
        );
    }

    #[test]
    fn parses_llama_server_page() {
        let page = "# HELP llamacpp:requests_processing Number of requests processing.\n\
                    # TYPE llamacpp:requests_processing gauge\n\
                    llamacpp:requests_processing 2\n\
                    llamacpp:requests_deferred 1\n";
        assert_eq!(
            ServerLoad::parse(page),
            Some(ServerLoad {
                running: 2,
                waiting: 1
            })
        );
        assert_eq!(ServerLoad::parse("other_metric 1\n"), None);
    }
}
