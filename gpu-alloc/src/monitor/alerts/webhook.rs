//! The alert webhook's client: one POST of the event's JSON through hyper's client, over
//! http:// or https:// (rustls with ring; the Mozilla roots and, where the settings name one, a
//! PEM file of the user's own), bounded by one timeout from the connection to the answer's
//! status. Built only with the `webhook` feature; without it [`Webhook::new`] answers
//! [`WebhookError::NotBuilt`].

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::WebhookUrl;

/// Why a webhook cannot be built or a POST to it failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// This build has no HTTP client for the webhook (horos-gpu-alloc's `webhook` feature).
    #[error("this build has no webhook client (horos-gpu-alloc's `webhook` feature)")]
    NotBuilt,
    /// The file of extra root certificates cannot be read or holds one that is refused.
    #[error("cannot use the CA file {}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
    /// The file of extra root certificates holds no PEM certificate.
    #[error("the CA file {} holds no PEM certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// TLS cannot be set up with the chosen protocol versions.
    #[error("cannot set up TLS")]
    Tls(#[source] Box<dyn Error + Send + Sync>),
    /// The request cannot be built from the URL.
    #[error("cannot build the request")]
    Request(#[source] http::Error),
    /// No answer: the connection, TLS or the exchange failed.
    #[error("cannot reach the webhook")]
    Send(#[source] Box<dyn Error + Send + Sync>),
    /// The webhook answered, but not with a 2xx status.
    #[error("the webhook answered {0}")]
    Status(http::StatusCode),
    /// No answer within the timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

#[cfg(feature = "webhook")]
mod client {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http::header::{CONTENT_TYPE, USER_AGENT};
    use http_body_util::Full;
    use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use rustls::{ClientConfig, RootCertStore};

    use super::{WebhookError, WebhookUrl};

    /// hyper's client over http:// and https://.
    pub(super) type Client = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

    /// A client that connects within `timeout` and trusts the Mozilla roots and those of
    /// `ca_file`.
    pub(super) fn new(ca_file: Option<&Path>, timeout: Duration) -> Result<Client, WebhookError> {
        let mut http = HttpConnector::new();
        // https:// is the TLS layer's; the TCP connector takes both schemes.
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(ca_file)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // An alert is rare: no connection is kept between two.
        Ok(HyperClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(https))
    }

    /// rustls with ring, the Mozilla roots and the certificates of `ca_file`.
    fn tls_config(ca_file: Option<&Path>) -> Result<ClientConfig, WebhookError> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = ca_file {
            let bad = |source: Box<dyn std::error::Error + Send + Sync>| WebhookError::CaFile {
                path: path.to_path_buf(),
                source,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(Box::new(e)))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(Box::new(e)))?;
            if certs.is_empty() {
                return Err(WebhookError::NoCertificate {
                    path: path.to_path_buf(),
                });
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(Box::new(e)))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| WebhookError::Tls(Box::new(e)))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    /// One POST of `body` (JSON) to `url`; answered 2xx is success. The answer's body is not
    /// read.
    pub(super) async fn post(
        client: &Client,
        url: &WebhookUrl,
        body: &str,
    ) -> Result<(), WebhookError> {
        let request = http::Request::post(url.uri().clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, "horos")
            .body(Full::new(Bytes::from(body.to_owned())))
            .map_err(WebhookError::Request)?;
        let answer = client
            .request(request)
            .await
            .map_err(|e| WebhookError::Send(Box::new(e)))?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(WebhookError::Status(answer.status()))
        }
    }
}

/// Where alerts are POSTed: a checked URL and the client that reaches it.
#[derive(Clone)]
pub struct Webhook {
    url: WebhookUrl,
    timeout: Duration,
    #[cfg(feature = "webhook")]
    client: client::Client,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL's scheme and authority only: its path may carry a token.
        f.debug_struct("Webhook")
            .field("url", &self.url.to_string())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Webhook {
    /// A webhook at `url` that trusts the Mozilla roots and the PEM certificates of `ca_file`
    /// (a private CA, a self-signed receiver), each POST bounded by `timeout` from the
    /// connection to the answer's status. Fails where `ca_file` cannot be used, or the build has
    /// no client ([`WebhookError::NotBuilt`]).
    pub fn new(
        url: WebhookUrl,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Webhook, WebhookError> {
        #[cfg(feature = "webhook")]
        {
            Ok(Webhook {
                client: client::new(ca_file, timeout)?,
                url,
                timeout,
            })
        }
        #[cfg(not(feature = "webhook"))]
        {
            let _ = (url, ca_file, timeout);
            Err(WebhookError::NotBuilt)
        }
    }

    /// Whether this build has the webhook's client (the `webhook` feature).
    pub const BUILT: bool = cfg!(feature = "webhook");

    /// The URL.
    pub fn url(&self) -> &WebhookUrl {
        &self.url
    }

    /// POSTs `body` (JSON); `Ok` where the webhook answered 2xx within the timeout.
    pub async fn post(&self, body: &str) -> Result<(), WebhookError> {
        #[cfg(feature = "webhook")]
        {
            tokio::time::timeout(self.timeout, client::post(&self.client, &self.url, body))
                .await
                .map_err(|_| WebhookError::Timeout(self.timeout))?
        }
        #[cfg(not(feature = "webhook"))]
        {
            let _ = body;
            Err(WebhookError::NotBuilt)
        }
    }
}

#[cfg(feature = "webhook")]
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, mpsc};

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    use super::*;
    use crate::monitor::alerts::with_causes;

    /// What a test receiver was sent: its `host` header and its body.
    struct Received {
        host: String,
        body: String,
    }

    /// Reads one HTTP/1.1 request from `stream`, answers `status`, and sends what it read.
    fn answer(stream: impl Read + Write, status: &str, sent: &mpsc::Sender<Received>) {
        let mut reader = BufReader::new(stream);
        let (mut host, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.trim_end().split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "host" => host = value.trim().to_owned(),
                    "content-length" => length = value.trim().parse().unwrap(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).unwrap();
        let stream = reader.get_mut();
        stream
            .write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").as_bytes())
            .unwrap();
        stream.flush().unwrap();
        let _ = sent.send(Received {
            host,
            body: String::from_utf8(body).unwrap(),
        });
    }

    /// A plain http receiver on 127.0.0.1 that answers each request `status`.
    fn http_receiver(status: &'static str) -> (u16, mpsc::Receiver<Received>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (sent, received) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                answer(stream, status, &sent);
            }
        });
        (port, received)
    }

    /// An https receiver on 127.0.0.1 with a self-signed certificate made here (for
    /// `127.0.0.1` and `localhost`), whose PEM is returned for the client to trust.
    fn https_receiver() -> (u16, String, mpsc::Receiver<Received>) {
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
        let certs: Vec<CertificateDer<'static>> = vec![made.cert.der().clone()];
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (sent, received) = mpsc::channel();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let Ok(tls) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                    continue;
                };
                answer(rustls::StreamOwned::new(tls, tcp), "200 OK", &sent);
            }
        });
        (port, made.cert.pem(), received)
    }

    const SECOND: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn an_https_webhook_with_its_own_root_receives_the_alert_with_the_port_in_host() {
        let (port, pem, received) = https_receiver();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, pem).unwrap();
        let url = WebhookUrl::parse(&format!("https://127.0.0.1:{port}/gpu-alert")).unwrap();
        let hook = Webhook::new(url.clone(), Some(&ca), SECOND).unwrap();
        hook.post(r#"{"event":"temperature_alert","gpu":1}"#)
            .await
            .unwrap();
        let got = received.recv_timeout(SECOND).unwrap();
        assert_eq!(got.body, r#"{"event":"temperature_alert","gpu":1}"#);
        assert_eq!(got.host, format!("127.0.0.1:{port}"));
        // Without the receiver's certificate among its roots, the client refuses it.
        let untrusting = Webhook::new(url, None, SECOND).unwrap();
        let e = untrusting.post("{}").await.unwrap_err();
        assert!(matches!(e, WebhookError::Send(_)), "{e:?}");
        assert!(
            with_causes(&e).contains("certificate"),
            "{}",
            with_causes(&e)
        );
    }

    #[tokio::test]
    async fn a_plain_http_webhook_receives_the_alert_and_a_refusal_is_an_error() {
        let (port, received) = http_receiver("200 OK");
        let url = WebhookUrl::parse(&format!("http://127.0.0.1:{port}/hook?team=gpu")).unwrap();
        Webhook::new(url, None, SECOND)
            .unwrap()
            .post(r#"{"state":"raised"}"#)
            .await
            .unwrap();
        let got = received.recv_timeout(SECOND).unwrap();
        assert_eq!(
            (got.host.as_str(), got.body.as_str()),
            (
                format!("127.0.0.1:{port}").as_str(),
                r#"{"state":"raised"}"#
            )
        );
        let (port, _received) = http_receiver("500 Internal Server Error");
        let url = WebhookUrl::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        let e = Webhook::new(url, None, SECOND)
            .unwrap()
            .post("{}")
            .await
            .unwrap_err();
        assert!(
            matches!(e, WebhookError::Status(s) if s == http::StatusCode::INTERNAL_SERVER_ERROR),
            "{e:?}"
        );
        let closed = WebhookUrl::parse("http://127.0.0.1:1/").unwrap();
        let e = Webhook::new(closed, None, SECOND)
            .unwrap()
            .post("{}")
            .await
            .unwrap_err();
        assert!(matches!(e, WebhookError::Send(_)), "{e:?}");
    }

    #[tokio::test]
    async fn a_receiver_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = WebhookUrl::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        let hook = Webhook::new(url, None, Duration::from_millis(200)).unwrap();
        let e = hook.post("{}").await.unwrap_err();
        assert!(matches!(e, WebhookError::Timeout(_)), "{e:?}");
        drop(listener);
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_when_the_webhook_is_built() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let url = WebhookUrl::parse("https://hooks.example.com/").unwrap();
        assert!(matches!(
            Webhook::new(url.clone(), Some(&empty), SECOND).unwrap_err(),
            WebhookError::NoCertificate { .. }
        ));
        assert!(matches!(
            Webhook::new(url, Some(&dir.path().join("absent.pem")), SECOND).unwrap_err(),
            WebhookError::CaFile { .. }
        ));
    }
}
