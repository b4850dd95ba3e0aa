//! The error format (docs/api.md): `{"success":false,"code":...}` plus,
//! for VALIDATION_ERROR, `message`, an object mapping each offending field to
//! one sentence.
//!
//! Two halves: [`ApiError`] is what middleware and the catch-all handler
//! return for errors raised outside an endpoint (authentication, unknown
//! paths, framework rejections); the `*Body` types are the documented bodies
//! the endpoints' response enums carry, one per status, each enumerating the
//! codes it may hold so that the OpenAPI document and generated SDKs know
//! them. Both serialize to the same JSON. Internal details (database errors)
//! never reach a body; they are logged instead.

use std::collections::BTreeMap;

use poem::{
    IntoResponse, Response,
    error::ResponseError,
    http::{StatusCode, header},
};
use poem_openapi::{Enum, Object, types::Example};
use serde::Serialize;

use poem_openapi::payload::Json;

use crate::{
    domain::{Email, TextFormat},
    service::auth::AuthError,
    store::StoreError,
};

/// Field name → one human-readable sentence.
pub type FieldErrors = BTreeMap<String, String>;

/// An error answered outside an endpoint's response enum.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{code}")]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub success: bool,
    pub code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<FieldErrors>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str) -> Self {
        ApiError {
            status,
            success: false,
            code,
            message: None,
        }
    }

    pub fn validation(message: FieldErrors) -> Self {
        ApiError {
            message: Some(message),
            ..ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR")
        }
    }

    pub fn validation_field(field: &str, sentence: impl Into<String>) -> Self {
        Self::validation(FieldErrors::from([(field.to_owned(), sentence.into())]))
    }

    /// The error as a JSON response.
    pub fn to_response(&self) -> Response {
        json_response(self.status, self)
    }
}

/// The errors of one status and code, each a constructor of [`ApiError`].
macro_rules! fixed_errors {
    ($($name:ident: $status:ident, $code:literal;)*) => {
        impl ApiError {
            $(pub fn $name() -> Self {
                ApiError::new(StatusCode::$status, $code)
            })*
        }
    };
}

fixed_errors! {
    not_found: NOT_FOUND, "NOT_FOUND";
    payload_too_large: PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE";
    access_denied: FORBIDDEN, "ACCESS_DENIED";
    request_timeout: REQUEST_TIMEOUT, "REQUEST_TIMEOUT";
    service_unavailable: SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE";
    internal: INTERNAL_SERVER_ERROR, "INTERNAL_ERROR";
}

impl ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        self.status
    }

    fn as_response(&self) -> Response {
        self.to_response()
    }
}

/// A JSON response with `Content-Type: application/json`.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let body = serde_json::to_vec(body).unwrap_or_else(|_| b"{\"success\":false}".to_vec());
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .into_response()
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        let code = match err {
            AuthError::EmptyToken => "EMPTY_TOKEN",
            AuthError::InvalidToken => "INVALID_TOKEN",
            AuthError::TokenNotFound => "TOKEN_NOT_FOUND",
            AuthError::TokenDisabled => "TOKEN_DISABLED",
            AuthError::EmptyAccess => "EMPTY_ACCESS",
            AuthError::ProjectNotFound => {
                return ApiError::new(StatusCode::NOT_FOUND, "PROJECT_NOT_FOUND");
            }
            AuthError::Store(err) => {
                tracing::error!(error = %err, "authentication failed: database unavailable");
                return ApiError::service_unavailable();
            }
        };
        ApiError::new(StatusCode::FORBIDDEN, code)
    }
}

