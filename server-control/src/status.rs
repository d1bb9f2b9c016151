//! The seam between a status page and the crates that add sections to it: [`StatusSection`].

/// `url` when it may be a link's `href` on a page: it starts with `http://` or `https://` (in any
/// case, nothing before it); `None` for anything else (`javascript:`, `data:`, a relative or
/// scheme-relative path, a scheme behind a blank), which a page shows as text, so a value a
/// caller or a configuration controls can never become a live script link.
pub fn safe_href(url: &str) -> Option<&str> {
    let scheme_end = url.find("://")?;
    let scheme = &url[..scheme_end];
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")).then_some(url)
}

/// A section of the status page that the coordinator's owner adds (the lanes and their
/// servers, a document pipeline...). Rendered on the control plane for every page: read state
/// kept current elsewhere, never block or wait.
pub trait StatusSection: Send + Sync {
    /// Appends the section's HTML (an `<h2>` and its content; every value escaped: the
    /// workspace's sections build it with maud, which escapes by construction).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_become_links() {
        for good in [
            "http://node-2:8080/status",
            "https://node-2/status",
            "HTTPS://NODE-2/status",
        ] {
            assert_eq!(safe_href(good), Some(good));
        }
        for bad in [
            "javascript:alert(1)",
            "JAVASCRIPT:alert(1)",
            " javascript:alert(1)",
            "\tjavascript:alert(1)",
            "java\nscript:alert(1)",
            "javascript://%0aalert(1)",
            "data:text/html,<script>alert(1)</script>",
            "vbscript:msgbox(1)",
            " http://node-2/status",
            "/status",
            "status",
            "//evil.example/status",
            "../status",
            "",
        ] {
            assert_eq!(safe_href(bad), None, "{bad:?}");
        }
    }
}
