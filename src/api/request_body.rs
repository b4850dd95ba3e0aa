//! The JSON object a POST endpoint receives, read within the body limit
//! and the body timeout, and kept as JSON so that the endpoint's
//! validation step can name every offending field (docs/api.md, "Errors").

use std::marker::PhantomData;

use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaMediaType, MetaRequest, Registry},
    types::Type,
};
use serde_json::Value;

use super::{
    error::ApiError,
    middleware,
    validation::{Fields, Validation},
};
use crate::state::AppState;

/// A request body as received: any JSON, read field by field by the
/// endpoint's validation step so that every offending field is named.
/// Published with the schema of `T`.
pub struct JsonObject<T>(pub Value, PhantomData<T>);

impl<T> JsonObject<T> {
    /// The body's fields, each one not in `known` (when given) an offence.
    pub fn fields<'c>(
        &self,
        check: &'c mut Validation,
        known: Option<&[&str]>,
    ) -> Option<Fields<'_, 'c>> {
        check.object(&self.0, known)
    }
}

impl<'a, T: Type> ApiExtractor<'a> for JsonObject<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: Some(
                "A JSON object sent with Content-Type application/json (at most 64 KiB unless the operator configured another limit). Every offending field is reported at once in VALIDATION_ERROR's `message`.",
            ),
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: T::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        let is_json = request
            .content_type()
            .and_then(|ct| ct.parse::<mime::Mime>().ok())
            .is_some_and(|m| m.essence_str() == "application/json");
        if !is_json {
            return Err(ApiError::validation_field(
                "body",
                "Content-Type must be application/json",
            )
            .into());
        }
        // Present as it is for authentication, which runs first.
        let state = request.data::<AppState>().ok_or_else(ApiError::internal)?;
        let (limit, timeout) = (state.max_body_bytes, state.body_timeout);
        // A body declared too large is refused before it is read when
        // reading it could not help: the client waits for `100 Continue`
        // (it then never sends the body), or more would come than the server
        // drains anyway.
        let drained = limit.saturating_add(middleware::OVERSIZED_BODY_DRAIN_BYTES) as u64;
        if let Some(declared) = middleware::declared_length(request.headers())
            && declared > limit as u64
            && (middleware::expects_continue(request.headers()) || declared > drained)
        {
            return Err(ApiError::payload_too_large().into());
        }
        // A client that sends its body too slowly gets 408, before the
        // request timeout would answer 503 for it.
        let deadline = tokio::time::Instant::now() + timeout;
        let bytes = read_body(body.take()?, limit, deadline)
            .await
            .map_err(|err| match err {
                BodyReadError::TooLarge => ApiError::payload_too_large(),
                BodyReadError::TimedOut => ApiError::request_timeout(),
                BodyReadError::Io => {
                    ApiError::validation_field("body", "the request body could not be read")
                }
            })?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|_| ApiError::validation_field("body", "the body must be a JSON object"))?;
        Ok(JsonObject(value, PhantomData))
    }
}

#[derive(Debug, PartialEq, Eq)]
enum BodyReadError {
    /// More than the limit was sent.
    TooLarge,
    /// The body (within the limit so far) did not arrive by the deadline.
    TimedOut,
    /// The connection failed while the body was being read.
    Io,
}

/// Reads a body of at most `limit` bytes by `deadline`. At the first chunk
/// past the limit it stops: the body is too large whatever follows, and
/// what follows is read and thrown away by [`drain_unread_body`] before the
/// 413 goes out, so that the client can read it.
///
/// [`drain_unread_body`]: super::middleware::drain_unread_body
async fn read_body(
    body: poem::Body,
    limit: usize,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, BodyReadError> {
    use futures_util::StreamExt;
    let mut stream = std::pin::pin!(body.into_bytes_stream());
    let mut kept = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) if kept.len() + chunk.len() <= limit => {
                kept.extend_from_slice(&chunk);
            }
            Ok(Some(Ok(_))) => return Err(BodyReadError::TooLarge),
            Ok(None) => return Ok(kept),
            Ok(Some(Err(_))) => return Err(BodyReadError::Io),
            Err(_) => return Err(BodyReadError::TimedOut),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::api::middleware::{
        OVERSIZED_BODY_DRAIN_BYTES, SharedBody,
        tests::{counted_body, far},
    };

    /// Reads, against a 1 KiB limit, a body that sends `first` bytes and
    /// then nothing more: it never ends, so the deadline always passes first.
    async fn read_stalled_body(first: usize) -> Result<Vec<u8>, BodyReadError> {
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(vec![b'x'; first])]);
        let body = poem::Body::from_bytes_stream(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        ));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        read_body(body, 1024, deadline).await
    }

    #[tokio::test]
    async fn a_body_that_stalls_within_the_limit_times_out() {
        assert_eq!(read_stalled_body(100).await, Err(BodyReadError::TimedOut));
    }

    #[tokio::test]
    async fn a_body_that_stalls_past_the_limit_is_too_large_not_late() {
        // The client must not retry it as it is: 413, not 408.
        assert_eq!(read_stalled_body(2048).await, Err(BodyReadError::TooLarge));
    }

    #[tokio::test]
    async fn a_body_of_exactly_the_limit_is_read_whole() {
        let (body, _) = counted_body(8, 1024);
        assert_eq!(
            read_body(body, 8 * 1024, far()).await.map(|b| b.len()),
            Ok(8 * 1024)
        );
    }

    #[tokio::test]
    async fn one_byte_over_the_limit_is_too_large() {
        let (body, _) = counted_body(1, 8 * 1024 + 1);
        assert_eq!(
            read_body(body, 8 * 1024, far()).await,
            Err(BodyReadError::TooLarge)
        );
    }

    /// Reads `body` as the endpoint does and drains what is left as
    /// `drain_unread_body` does, against a 64 KiB limit.
    async fn read_then_drain(body: poem::Body) -> Result<Vec<u8>, BodyReadError> {
        let shared = SharedBody::new(body);
        let read = read_body(shared.reader(), 64 * 1024, far()).await;
        shared
            .drain(64 * 1024 + OVERSIZED_BODY_DRAIN_BYTES, far())
            .await;
        read
    }

    #[tokio::test]
    async fn a_moderately_oversized_body_is_read_to_its_end() {
        // 160 KiB against a 64 KiB limit: all of it is read, so the client
        // finishes sending before the 413 and the connection stays clean.
        let (body, pulled) = counted_body(20, 8 * 1024);
        assert_eq!(read_then_drain(body).await, Err(BodyReadError::TooLarge));
        assert_eq!(pulled.load(Ordering::SeqCst), 160 * 1024);
    }

    #[tokio::test]
    async fn an_endless_body_is_drained_only_up_to_the_bound() {
        let (body, pulled) = counted_body(usize::MAX, 8 * 1024);
        assert_eq!(read_then_drain(body).await, Err(BodyReadError::TooLarge));
        let pulled = pulled.load(Ordering::SeqCst);
        assert!(pulled > OVERSIZED_BODY_DRAIN_BYTES, "{pulled}");
        assert!(
            pulled <= 64 * 1024 + OVERSIZED_BODY_DRAIN_BYTES + 8 * 1024,
            "{pulled}"
        );
    }
}
