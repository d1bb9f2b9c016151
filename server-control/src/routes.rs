//! A route table for the HTTP routers of the HOROS crates (a gateway's planes, its admin API,
//! the [`AdminExtension`](crate::AdminExtension)s): paths with named parameters
//! (`/v1/jobs/{id}/cancel`, `/{*rest}` for the rest of a path), each with the methods it
//! serves. One table says which route a request takes and, when none, whether the path is
//! unknown (404) or served under other methods (405, with the methods an `Allow` header names),
//! so the 405 cannot drift from the routes. No route is matched by cutting a path at an offset.
//!
//! A table is built once (at start, or in a `static`) and read by every request.

use std::borrow::Cow;

use http::{Method, StatusCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::admin::{AdminAnswer, error_answer};

/// A route that cannot join its table (two routes on one path and method, or a path that
/// `matchit` refuses: two parameters in one segment, a catch-all that is not last); a table is
/// built from fixed routes, so this is a programming error its tests find.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the route {route} cannot be served: {why}")]
pub struct RouteError {
    /// The route as written.
    pub route: String,
    /// What is wrong with it.
    pub why: String,
}

impl RouteError {
    /// The 500 answer of a router whose table could not be built.
    pub fn answer(&self) -> AdminAnswer {
        error_answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            self.to_string(),
            None,
            None,
        )
    }
}

/// Why a request found no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No route has this path: a 404.
    NotFound,
    /// Routes have this path, under other methods: a 405 whose `Allow` header is `allow`
    /// (`GET, DELETE`).
    MethodNotAllowed {
        /// The methods the path is served under, comma-separated.
        allow: String,
    },
}

impl Miss {
    /// The answer's status: 404 or 405.
    pub fn status(&self) -> StatusCode {
        match self {
            Miss::NotFound => StatusCode::NOT_FOUND,
            Miss::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// The message and `code` of the answer to `method` `path`.
    pub fn message(&self, method: &Method, path: &str) -> (String, &'static str) {
        match self {
            Miss::NotFound => (format!("no route for {method} {path}"), "unknown_url"),
            Miss::MethodNotAllowed { allow } => (
                format!("{method} is not allowed on {path} (allowed: {allow})"),
                "method_not_allowed",
            ),
        }
    }

    /// The answer of an [`AdminExtension`](crate::AdminExtension) to `method` `path`, in the
    /// OpenAI error format ([`error_answer`]); a 405 names the methods allowed in its message.
    ///
    /// A 405's error object also carries `"allow"`, the methods allowed, from which the
    /// coordinator writes the answer's `Allow` header.
    pub fn answer(&self, method: &Method, path: &str) -> AdminAnswer {
        let (message, code) = self.message(method, path);
        let (status, mut v) = error_answer(
            self.status(),
            "invalid_request_error",
            message,
            Some(code),
            None,
        );
        if let (Miss::MethodNotAllowed { allow }, Some(e)) = (self, v.get_mut("error")) {
            e["allow"] = serde_json::Value::String(allow.clone());
        }
        (status, v)
    }
}

/// A path parameter that is missing or is not UTF-8 once decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// The route has no parameter of this name (a route and its handler disagree).
    #[error("the route has no parameter `{0}`")]
    Missing(String),
    /// The parameter's `%XX` escapes decode to bytes that are not UTF-8.
    #[error("the path parameter `{name}` is not UTF-8 once decoded: {raw}")]
    NotUtf8 {
        /// The parameter's name.
        name: String,
        /// Its value as sent.
        raw: String,
    },
}

/// The named parameters of a matched path.
#[derive(Debug)]
pub struct PathParams<'t, 'p>(matchit::Params<'t, 'p>);

impl<'t, 'p> PathParams<'t, 'p> {
    /// The parameter `name` as sent (percent-encoded).
    pub fn raw(&self, name: &str) -> Option<&'p str> {
        self.0.get(name)
    }

