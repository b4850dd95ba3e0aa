//! The JSON object a POST endpoint receives, read within the body limit
//! and the body timeout, and kept as JSON so that the endpoint can name
//! every offending field (docs/api.md, "Errors").

use std::marker::PhantomData;

use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaMediaType, MetaRequest, Registry},
    types::Type,
};
use serde_json::{Map, Value};

use super::error::{ApiError, FieldErrors};
use crate::{
    service::{users::UserRef, validate},
    state::AppState,
};

/// A request body as received: any JSON, validated field by field by the
/// endpoint so that every offending field is named. Published with the
/// schema of `T`.
pub struct JsonObject<T>(pub Value, PhantomData<T>);

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
        let (limit, timeout) = request.data::<AppState>().map_or(
            (
                crate::config::DEFAULT_MAX_BODY_BYTES,
                std::time::Duration::from_secs(2),
            ),
            |s| (s.max_body_bytes, s.body_timeout),
        );
        // A body declared too large is refused before it is read when
        // reading it could not help: the client waits for `100 Continue`
        // (it then never sends the body), or more would come than the server
        // drains anyway.
        let declared = request
            .headers()
            .get(poem::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let expects_continue = super::middleware::expects_continue(request.headers());
        if let Some(declared) = declared
            && declared > limit as u64
            && (expects_continue
                || declared
                    > limit.saturating_add(super::middleware::OVERSIZED_BODY_DRAIN_BYTES) as u64)
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

/// The fields of a JSON object body, checked one by one; every offending
/// field is recorded.
pub(super) struct Fields<'a> {
    object: &'a Map<String, Value>,
    errors: FieldErrors,
}

impl<'a> Fields<'a> {
    /// The object's fields, with each one not in `known` (when given)
    /// recorded as an error; `Err` with the error under `body` when `body`
    /// is no object.
    pub(super) fn of(body: &'a Value, known: Option<&[&str]>) -> Result<Fields<'a>, FieldErrors> {
        let Value::Object(object) = body else {
            return Err(FieldErrors::from([(
                "body".to_owned(),
                "the body must be a JSON object".to_owned(),
            )]));
        };
        let mut errors = FieldErrors::new();
        let unknown = |name: &&String| known.is_some_and(|known| !known.contains(&name.as_str()));
        for name in object.keys().filter(unknown) {
            errors.insert(
                name.clone(),
                format!("{name} is not a field of this request"),
            );
        }
        Ok(Fields { object, errors })
    }

    pub(super) fn fail(&mut self, name: &str, sentence: String) {
        self.errors.insert(name.to_owned(), sentence);
    }

    /// The field `name` as sent, if it was.
    pub(super) fn value(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name)
    }

    /// The required `payment_system`.
    pub(super) fn payment_system(&mut self) -> Option<String> {
        self.string(
            "payment_system",
            validate::is_payment_system,
            "cstm: followed by 4 to 20 lower-case letters",
        )
    }

    /// The required `order_id`.
    pub(super) fn order_id(&mut self) -> Option<String> {
        self.string(
            "order_id",
            validate::is_order_id,
            "Order: followed by 8 to 11 letters or digits",
        )
    }

    /// A required string field that `ok` accepts.
    pub(super) fn string(
        &mut self,
        name: &str,
        ok: fn(&str) -> bool,
        format: &str,
    ) -> Option<String> {
        match self.object.get(name) {
            None | Some(Value::Null) => self.fail(name, format!("{name} is required")),
            Some(Value::String(text)) if ok(text) => return Some(text.clone()),
            Some(_) => self.fail(name, format!("{name} must be {format}")),
        }
        None
    }

    /// An integer field of at least `min`: `Ok(None)` when absent or null.
    pub(super) fn integer(&mut self, name: &str, min: i64) -> Result<Option<i64>, ()> {
        match self.object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n >= min) => Ok(n.as_i64()),
            Some(_) => {
                self.fail(name, format!("{name} must be an integer >= {min}"));
                Err(())
            }
        }
    }

    /// The user named by `user_id`, `email` or both.
    pub(super) fn user(&mut self) -> Option<UserRef> {
        let user_id = self.integer("user_id", 1);
        let email = match self.object.get("email") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if text.is_empty() => Ok(None),
            Some(Value::String(text)) if validate::is_email(text) => Ok(Some(text.clone())),
            Some(_) => {
                self.fail("email", "email must be a valid e-mail address".into());
                Err(())
            }
        };
        match (user_id, email) {
            (Ok(None), Ok(None)) => {
                self.fail("user_id", "user_id is required when email is empty".into());
                None
            }
            (Ok(user_id), Ok(email)) => Some(UserRef { user_id, email }),
            _ => None,
        }
    }

    /// `value` when no field offended, else every offence.
    pub(super) fn finish<T>(self, value: Option<T>) -> Result<T, FieldErrors> {
        match value {
            Some(value) if self.errors.is_empty() => Ok(value),
            _ => Err(self.errors),
        }
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
/// what follows is read and thrown away by [`DrainUnreadBody`] before the
/// 413 goes out, so that the client can read it.
///
/// [`DrainUnreadBody`]: super::middleware::DrainUnreadBody
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
    /// `DrainUnreadBody` does, against a 64 KiB limit.
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
