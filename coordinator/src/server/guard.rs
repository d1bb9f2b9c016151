//! The browser is a caller like any other: every request of both planes passes [`check`] before
//! anything of it is read, and every answer gets [`harden`]'s headers.
//!
//! - **Host** (DNS rebinding): a page on `rebind.attacker.example` whose name an attacker points
//!   at 127.0.0.1 reaches this server with that name in `Host`. Only loopback names
//!   (`localhost`, `*.localhost`), IP literals (a rebinding needs a name) and the configured
//!   `public_hosts` are served; any other name gets 421 before the route is looked at.
//! - **Origin** (CSRF): a state-changing request (any method but GET, HEAD, OPTIONS) that a
//!   browser marks as coming from another site (`Origin` not this host, `Origin: null`, or
//!   `Sec-Fetch-Site: cross-site`) gets 403 unless its origin is in `allowed_origins`.
//! - **Content-Type**: a body sent as something other than JSON (a cross-site "simple" request
//!   is `text/plain`, a form or multipart) gets 415; a body without a type (curl, SDKs that omit
//!   it) is read as JSON, since a browser always names the type of a body it sends.
//! - **Answers**: `nosniff`, `X-Frame-Options: DENY`, `Referrer-Policy: no-referrer`, and on
//!   HTML a Content-Security-Policy that lets the page talk to this origin only.
//! - **CORS**: only an origin in `allowed_origins` gets `Access-Control-Allow-*` headers (and an
//!   answer to its preflight); every other origin gets none, so a browser keeps the answer from
//!   the page.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use crate::config::CoordinatorConfig;
use crate::error::ApiError;

/// The code of a request refused for its `Host`.
pub(crate) const HOST_CODE: &str = "host_not_allowed";
/// The code of a state-changing request refused for its origin.
pub(crate) const ORIGIN_CODE: &str = "cross_origin_refused";
/// The code of a body refused for its type.
pub(crate) const MEDIA_CODE: &str = "unsupported_media_type";

/// The content security policy of every HTML answer: scripts and styles of the page itself
/// (the status page's are inline), requests to this origin only, no frames, no forms elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self' 'unsafe-inline'; \
style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Checks a request's `Host`, origin and body type against the configuration (see the module
/// documentation); the error is the answer to give, and nothing of the request has been read.
pub(crate) fn check<B>(cfg: &CoordinatorConfig, req: &Request<B>) -> Result<(), ApiError> {
    let headers = req.headers();
    let host = header_str(headers, header::HOST)
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if let Some(host) = &host
        && !host_allowed(host, &cfg.public_hosts)
    {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "invalid_request_error",
            format!(
                "this server does not answer for the host {:?}: add it to [coordinator] \
                 public_hosts to serve it",
                truncate(host, 80)
            ),
        )
        .code(HOST_CODE));
    }
    if !changes_state(req.method()) {
        return Ok(());
    }
    let origin = header_str(headers, header::ORIGIN);
    let listed = origin.is_some_and(|o| origin_listed(o, &cfg.allowed_origins));
    let cross_site =
        header_str(headers, "sec-fetch-site").is_some_and(|s| s.eq_ignore_ascii_case("cross-site"));
    let foreign = match origin {
        Some(o) => !same_origin(o, host.as_deref()),
        None => cross_site,
    };
    if (foreign || cross_site) && !listed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            format!(
                "a {} from the origin {:?} is refused: only this server's own pages and \
                 [coordinator] allowed_origins may change state",
                req.method(),
                truncate(origin.unwrap_or("(cross-site)"), 80)
            ),
        )
        .code(ORIGIN_CODE));
    }
    if let Some(ct) = header_str(headers, header::CONTENT_TYPE)
        && has_body(headers)
        && !is_json(ct)
    {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!(
                "the body's type is {:?}: send JSON (Content-Type: application/json)",
                truncate(ct, 80)
            ),
        )
        .code(MEDIA_CODE));
    }
    Ok(())
}

/// Whether `method` may change state (everything but the safe methods of RFC 9110).
fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether the request says it carries a body (a length above zero, or a chunked one).
fn has_body(headers: &HeaderMap) -> bool {
    let length = header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// `application/json`, `application/*+json`, with any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A header as text (`None`: absent or not visible ASCII).
fn header_str<K: header::AsHeaderName>(headers: &HeaderMap, name: K) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The host name of a `Host` value or an origin's authority, lower-cased, without its port
/// (brackets of an IPv6 literal kept off too).
fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let name = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match a.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => a,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (a `Host` header) may be served: a loopback name, an IP literal, or one of
/// `public` (names, with or without a port; `"*"` serves every name).
pub(crate) fn host_allowed(host: &str, public: &[String]) -> bool {
    let name = host_name(host);
    if name.is_empty() {
        return false;
    }
    if name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok()
    {
        return true;
    }
    public
        .iter()
        .any(|p| p == "*" || host_name(p) == name || p.eq_ignore_ascii_case(host))
}

/// Whether `origin` (`scheme://host[:port]`) is the server's own: its authority is the `Host`
/// the request was sent to.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let Some((_, authority)) = origin.split_once("://") else {
        return false; // `null` and anything else that is not an origin
    };
    authority.eq_ignore_ascii_case(host.trim())
}

