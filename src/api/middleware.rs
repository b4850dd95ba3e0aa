//! Request-wide middleware: request ids, access logs and metrics, the
//! request timeout, and draining a body an early answer left unread.
//!
//! Every request gets an id: the caller's `X-Request-Id` when it is a sane
//! token (1 to 128 visible ASCII characters), else a fresh random one. It is
//! echoed in the response and carried by a tracing span, so every log line
//! of the request names it. The access log records method, path (never the
//! query string or headers, so neither e-mails nor tokens are logged), status
//! and latency.

use std::{
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use poem::{
    Endpoint, Request, Response, Result,
    http::{HeaderName, HeaderValue, header},
};
use rand::{Rng, distr::Alphanumeric};
use tracing::Instrument;

use super::error::ApiError;
use crate::metrics::{Metrics, RequestLabels, endpoint_label};

pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn request_id(req: &Request) -> String {
    req.headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            rand::rng()
                .sample_iter(Alphanumeric)
                .take(20)
                .map(char::from)
                .collect()
        })
}

/// Request id, access log and metrics around `inner`; see the module docs.
pub async fn request_context<E: Endpoint>(
    inner: Arc<E>,
    req: Request,
    metrics: Arc<Metrics>,
) -> Result<Response> {
    let id = request_id(&req);
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let span = tracing::info_span!("request", request_id = %id, %method, %path);
    let start = Instant::now();
    let mut response = inner.get_response(req).instrument(span.clone()).await;
    let elapsed = start.elapsed();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID.clone(), value);
    }
    let status = response.status().as_u16();
    metrics.record_request(
        RequestLabels {
            endpoint: endpoint_label(&path),
            method,
            status,
        },
        elapsed,
    );
    span.in_scope(|| {
        tracing::info!(
            status,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        )
    });
    Ok(response)
}

/// `inner`'s answer, or 503 SERVICE_UNAVAILABLE when it takes longer than
/// `limit`. Dropping the unfinished handler rolls back any open transaction,
/// and a SQLite write still waiting for its group is not run.
pub async fn request_timeout<E: Endpoint>(
    inner: Arc<E>,
    req: Request,
    limit: Duration,
) -> Result<Response> {
    match tokio::time::timeout(limit, inner.get_response(req)).await {
        Ok(response) => Ok(response),
        Err(_) => {
            tracing::warn!(limit_ms = limit.as_millis() as u64, "request timed out");
            Ok(ApiError::service_unavailable().to_response())
        }
    }
}

/// Bytes past the body limit that are read and thrown away before a 413.
///
/// A server that answers while the client is still sending, then closes,
/// makes the kernel reset the connection, and most HTTP clients then report
/// "broken pipe" instead of the 413 they were sent (the reason nginx and
/// Apache linger on close). Reading the rest of a moderately oversized body
/// lets the client finish sending and read the answer, also a client that
/// sends its whole body before it reads anything (Python's urllib, PHP's
/// curl with some settings); past this many bytes (or the body timeout) the
/// server answers at once and the connection is closed, so a client cannot
/// make it read without bound. 8 MiB is what a client on a 100 Mbit/s link
/// sends in under a second, well within the body timeout. A 413 comes only
/// after the token and the permission passed.
pub const OVERSIZED_BODY_DRAIN_BYTES: usize = 8 * 1024 * 1024;

/// Bytes past the body limit that are read and thrown away before any other
/// answer given before the body was read (a refused token, an unknown
/// path): less than after a 413, since a caller without a valid token gets
/// these answers too.
pub const UNREAD_BODY_DRAIN_BYTES: usize = 1024 * 1024;

/// `inner`'s answer, once what it left of the request body is read.
///
/// Several answers come before the body is read: 403 and 404 from
/// authentication, which runs before routing, 404 for an unknown path, 400
/// for a `Content-Type` other than JSON. hyper then closes the connection
/// with the rest of the body unread, and the kernel answers the bytes still
/// coming with a reset: a client still sending (a body of a few segments
/// over a real network is enough) gets "broken pipe" or "connection reset"
/// instead of the JSON error it was sent; so does a 413 (the endpoints stop
/// reading at the limit and leave the rest to this layer). This layer
/// keeps a handle on the body the inner endpoints see, and once they have
/// answered reads and throws away whatever they left, up to the body limit
/// plus [`OVERSIZED_BODY_DRAIN_BYTES`] after a 413 or
/// [`UNREAD_BODY_DRAIN_BYTES`] after another answer, in all (the chunk that
/// crosses it is the last one read), and within the body timeout;
/// past either the answer goes out at once. The connection then
/// stays usable for the client's next request.
///
/// Requests without a body pass straight through (three header lookups), and
/// so do those that wait for `100 Continue` (reading would ask the client
/// for the body it is right not to send) or declare more than would be read.
/// `max_body_bytes` is the body limit, `body_timeout` the body timeout.
pub async fn drain_unread_body<E: Endpoint>(
    inner: Arc<E>,
    mut req: Request,
    max_body_bytes: usize,
    body_timeout: Duration,
) -> Result<Response> {
    let most = max_body_bytes.saturating_add(OVERSIZED_BODY_DRAIN_BYTES);
    if !body_to_drain(&req, most) {
        return Ok(inner.get_response(req).await);
    }
    let deadline = tokio::time::Instant::now() + body_timeout;
    let body = SharedBody::new(req.take_body());
    req.set_body(body.reader());
    let answer = inner.get_response(req).await;
    let bound = if answer.status() == poem::http::StatusCode::PAYLOAD_TOO_LARGE {
        most
    } else {
        max_body_bytes.saturating_add(UNREAD_BODY_DRAIN_BYTES)
    };
    body.drain(bound, deadline).await;
    Ok(answer)
}

