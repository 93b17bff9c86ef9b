//! The HTTP face of `serve`: `GET /metrics` answers the last window's exposition. It runs on
//! a thread and runtime of its own, so a scrape is answered while a window's `/proc` pass or
//! NVML query blocks the engine's thread.
//!
//! What a server facing a network must not let a client do: hold a connection idle or
//! without sending its request (`HEADER_TIMEOUT`, which hyper also applies between the
//! requests of a kept-alive connection), never read the response (`CONNECTION_TIMEOUT`
//! closes it), open connections without bound (`MAX_CONNECTIONS` at once; the rest wait in
//! the kernel's backlog), or take all of those slots itself (`clients::MAX_PER_CLIENT` per
//! source address; one more is answered 503 at once and closed).

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use http_body_util::Full;
use hyper::{body::Bytes, header, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use super::clients::{Clients, MAX_PER_CLIENT};

/// How long a client may take to send a request's headers, and how long a kept-alive
/// connection may sit idle between requests. Prometheus sends its request at once; five
/// seconds also suit a person typing into `nc`.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last, keep-alive included: a client that stops reading its
/// response is cut off then. A scrape takes milliseconds; Prometheus's default scrape timeout
/// is 10 s, and a scraper whose connection was closed opens another.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;

/// What a client over its share hears before its connection is closed: one small write,
/// which a fresh socket's send buffer always takes, so answering never waits on the client.
fn too_many() -> String {
    let body = format!("more than {MAX_PER_CLIENT} connections at once from your address\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The OpenMetrics text format, which Prometheus asks for first and every version since 2.5
/// reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The last exposition, shared between the engine (writer) and the server (readers). One
/// buffer per window: `Bytes` is reference-counted, so each scrape sends the same bytes
/// without copying them (an exposition of a busy host is tens of kilobytes, and scrapes may
/// come from several clients at once).
#[derive(Debug, Default)]
pub struct Latest(Mutex<Option<Bytes>>);

impl Latest {
    /// Make `text` the exposition every later scrape gets (the string's buffer is kept, not
    /// copied).
    pub fn publish(&self, text: String) {
        // A poisoned lock only means a reader panicked mid-clone: the value is whole.
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Bytes::from(text));
    }

    fn get(&self) -> Option<Bytes> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Serve until the process exits. `listener` is bound already (so that a port in use is the
/// command's error, before any probe is loaded).
pub fn spawn(listener: std::net::TcpListener, latest: Arc<Latest>) -> std::io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("gputrace-http".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                log::error!("the HTTP server's runtime: {e}; /metrics is not served");
                return;
            }
        };
        runtime.block_on(accept(listener, latest));
    })
}

async fn accept(listener: std::net::TcpListener, latest: Arc<Latest>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("the HTTP listener: {e}; /metrics is not served");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let clients = Clients::new(MAX_PER_CLIENT);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                log::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(ticket) = clients.enter(peer.ip()) else {
            log::debug!("{peer} holds {MAX_PER_CLIENT} connections already: one more is refused");
            // Best effort: a client that does not read hears nothing and is closed.
            let _ = stream.try_write(too_many().as_bytes());
            continue;
        };
        let latest = latest.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let latest = latest.clone();
                async move { Ok::<_, Infallible>(respond(&request, &latest)) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                log::debug!("a connection ended with: {e}");
            }
            drop((ticket, permit));
        });
    }
}

fn respond<B>(request: &Request<B>, latest: &Latest) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &str| {
        let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match request.uri().path() {
        "/metrics" => {
            let Some(body) = latest.get() else {
                let mut r = text(StatusCode::SERVICE_UNAVAILABLE, "the first window is not over yet\n");
                r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
                return r;
            };
            let mut r = Response::new(Full::new(body));
            r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        "/" => text(StatusCode::OK, "gputrace serve: the metrics are at /metrics\n"),
        _ => text(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n"),
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    fn body(latest: &Latest) -> Bytes {
        let request = Request::get("/metrics").body(()).expect("a request");
        let response = respond(&request, latest);
        assert_eq!(response.status(), StatusCode::OK);
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(response.into_body().collect()).expect("the body").to_bytes()
    }

    #[test]
    fn every_scrape_sends_the_one_buffer_of_the_window() {
        let latest = Latest::default();
        latest.publish("gputrace_sweeps_total 1\n# EOF\n".to_owned());
        let (first, second) = (body(&latest), body(&latest));
        assert_eq!(first, "gputrace_sweeps_total 1\n# EOF\n");
        // The same bytes, not a copy per scrape.
        assert_eq!(first.as_ptr(), second.as_ptr());
        latest.publish("gputrace_sweeps_total 2\n# EOF\n".to_owned());
        assert_eq!(body(&latest), "gputrace_sweeps_total 2\n# EOF\n");
    }

    #[test]
    fn the_refusal_is_a_whole_response() {
        let text = too_many();
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{text}");
    }
}