/// Whether `origin` is one of `allowed` (exact, case-insensitive; `"*"` allows every origin).
fn origin_listed(origin: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// At most `n` bytes of `s` (on a character boundary), for messages that quote a header.
fn truncate(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The answer to a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) from an origin
/// in `allowed_origins`; `None` for any other request (it is routed as usual, and a preflight
/// from another origin gets no CORS headers, so the browser stops there).
pub(crate) fn preflight<B, R: Default>(
    cfg: &CoordinatorConfig,
    req: &Request<B>,
) -> Option<Response<R>> {
    if req.method() != Method::OPTIONS
        || !req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return None;
    }
    let origin = header_str(req.headers(), header::ORIGIN)?;
    if !origin_listed(origin, &cfg.allowed_origins) {
        return None;
    }
    let mut r = Response::new(R::default());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    Some(r)
}

/// Adds the headers every answer carries (see the module documentation); `origin` is the
/// request's, answered with CORS headers only when `allowed_origins` lists it.
pub(crate) fn harden<B>(
    cfg: &CoordinatorConfig,
    origin: Option<&HeaderValue>,
    r: &mut Response<B>,
) {
    let html = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if html {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    if let Some(o) = origin
        && o.to_str()
            .is_ok_and(|o| origin_listed(o, &cfg.allowed_origins))
    {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn req(method: Method, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder()
            .method(method)
            .uri("/api/v1/models/unload");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    fn code(cfg: &CoordinatorConfig, r: &Request<()>) -> Option<u16> {
        check(cfg, r).err().map(|e| e.status.as_u16())
    }

    #[test]
    fn hosts_are_loopback_names_ip_literals_or_configured() {
        let public = ["gpu.example.org".to_owned()];
        for ok in [
            "localhost",
            "localhost:8210",
            "LOCALHOST.",
            "app.localhost:1",
            "127.0.0.1:8210",
            "[::1]:8210",
            "10.1.2.3",
            "gpu.example.org:8210",
            "GPU.example.org",
        ] {
            assert!(host_allowed(ok, &public), "{ok}");
        }
        for bad in [
            "rebind.attacker.example",
            "rebind.attacker.example:8210",
            "localhost.attacker.example",
            "gpu.example.org.attacker.example",
            "",
            ":8210",
        ] {
            assert!(!host_allowed(bad, &public), "{bad}");
        }
        assert!(host_allowed("anything.example", &["*".to_owned()]));
    }

    #[test]
    fn foreign_hosts_cross_site_writes_and_non_json_bodies_are_refused() {
        let cfg = CoordinatorConfig::default();
        let host = ("host", "127.0.0.1:8210");
        // DNS rebinding: refused whatever the method.
        assert_eq!(
            code(
                &cfg,
                &req(Method::GET, &[("host", "rebind.attacker.example")])
            ),
            Some(421)
        );
        // Reads from anywhere pass (the browser keeps the answer from a foreign page).
        assert_eq!(code(&cfg, &req(Method::GET, &[host])), None);
        // A cross-site write, a null origin, a Sec-Fetch-Site without Origin: 403.
        for h in [
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![
                host,
                ("origin", "http://127.0.0.1:8210"),
                ("sec-fetch-site", "cross-site"),
            ],
        ] {
            assert_eq!(code(&cfg, &req(Method::POST, &h)), Some(403), "{h:?}");
        }
        // The page's own fetch, and a client that sends no Origin: allowed.
        assert_eq!(
            code(
                &cfg,
                &req(
                    Method::POST,
                    &[
                        host,
                        ("origin", "http://127.0.0.1:8210"),
                        ("sec-fetch-site", "same-origin")
                    ]
                )
            ),
            None
        );
        assert_eq!(code(&cfg, &req(Method::POST, &[host])), None);
        // A body that is not JSON: 415; JSON with parameters or a +json type: fine.
        let typed = |ct: &'static str| vec![host, ("content-type", ct), ("content-length", "2")];
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert_eq!(
                code(&cfg, &req(Method::POST, &typed(bad))),
                Some(415),
                "{bad}"
            );
        }
        for good in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert_eq!(code(&cfg, &req(Method::POST, &typed(good))), None, "{good}");
        }
        // An allowed origin may write.
        let cfg = CoordinatorConfig {
            allowed_origins: vec!["https://app.example".to_owned()],
            ..CoordinatorConfig::default()
        };
        assert_eq!(
            code(
                &cfg,
                &req(Method::POST, &[host, ("origin", "https://app.example")])
            ),
            None
        );
    }

    #[test]
    fn answers_are_hardened_and_cors_is_for_allowed_origins_only() {
        let cfg = CoordinatorConfig {
            allowed_origins: vec!["https://app.example".to_owned()],
            ..CoordinatorConfig::default()
        };
        let mut html = Response::builder()
            .header("content-type", "text/html; charset=utf-8")
            .body(())
            .unwrap();
        harden(
            &cfg,
            Some(&HeaderValue::from_static("https://evil.example")),
            &mut html,
        );
        assert_eq!(html.headers()["x-frame-options"], "DENY");
        assert_eq!(html.headers()["x-content-type-options"], "nosniff");
        assert!(
            html.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert!(!html.headers().contains_key("access-control-allow-origin"));
        let mut json = Response::builder()
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        harden(
            &cfg,
            Some(&HeaderValue::from_static("https://app.example")),
            &mut json,
        );
        assert_eq!(
            json.headers()["access-control-allow-origin"],
            "https://app.example"
        );
        assert!(!json.headers().contains_key("content-security-policy"));
        let pre = req(
            Method::OPTIONS,
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
            ],
        );
        let r: Response<()> = preflight(&cfg, &pre).unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        let evil = req(
            Method::OPTIONS,
            &[
                ("origin", "https://evil.example"),
                ("access-control-request-method", "POST"),
            ],
        );
        assert!(preflight::<(), ()>(&cfg, &evil).is_none());
    }
}
