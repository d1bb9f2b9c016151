//! Links to a URL that a caller or a configuration controls (a node's status page, say): only
//! `http://` and `https://` become a link; anything else (`javascript:`, `data:`, a relative or
//! scheme-relative path, a scheme behind a blank) is shown as text, so a hostile value can never
//! become a live link on the page.

use maud::{Markup, html};

/// `url` when it may be an `href`: it starts with `http://` or `https://` (in any case, nothing
/// before it); `None` otherwise.
pub(crate) fn safe_href(url: &str) -> Option<&str> {
    let scheme_end = url.find("://")?;
    let scheme = &url[..scheme_end];
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")).then_some(url)
}

/// `url` as a link where [`safe_href`] allows it, else as text; escaped either way.
pub(crate) fn link(url: &str) -> Markup {
    html! {
        @match safe_href(url) {
            Some(href) => { a href=(href) { (url) } }
            None => { (url) }
        }
    }
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

    #[test]
    fn a_refused_url_is_shown_as_escaped_text_and_an_allowed_one_as_an_escaped_link() {
        let text = link("javascript:alert(\"<x>\")").into_string();
        assert_eq!(text, "javascript:alert(&quot;&lt;x&gt;&quot;)");
        assert!(!text.contains("href"));
        let a = link("https://node-2/status?a=1&b=\"><script>").into_string();
        assert_eq!(
            a,
            "<a href=\"https://node-2/status?a=1&amp;b=&quot;&gt;&lt;script&gt;\">\
             https://node-2/status?a=1&amp;b=&quot;&gt;&lt;script&gt;</a>"
        );
    }
}
