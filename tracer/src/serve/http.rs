//! The HTTP face of `serve`: `GET /metrics` answers the last window's exposition. It runs on
//! a thread and runtime of its own, so a scrape is answered while a window's `/proc` pass or
//! NVML query blocks the engine's thread.
//!
//! What a server facing a network must not let a client do: hold a connection without
//! sending its request (`HEADER_TIMEOUT`), never read the response (`CONNECTION_TIMEOUT`
//! closes it), or open connections without bound (`MAX_CONNECTIONS` at once; the rest wait
//! in the kernel's backlog).

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use http_body_util::Full;
use hyper::{body::Bytes, header, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

/// How long a client may take to send its request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may last, keep-alive included: a client that stops reading its
/// response is cut off then.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 256;

/// The OpenMetrics text format, which Prometheus asks for first and every version since 2.5
/// reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The last exposition, shared between the engine (writer) and the server (readers).
#[derive(Debug, Default)]
pub struct Latest(Mutex<Option<Arc<str>>>);

impl Latest {
    /// Make `text` the exposition every later scrape gets.
    pub fn publish(&self, text: String) {
        // A poisoned lock only means a reader panicked mid-clone: the value is whole.
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text.into());
    }

    fn get(&self) -> Option<Arc<str>> {
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
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                log::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
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
            drop(permit);
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
            let mut r = Response::new(Full::new(Bytes::from(body.as_bytes().to_vec())));
            r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        "/" => text(StatusCode::OK, "gputrace serve: the metrics are at /metrics\n"),
        _ => text(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n"),
    }
}