/// Whether the client waits for `100 Continue` before it sends the body:
/// hyper sends one when the body is first read. Judged as hyper judges it,
/// by the last `Expect` line.
pub fn expects_continue(headers: &poem::http::HeaderMap) -> bool {
    headers
        .get_all(header::EXPECT)
        .iter()
        .next_back()
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Whether the request carries a body worth draining; see
/// [`drain_unread_body`].
fn body_to_drain(req: &Request, bound: usize) -> bool {
    let headers = req.headers();
    if expects_continue(headers) {
        return false;
    }
    match headers.get(header::CONTENT_LENGTH) {
        Some(_) => declared_length(headers).is_some_and(|n| n > 0 && n <= bound as u64),
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// The body length the `Content-Length` header declares, when it is a number.
pub fn declared_length(headers: &poem::http::HeaderMap) -> Option<u64> {
    let length = headers.get(header::CONTENT_LENGTH)?.to_str().ok()?;
    length.parse().ok()
}

type BodyStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static>>;

/// A request body read through a shared handle, so that what the endpoint
/// leaves can still be read after it has dropped its end.
#[derive(Clone)]
pub(crate) struct SharedBody(Arc<Mutex<SharedBodyState>>);

struct SharedBodyState {
    stream: BodyStream,
    /// Bytes read so far, by either end.
    read: usize,
    /// The stream ended or failed: it is not polled again.
    finished: bool,
}

impl SharedBody {
    pub(crate) fn new(body: poem::Body) -> Self {
        SharedBody(Arc::new(Mutex::new(SharedBodyState {
            stream: Box::pin(body.into_bytes_stream()),
            read: 0,
            finished: false,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SharedBodyState> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<std::io::Result<Bytes>>> {
        let mut state = self.state();
        if state.finished {
            return Poll::Ready(None);
        }
        let next = state.stream.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) => state.read = state.read.saturating_add(chunk.len()),
            Poll::Ready(_) => state.finished = true,
            Poll::Pending => {}
        }
        next
    }

    /// The body the endpoint reads.
    pub(crate) fn reader(&self) -> poem::Body {
        let shared = self.clone();
        poem::Body::from_bytes_stream(futures_util::stream::poll_fn(move |cx| {
            shared.poll_next(cx)
        }))
    }

    fn read(&self) -> usize {
        self.state().read
    }

    /// Reads and throws away the rest, until the end, an error, `bound`
    /// bytes read in all, or `deadline`.
    pub(crate) async fn drain(&self, bound: usize, deadline: tokio::time::Instant) {
        while self.read() <= bound {
            let next = std::future::poll_fn(|cx| self.poll_next(cx));
            match tokio::time::timeout_at(deadline, next).await {
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_)) | None) | Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::StreamExt;
    use poem::EndpointExt;

    use super::*;

    /// A body of `chunks` chunks of `size` bytes that counts the bytes the
    /// reader pulled from it (also used by `api::request_body`'s tests).
    pub(crate) fn counted_body(chunks: usize, size: usize) -> (poem::Body, Arc<AtomicUsize>) {
        let pulled = Arc::new(AtomicUsize::new(0));
        let counter = pulled.clone();
        let stream = futures_util::stream::iter((0..chunks).map(move |_| {
            counter.fetch_add(size, Ordering::SeqCst);
            Ok::<_, std::io::Error>(vec![b'x'; size])
        }));
        (poem::Body::from_bytes_stream(stream), pulled)
    }

    pub(crate) fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(3600)
    }

    /// After a 413 the rest of an endless body is drained up to 8 MiB past
    /// the limit; after another answer (a refused token) up to 1 MiB.
    #[tokio::test]
    async fn only_a_413_drains_up_to_the_larger_bound() {
        use poem::http::StatusCode;
        let limit = 64 * 1024;
        for (status, extra) in [
            (StatusCode::PAYLOAD_TOO_LARGE, OVERSIZED_BODY_DRAIN_BYTES),
            (StatusCode::FORBIDDEN, UNREAD_BODY_DRAIN_BYTES),
        ] {
            let (body, pulled) = counted_body(usize::MAX, 8 * 1024);
            let endpoint = poem::endpoint::make_sync(move |_| status).around(move |ep, req| {
                drain_unread_body(ep, req, limit, Duration::from_secs(3600))
            });
            let request = Request::builder()
                .method(poem::http::Method::POST)
                .header(header::TRANSFER_ENCODING, "chunked")
                .body(body);
            let answer = endpoint.call(request).await.expect("an answer");
            assert_eq!(answer.status(), status);
            let pulled = pulled.load(Ordering::SeqCst);
            assert!(pulled > limit + extra, "{status}: {pulled}");
            assert!(pulled <= limit + extra + 8 * 1024, "{status}: {pulled}");
        }
    }

    #[tokio::test]
    async fn what_the_endpoint_left_is_read_to_the_end() {
        let (body, pulled) = counted_body(10, 1000);
        let shared = SharedBody::new(body);
        // The endpoint reads one chunk and drops its end.
        let mut reader = shared.reader().into_bytes_stream();
        assert_eq!(reader.next().await.unwrap().unwrap().len(), 1000);
        drop(reader);
        shared.drain(1 << 20, far()).await;
        assert_eq!(pulled.load(Ordering::SeqCst), 10_000);
        assert_eq!(shared.read(), 10_000);
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_not_polled_again() {
        // Three chunks, the end, then a panic if polled once more.
        let mut polls = 0;
        let stream = futures_util::stream::poll_fn(move |_| {
            polls += 1;
            match polls {
                1..=3 => Poll::Ready(Some(Ok::<_, std::io::Error>(vec![b'x'; 100]))),
                4 => Poll::Ready(None),
                _ => panic!("polled after its end"),
            }
        });
        let shared = SharedBody::new(poem::Body::from_bytes_stream(stream));
        let all = shared.reader().into_bytes().await.unwrap();
        assert_eq!(all.len(), 300);
        shared.drain(1 << 20, far()).await;
        assert_eq!(shared.read(), 300);
    }

    #[tokio::test]
    async fn an_endless_body_is_drained_only_up_to_the_bound() {
        let (body, pulled) = counted_body(usize::MAX, 8 * 1024);
        let shared = SharedBody::new(body);
        shared.drain(100 * 1024, far()).await;
        let pulled = pulled.load(Ordering::SeqCst);
        assert!(pulled > 100 * 1024, "{pulled}");
        assert!(pulled <= 108 * 1024, "{pulled}");
    }

    #[tokio::test]
    async fn a_stalled_body_is_left_at_the_deadline() {
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(vec![b'x'; 10])]);
        let body = poem::Body::from_bytes_stream(first.chain(futures_util::stream::pending()));
        let shared = SharedBody::new(body);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(1);
        shared.drain(1 << 20, deadline).await;
        assert_eq!(shared.read(), 10);
    }

    #[test]
    fn only_a_body_that_will_be_read_is_drained() {
        let bound = 64 * 1024 + OVERSIZED_BODY_DRAIN_BYTES;
        let request = |headers: &[(&str, &str)]| {
            let mut builder = Request::builder().method(poem::http::Method::POST);
            for (name, value) in headers {
                builder = builder.header(*name, *value);
            }
            builder.finish()
        };
        assert!(!body_to_drain(&request(&[]), bound));
        assert!(!body_to_drain(&request(&[("content-length", "0")]), bound));
        assert!(body_to_drain(&request(&[("content-length", "10")]), bound));
        let at_bound = bound.to_string();
        assert!(body_to_drain(
            &request(&[("content-length", &at_bound)]),
            bound
        ));
        let past = (bound + 1).to_string();
        assert!(!body_to_drain(
            &request(&[("content-length", &past)]),
            bound
        ));
        assert!(!body_to_drain(
            &request(&[("content-length", "ten")]),
            bound
        ));
        assert!(body_to_drain(
            &request(&[("transfer-encoding", "chunked")]),
            bound
        ));
        assert!(!body_to_drain(
            &request(&[("content-length", "10"), ("expect", "100-continue")]),
            bound
        ));
        // The last `Expect` line decides, as in hyper.
        let mut twice = request(&[("content-length", "10")]);
        twice
            .headers_mut()
            .append(header::EXPECT, HeaderValue::from_static("x"));
        twice
            .headers_mut()
            .append(header::EXPECT, HeaderValue::from_static("100-Continue"));
        assert!(!body_to_drain(&twice, bound));
        let mut last_other = request(&[("content-length", "10"), ("expect", "100-continue")]);
        last_other
            .headers_mut()
            .append(header::EXPECT, HeaderValue::from_static("x"));
        assert!(body_to_drain(&last_other, bound));
    }
}
