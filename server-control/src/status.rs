//! The seam between a status page and the crates that add sections to it: [`StatusSection`].

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A section of the status page that the coordinator's owner adds (the lanes and their
/// servers, a document pipeline...). Rendered on the control plane for every page: read state
/// kept current elsewhere, never block or wait.
pub trait StatusSection: Send + Sync {
    /// Appends the section's HTML (an `<h2>` and its content; text escaped with
    /// [`html_escape`]).
    fn render_html(&self, out: &mut String);

    /// The same for scripts: a name and a value, served in `GET /api/v1/status` under
    /// `sections.NAME`. None by default.
    fn to_json(&self) -> Option<(String, serde_json::Value)> {
        None
    }

    /// A page of the section's own, linked from its rows: `path` is what follows `/status/`
    /// (`documents/12`, say). `None` when the section serves no such page (the default). The
    /// future runs on the control plane's runtime: put blocking reads on its blocking pool.
    fn detail(&self, path: &str) -> Option<DetailFuture> {
        let _ = path;
        None
    }
}

/// A detail page being built: its HTML body (an `<h1>` and what follows; text escaped), or why
/// there is none.
pub type DetailFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, DetailError>> + Send>>;

/// Why a section's detail page has no answer.
#[derive(Debug, thiserror::Error)]
pub enum DetailError {
    /// What the path names does not exist (answered 404).
    #[error("{0}")]
    NotFound(String),
    /// It could not be read (answered 500).
    #[error("{0}")]
    Failed(String),
}