/// Declares documented error bodies, each with a `code` of a fixed set.
///
/// The code enum's description is where the meaning of each of its codes
/// is written (OpenAPI 3.0 has no per-value descriptions, so the variants
/// carry none), and the body's `code` property is a plain `$ref` to it: a
/// description on the property itself would make poem-openapi wrap the
/// reference in `allOf`, which SDK generators such as openapi-python-client
/// cannot take for an enum.
macro_rules! error_bodies {
    ($(
        $(#[$doc:meta])*
        $body:ident,
        $(#[$cdoc:meta])*
        $code:ident { $($variant:ident),+ $(,)? },
        example = $example:ident;
    )+) => {$(
        $(#[$cdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
        #[oai(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $code {
            $($variant),+
        }

        $(#[$doc])*
        #[derive(Debug, Clone, Object)]
        #[oai(example)]
        pub struct $body {
            /// Always `false` on errors.
            pub success: bool,
            // Machine-readable error code; undocumented here on purpose, see
            // the macro's docs.
            pub code: $code,
        }

        impl Example for $body {
            fn example() -> Self {
                $body { success: false, code: $code::$example }
            }
        }

        /// The body of an endpoint's reply enum, written as its code.
        impl From<$code> for Json<$body> {
            fn from(code: $code) -> Json<$body> {
                Json($body { success: false, code })
            }
        }
    )+};
}

error_bodies! {
    /// The token was refused. Checked in this order:
    /// EMPTY_TOKEN, INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED,
    /// EMPTY_ACCESS, then (after PROJECT_NOT_FOUND and NOT_FOUND, both 404)
    /// ACCESS_DENIED.
    AuthErrorBody,
    /// Why the token was refused: EMPTY_TOKEN (no `Authorization: Bearer`
    /// token), INVALID_TOKEN (not 64 characters, or the scheme is not
    /// Bearer), TOKEN_NOT_FOUND (never issued, deleted, or replaced by a
    /// reissue and past its grace period), TOKEN_DISABLED (the token is
    /// disabled or past its expiry), EMPTY_ACCESS (the token has no
    /// permissions at all), ACCESS_DENIED (the token lacks this endpoint's
    /// permission).
    AuthErrorCode {
        EmptyToken,
        InvalidToken,
        TokenNotFound,
        TokenDisabled,
        EmptyAccess,
        AccessDenied,
    },
    example = AccessDenied;

    /// The user, the server, the token's project or the endpoint was not found.
    BalanceNotFoundBody,
    /// What was not found: USER_NOT_FOUND (no user of the token's project
    /// has this user_id / email, or they name different users),
    /// SERVER_NOT_FOUND (server_id > 0 names no server of the token's
    /// project), PROJECT_NOT_FOUND (the token's project is missing or
    /// inactive), NOT_FOUND (no such v2 endpoint, or the HTTP method is
    /// wrong).
    BalanceNotFoundCode {
        UserNotFound,
        ServerNotFound,
        ProjectNotFound,
        NotFound,
    },
    example = UserNotFound;

    /// The order, the token's project or the endpoint was not found.
    OrderNotFoundBody,
    /// What was not found: ORDER_NOT_FOUND (the order does not exist, belongs
    /// to another project, or was created with another payment_system),
    /// PROJECT_NOT_FOUND (the token's project is missing or inactive),
    /// NOT_FOUND (no such v2 endpoint, or the HTTP method is wrong).
    OrderNotFoundCode {
        OrderNotFound,
        ProjectNotFound,
        NotFound,
    },
    example = OrderNotFound;

// The completion's conflict; its name predates ORDER_CANCELLED and is kept
// for the clients generated from the document.
    /// The order was already completed (a duplicate webhook: treat it as
    /// success and do not resend), or was cancelled. Nothing was changed.
    AlreadyCompletedBody,
    /// ORDER_ALREADY_COMPLETED: the order is already completed.
    /// ORDER_CANCELLED: the order was cancelled and is never credited.
    AlreadyCompletedCode {
        OrderAlreadyCompleted,
        OrderCancelled,
    },
    example = OrderAlreadyCompleted;

    /// The order is no longer pending: it was completed (its amount was
    /// credited) or already cancelled. Nothing was changed.
    CancelConflictBody,
    /// ORDER_ALREADY_COMPLETED: the order was completed and cannot be
    /// cancelled. ORDER_ALREADY_CANCELLED: the order is already cancelled
    /// (a repeated cancellation: treat it as success).
    CancelConflictCode {
        OrderAlreadyCompleted,
        OrderAlreadyCancelled,
    },
    example = OrderAlreadyCancelled;

    /// The Idempotency-Key was already used for a request with another body
    /// in this project. Nothing was created; send a new key for a new order.
    IdempotencyConflictBody,
    /// IDEMPOTENCY_KEY_REUSED: the key was used before with another body.
    IdempotencyConflictCode { IdempotencyKeyReused },
    example = IdempotencyKeyReused;

    /// The request body is larger than the service's limit (64 KiB unless
    /// the operator configured another).
    PayloadTooLargeBody,
    /// PAYLOAD_TOO_LARGE: the request body exceeds the limit.
    PayloadTooLargeCode { PayloadTooLarge },
    example = PayloadTooLarge;

    /// The request body did not arrive in time (slow client). Nothing was
    /// changed; send the request again.
    RequestTimeoutBody,
    /// REQUEST_TIMEOUT: the request body was not received within the time
    /// limit.
    RequestTimeoutCode { RequestTimeout },
    example = RequestTimeout;

    /// Completion failed and was rolled back entirely; retrying with
    /// exponential back-off is safe.
    CompleteFailedBody,
    /// Why completion failed: ORDER_UPDATE_FAILED (setting the order's status
    /// failed), PAYMENT_PROCESSING_ERROR (crediting the balance or logging
    /// the operation failed). Either way the transaction was rolled back.
    CompleteFailedCode {
        OrderUpdateFailed,
        PaymentProcessingError,
    },
    example = PaymentProcessingError;

    /// The order cannot be completed as it stands, and retrying will not
    /// change that: crediting its amount would take the user's main balance
    /// past 999999999999999.99, the largest balance kept. Nothing was
    /// changed, the order stays pending, and the refusal is recorded with it
    /// for the operator, who completes the order from the administration
    /// panel or the command line once the balance allows. Do not retry.
    PaymentRefusedBody,
    /// PAYMENT_PROCESSING_ERROR: the payment cannot be credited to the
    /// balance.
    PaymentRefusedCode { PaymentProcessingError },
    example = PaymentProcessingError;

    /// The database could not be reached in time; nothing was changed.
    /// Retry with exponential back-off.
    CompleteUnavailableBody,
    /// Why the service could not answer now: PAYMENT_PROCESSING_ERROR (the
    /// database did not answer in time while completing the order),
    /// SERVICE_UNAVAILABLE (the database did not answer in time while the
    /// token was checked, or the request took too long).
    CompleteUnavailableCode {
        PaymentProcessingError,
        ServiceUnavailable,
    },
    example = PaymentProcessingError;

    /// An unexpected error; details are in the service's log.
    InternalErrorBody,
    /// INTERNAL_ERROR: an unexpected failure; details are in the service's
    /// log.
    InternalErrorCode { InternalError },
    example = InternalError;

    /// The database could not be reached in time. Retry with back-off.
    UnavailableBody,
    /// SERVICE_UNAVAILABLE: the database did not answer in time, or the
    /// request took too long.
    UnavailableCode { ServiceUnavailable },
    example = ServiceUnavailable;
}

/// VALIDATION_ERROR code (a one-value enum so that SDKs see the constant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ValidationErrorCode {
    /// A parameter is missing or has an invalid format or value.
    ValidationError,
}

/// A parameter or body field is missing or invalid. `message` maps every
/// offending field to one sentence; all of them are reported at once. A body
/// that is not a JSON object, or a Content-Type other than application/json,
/// is reported under the key `body`.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct ValidationErrorBody {
    /// Always `false` on errors.
    pub success: bool,
    pub code: ValidationErrorCode,
    /// Offending field → what is wrong with it.
    pub message: FieldErrors,
}

impl ValidationErrorBody {
    pub fn new(message: FieldErrors) -> Self {
        ValidationErrorBody {
            success: false,
            code: ValidationErrorCode::ValidationError,
            message,
        }
    }
}

impl Example for ValidationErrorBody {
    fn example() -> Self {
        ValidationErrorBody::new(FieldErrors::from([(
            "email".to_owned(),
            format!("email {}", Email::INVALID),
        )]))
    }
}

/// The reply to a failed database operation of an endpoint that answers 500
/// INTERNAL_ERROR or 503 SERVICE_UNAVAILABLE, the error logged with what
/// failed.
pub fn store_failure<R>(err: &StoreError, what: &str) -> R
where
    R: From<InternalErrorCode> + From<UnavailableCode>,
{
    if err.is_unavailable() {
        tracing::error!(error = %err, "{what}: database unavailable");
        UnavailableCode::ServiceUnavailable.into()
    } else {
        tracing::error!(error = %err, "{what} failed");
        InternalErrorCode::InternalError.into()
    }
}

/// An endpoint's reply enum, each variant written with its status as its
/// discriminant (`Ok(Json<Body>) = 200`); its doc comment is the published
/// description of that answer.
macro_rules! reply {
    (
        pub enum $reply:ident {
            $(
                $(#[$doc:meta])*
                $variant:ident($($(#[$field_attr:meta])* $field:ty),+ $(,)?) = $status:tt
            ),+ $(,)?
        }
    ) => {
        #[derive(poem_openapi::ApiResponse)]
        pub enum $reply {
            $(
                $(#[$doc])*
                #[oai(status = $status)]
                $variant($($(#[$field_attr])* $field),+),
            )+
        }
    };
}
pub(crate) use reply;

/// The replies endpoints share, converted into `$reply` for `?` in its
/// handler: VALIDATION_ERROR from the validation step, and each listed error
/// code as the body of its variant; `store` stands for the codes of
/// [`store_failure`].
macro_rules! shared_replies {
    ($reply:ident, store $(, $variant:ident: $code:path)* $(,)?) => {
        shared_replies!(
            $reply,
            Internal: $crate::api::error::InternalErrorCode,
            Unavailable: $crate::api::error::UnavailableCode
            $(, $variant: $code)*
        );
    };
    ($reply:ident $(, $variant:ident: $code:path)* $(,)?) => {
        impl From<$crate::api::error::FieldErrors> for $reply {
            fn from(errors: $crate::api::error::FieldErrors) -> Self {
                $reply::BadRequest(Json($crate::api::error::ValidationErrorBody::new(errors)))
            }
        }
        $(
            impl From<$code> for $reply {
                fn from(code: $code) -> Self {
                    $reply::$variant(code.into())
                }
            }
        )*
    };
}
pub(crate) use shared_replies;

/// An endpoint's reply, from its steps written with `?`: a step that
/// refuses ends them with its refusal, converted into the reply enum.
pub async fn answer<R>(steps: impl Future<Output = Result<R, R>>) -> R {
    steps.await.unwrap_or_else(|refusal| refusal)
}
