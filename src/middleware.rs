//! Request-wide middleware: request ids, access logs and metrics, and the
//! request timeout.
//!
//! Every request gets an id: the caller's `X-Request-Id` when it is a sane
//! token (1 to 128 visible ASCII characters), else a fresh random one. It is
//! echoed in the response and carried by a tracing span, so every log line
//! of the request names it. The access log records method, path (never the
//! query string or headers, so neither e-mails nor tokens are logged), status
//! and latency.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response, Result,
    http::{HeaderName, HeaderValue},
};
use rand::{Rng, distr::Alphanumeric};
use tracing::Instrument;

use crate::{
    api::error::ApiError,
    metrics::{Metrics, RequestLabels, endpoint_label},
};

pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Request id, access log and metrics; see the module docs.
pub struct RequestContext {
    pub metrics: Arc<Metrics>,
}

impl<E: Endpoint> Middleware<E> for RequestContext {
    type Output = RequestContextEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        RequestContextEndpoint {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

pub struct RequestContextEndpoint<E> {
    inner: E,
    metrics: Arc<Metrics>,
}

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

impl<E: Endpoint> Endpoint for RequestContextEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Self::Output> {
        let id = request_id(&req);
        let method = req.method().to_string();
        let path = req.uri().path().to_owned();
        let span = tracing::info_span!("request", request_id = %id, %method, %path);
        let start = Instant::now();
        let mut response = match self.inner.call(req).instrument(span.clone()).await {
            Ok(output) => output.into_response(),
            Err(err) => err.into_response(),
        };
        let elapsed = start.elapsed();
        if let Ok(value) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(REQUEST_ID.clone(), value);
        }
        let status = response.status().as_u16();
        self.metrics.record_request(
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
}

/// Answers 503 SERVICE_UNAVAILABLE when a request takes longer than the
/// limit. Dropping the unfinished handler rolls back any open transaction.
pub struct RequestTimeout(pub Duration);

impl<E: Endpoint> Middleware<E> for RequestTimeout {
    type Output = RequestTimeoutEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        RequestTimeoutEndpoint {
            inner,
            limit: self.0,
        }
    }
}

pub struct RequestTimeoutEndpoint<E> {
    inner: E,
    limit: Duration,
}

impl<E: Endpoint> Endpoint for RequestTimeoutEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Self::Output> {
        match tokio::time::timeout(self.limit, self.inner.call(req)).await {
            Ok(Ok(output)) => Ok(output.into_response()),
            Ok(Err(err)) => Ok(err.into_response()),
            Err(_) => {
                tracing::warn!(
                    limit_ms = self.limit.as_millis() as u64,
                    "request timed out"
                );
                Ok(ApiError::service_unavailable().to_response())
            }
        }
    }
}