    /// The parameter `name` with its `%XX` escapes decoded (an invalid escape stays as it
    /// is; `+` is a plus in a path).
    pub fn decoded(&self, name: &str) -> Result<Cow<'p, str>, ParamError> {
        let raw = self
            .raw(name)
            .ok_or_else(|| ParamError::Missing(name.to_owned()))?;
        percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| ParamError::NotUtf8 {
                name: name.to_owned(),
                raw: raw.to_owned(),
            })
    }
}

/// What a path segment keeps as it is: RFC 3986's unreserved characters. Every other byte,
/// `/`, `?`, `%` and spaces included, is written `%XX`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `value` as one path segment of a URL a client builds (`Qwen/Qwen2.5 7B`:
/// `Qwen%2FQwen2.5%207B`): a route's parameter gets it back whole from
/// [`PathParams::decoded`].
pub fn encode_segment(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// A route found: its value and the path's parameters.
#[derive(Debug)]
pub struct Found<'t, 'p, R> {
    /// The route's value.
    pub route: &'t R,
    /// The path's named parameters.
    pub params: PathParams<'t, 'p>,
}

/// The routes of one router: for each path, the methods it serves (or any method) and each
/// one's value.
#[derive(Debug, Clone)]
pub struct RouteTable<R> {
    router: matchit::Router<Methods<R>>,
}

/// The values of one path, each with its method (`None`: any method).
type Methods<R> = Vec<(Option<Method>, R)>;

impl<R> RouteTable<R> {
    /// A table of `routes`: `(method, path, value)`, where a method of `None` serves any method
    /// on the path (a prefix handed to a router of its own). A path is written in `matchit`'s
    /// syntax: `{name}` is one non-empty segment, `{*name}` the non-empty rest of the path.
    pub fn new<P: Into<String>>(
        routes: impl IntoIterator<Item = (Option<Method>, P, R)>,
    ) -> Result<Self, RouteError> {
        let mut paths: Vec<(String, Methods<R>)> = Vec::new();
        for (method, path, value) in routes {
            let path = path.into();
            let i = match paths.iter().position(|(p, _)| *p == path) {
                Some(i) => i,
                None => {
                    paths.push((path.clone(), Vec::new()));
                    paths.len() - 1
                }
            };
            let methods = &mut paths[i].1;
            let clash = methods
                .iter()
                .any(|(m, _)| m.is_none() || method.is_none() || *m == method);
            if clash {
                return Err(RouteError {
                    route: format!("{} {path}", method.map_or("*".into(), |m| m.to_string())),
                    why: "served twice".into(),
                });
            }
            methods.push((method, value));
        }
        let mut router = matchit::Router::new();
        for (path, methods) in paths {
            router
                .insert(path.clone(), methods)
                .map_err(|e| RouteError {
                    route: path,
                    why: e.to_string(),
                })?;
        }
        Ok(Self { router })
    }

    /// The route of `method` `path` (the path as sent, without its query), or why there is
    /// none.
    pub fn at<'t, 'p>(&'t self, method: &Method, path: &'p str) -> Result<Found<'t, 'p, R>, Miss> {
        let matched = self.router.at(path).map_err(|_| Miss::NotFound)?;
        let route = matched
            .value
            .iter()
            .find(|(m, _)| m.as_ref().is_none_or(|m| m == method))
            .map(|(_, r)| r);
        match route {
            Some(route) => Ok(Found {
                route,
                params: PathParams(matched.params),
            }),
            None => Err(Miss::MethodNotAllowed {
                allow: matched
                    .value
                    .iter()
                    .filter_map(|(m, _)| m.as_ref().map(Method::as_str))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn table() -> RouteTable<u8> {
        RouteTable::new([
            (Some(Method::GET), "/v1/jobs/{id}", 1),
            (Some(Method::DELETE), "/v1/jobs/{id}", 2),
            (Some(Method::POST), "/v1/jobs/{id}/cancel", 3),
            (Some(Method::GET), "/v1/models", 4),
            (None, "/api/{*rest}", 5),
        ])
        .unwrap()
    }

    #[test]
    fn parameters_are_named_and_decoded() {
        let t = table();
        let f = t.at(&Method::POST, "/v1/jobs/a%2Fb%20c/cancel").unwrap();
        assert_eq!(*f.route, 3);
        assert_eq!(f.params.raw("id"), Some("a%2Fb%20c"));
        assert_eq!(f.params.decoded("id").unwrap(), "a/b c");
        // An invalid escape stays as it is; bytes that are not UTF-8 are refused.
        let f = t.at(&Method::GET, "/v1/jobs/%ZZ").unwrap();
        assert_eq!(f.params.decoded("id").unwrap(), "%ZZ");
        let f = t.at(&Method::GET, "/v1/jobs/%FF").unwrap();
        assert!(matches!(
            f.params.decoded("id"),
            Err(ParamError::NotUtf8 { .. })
        ));
        assert!(matches!(
            f.params.decoded("nope"),
            Err(ParamError::Missing(_))
        ));
        let f = t.at(&Method::PATCH, "/api/v1/x/y").unwrap();
        assert_eq!((*f.route, f.params.raw("rest")), (5, Some("v1/x/y")));
    }

    #[test]
    fn a_path_served_under_other_methods_is_a_405_naming_them() {
        let t = table();
        assert_eq!(
            t.at(&Method::PUT, "/v1/jobs/7").unwrap_err(),
            Miss::MethodNotAllowed {
                allow: "GET, DELETE".into()
            }
        );
        assert_eq!(
            t.at(&Method::GET, "/v1/jobs/7/cancel").unwrap_err(),
            Miss::MethodNotAllowed {
                allow: "POST".into()
            }
        );
        let miss = t.at(&Method::POST, "/v1/models").unwrap_err();
        assert_eq!(miss.status(), StatusCode::METHOD_NOT_ALLOWED);
        let (status, v) = miss.answer(&Method::POST, "/v1/models");
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(v["error"]["code"], "method_not_allowed");
        assert!(v["error"]["message"].as_str().unwrap().contains("GET"));
        assert_eq!(v["error"]["allow"], "GET", "{v}");
    }

    #[test]
    fn short_odd_and_long_paths_are_404s() {
        let t = table();
        let long = format!("/v1/jobs/{}", "x/".repeat(10_000));
        for p in [
            "",
            "/",
            "/v1/jobs",
            "/v1/jobs/",
            "/v1/jobs//cancel",
            "/v1/jobs/1/2/cancel",
            "/v1/jobs/1/2",
            "/api/",
            "/v1/models/",
            long.as_str(),
        ] {
            assert_eq!(t.at(&Method::GET, p).unwrap_err(), Miss::NotFound, "{p}");
        }
        // `/v1/jobs/cancel` is a job named `cancel`, read with GET only.
        assert_eq!(
            t.at(&Method::POST, "/v1/jobs/cancel").unwrap_err(),
            Miss::MethodNotAllowed {
                allow: "GET, DELETE".into()
            }
        );
    }

    #[test]
    fn an_encoded_segment_is_one_parameter_decoded_whole() {
        assert_eq!(encode_segment("think-gpu0"), "think-gpu0");
        assert_eq!(encode_segment("Qwen/Qwen2.5 7B"), "Qwen%2FQwen2.5%207B");
        assert_eq!(encode_segment("../x?y%"), "..%2Fx%3Fy%25");
        let t = table();
        for id in ["a/b", "é ü", "%ZZ", "x?y#z", "+"] {
            let path = format!("/v1/jobs/{}/cancel", encode_segment(id));
            let f = t.at(&Method::POST, &path).unwrap();
            assert_eq!(f.params.decoded("id").unwrap(), id, "{path}");
        }
    }

    #[test]
    fn a_route_served_twice_is_refused() {
        let twice = RouteTable::new([(Some(Method::GET), "/a", 1), (Some(Method::GET), "/a", 2)]);
        assert!(twice.is_err());
        let any = RouteTable::new([(None, "/a", 1), (Some(Method::GET), "/a", 2)]);
        assert!(any.is_err());
        let bad = RouteTable::new([(Some(Method::GET), "/{a}{b}", 1)]);
        assert!(bad.is_err());
    }
}
