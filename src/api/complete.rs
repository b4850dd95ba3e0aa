//! `POST /v2/payment/order/complete`: the endpoint, its body and its reply.

use chrono::{DateTime, Utc};
use poem_openapi::{Enum, Object, OpenApi, payload::Json, types::Example};
use serde_json::Value;

use super::{
    error::{
        AlreadyCompletedBody, AlreadyCompletedCode, AuthErrorBody, CompleteFailedBody,
        CompleteFailedCode, CompleteUnavailableBody, CompleteUnavailableCode, OrderNotFoundBody,
        OrderNotFoundCode, PayloadTooLargeBody, PaymentRefusedBody, PaymentRefusedCode,
        RequestTimeoutBody, ValidationErrorBody, answer, reply, shared_replies,
    },
    formats::example_time,
    request_body::JsonObject,
    security::CompleteToken,
    tags::ApiTags,
    validation::{Validation, validate},
};
use crate::{
    domain::{OrderId, PaymentSystem},
    service::{
        orders::{self, CompleteError, CompletedOrder, Completion},
        validate::PAYMENT_ID_MAX_LEN,
    },
    state::AppState,
};

pub struct CompleteApi;

/// Completes a payment order. Send it from your server once the payment
/// gateway's callback has arrived and its signature was verified.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct CompleteOrderRequest {
    /// The payment system the order was created with: `cstm:` followed by 4
    /// to 20 lower-case letters. Must match the one stored with the order.
    pub payment_system: PaymentSystem,
    /// The order's id: `Order:` followed by 8 to 11 letters or digits.
    pub order_id: OrderId,
    /// The payment's id in the payment system, for reconciliation; optional,
    /// at most 255 characters. `null`, absent and `""` all mean none.
    #[oai(nullable, validator(max_length = 255))]
    pub payment_id: Option<String>,
}

impl Example for CompleteOrderRequest {
    fn example() -> Self {
        CompleteOrderRequest {
            payment_system: PaymentSystem::example(),
            order_id: OrderId::example(),
            payment_id: Some("pay_8f2c1a".into()),
        }
    }
}

/// The completed order.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct CompleteOrderResponse {
    /// Always `true` on success.
    pub success: bool,
    /// The order's id, as sent.
    pub order_id: OrderId,
    /// The order's payment system, as sent.
    pub payment_system: PaymentSystem,
    /// The payment id recorded with the order, or null when none was given.
    /// Always present.
    #[oai(nullable)]
    pub payment_id: Option<String>,
    // Always `completed`; described by [`CompletedStatus`] (a description here
    // would wrap the reference in `allOf`, see `error.rs`).
    pub status: CompletedStatus,
    /// The amount credited to the user's main balance: a decimal string with
    /// two fraction digits.
    #[oai(validator(pattern = r"^[0-9]+\.[0-9]{2}$"))]
    pub amount: String,
    /// When the order was completed (RFC 3339, UTC).
    pub completed_at: DateTime<Utc>,
}

// Published as `OrderStatus`, the name generated clients know; in the code
// its name says how it differs from the order's own status (`entity`'s).
/// The order's status after completion: always `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename = "OrderStatus", rename_all = "lowercase")]
pub enum CompletedStatus {
    /// The order is completed.
    Completed,
}

impl Example for CompleteOrderResponse {
    fn example() -> Self {
        CompleteOrderResponse {
            success: true,
            order_id: OrderId::example(),
            payment_system: PaymentSystem::example(),
            payment_id: Some("pay_8f2c1a".into()),
            status: CompletedStatus::Completed,
            amount: "10.25".into(),
            completed_at: example_time(),
        }
    }
}

reply! {
    pub enum CompleteReply {
        /// The order is now completed, the user's main balance was credited by its
        /// amount (on the order's server, or the general account), and the
        /// operation was logged, all in one transaction.
        Ok(Json<CompleteOrderResponse>) = 200,
        /// VALIDATION_ERROR: payment_system or order_id missing or malformed,
        /// payment_id not a string of at most 255 characters, or the body not a
        /// JSON object sent as application/json (reported under `body`).
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `payment/order/complete` permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// ORDER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<OrderNotFoundBody>) = 404,
        /// ORDER_ALREADY_COMPLETED or ORDER_CANCELLED; nothing was changed.
        Conflict(Json<AlreadyCompletedBody>) = 409,
        /// REQUEST_TIMEOUT; nothing was changed.
        RequestTimeout(Json<RequestTimeoutBody>) = 408,
        /// PAYLOAD_TOO_LARGE; nothing was changed.
        PayloadTooLarge(Json<PayloadTooLargeBody>) = 413,
        /// PAYMENT_PROCESSING_ERROR, final: nothing was changed; do not retry.
        Refused(Json<PaymentRefusedBody>) = 422,
        /// ORDER_UPDATE_FAILED or PAYMENT_PROCESSING_ERROR; nothing was changed.
        Failed(Json<CompleteFailedBody>) = 500,
        /// PAYMENT_PROCESSING_ERROR or SERVICE_UNAVAILABLE; nothing was changed.
        Unavailable(Json<CompleteUnavailableBody>) = 503,
    }
}

shared_replies! {
    CompleteReply,
    NotFound: OrderNotFoundCode,
    Conflict: AlreadyCompletedCode,
    Refused: PaymentRefusedCode,
    Failed: CompleteFailedCode,
    Unavailable: CompleteUnavailableCode,
}

impl From<CompleteError> for CompleteReply {
    fn from(err: CompleteError) -> Self {
        match err {
            CompleteError::OrderNotFound => OrderNotFoundCode::OrderNotFound.into(),
            CompleteError::AlreadyCompleted => AlreadyCompletedCode::OrderAlreadyCompleted.into(),
            CompleteError::Cancelled => AlreadyCompletedCode::OrderCancelled.into(),
            CompleteError::UpdateFailed(err) => {
                tracing::error!(error = %err, "order status update failed");
                CompleteFailedCode::OrderUpdateFailed.into()
            }
            CompleteError::ProcessingFailed(err) => {
                tracing::error!(error = %err, "payment processing failed");
                CompleteFailedCode::PaymentProcessingError.into()
            }
            CompleteError::BalanceCeiling => PaymentRefusedCode::PaymentProcessingError.into(),
            CompleteError::Unavailable(err) => {
                tracing::error!(error = %err, "payment processing: database unavailable");
                CompleteUnavailableCode::PaymentProcessingError.into()
            }
        }
    }
}

/// Counts how the completion of `order_id` ended, by the completions
/// metric's labels, and logs a success or a refusal for good (the
/// conversion into the reply logs the failures with their error).
fn record_outcome(
    state: &AppState,
    order_id: &OrderId,
    completed: &Result<CompletedOrder, CompleteError>,
) {
    state.metrics.record_completion(match completed {
        Ok(done) => {
            tracing::info!(
                order_id = %done.order_id,
                user_id = done.user_id,
                server_id = done.server_id,
                amount = %done.amount,
                "order completed"
            );
            "completed"
        }
        Err(CompleteError::OrderNotFound) => "order_not_found",
        Err(CompleteError::AlreadyCompleted) => "already_completed",
        Err(CompleteError::Cancelled) => "order_cancelled",
        Err(CompleteError::UpdateFailed(_)) => "order_update_failed",
        Err(CompleteError::ProcessingFailed(_)) => "payment_processing_error",
        Err(CompleteError::BalanceCeiling) => {
            tracing::warn!(%order_id, "completion refused: the credit would pass the balance ceiling");
            "balance_ceiling"
        }
        Err(CompleteError::Unavailable(_)) => "unavailable",
    });
}

impl CompleteOrderRequest {
    /// The body read, every offending field named; fields other than these
    /// three are ignored.
    fn read(body: &JsonObject<Self>, check: &mut Validation) -> Option<Self> {
        let mut fields = body.fields(check, None)?;
        let payment_system = fields.required("payment_system");
        let order_id = fields.required("order_id");
        let payment_id = match fields.value("payment_id") {
            None => Some(None),
            Some(Value::String(text)) if text.is_empty() => Some(None),
            Some(Value::String(text)) if text.chars().count() <= PAYMENT_ID_MAX_LEN => {
                Some(Some(text.clone()))
            }
            Some(_) => {
                let rule = format!("must be a string of at most {PAYMENT_ID_MAX_LEN} characters");
                fields.refuse("payment_id", rule);
                None
            }
        };
        Some(CompleteOrderRequest {
            payment_system: payment_system?,
            order_id: order_id?,
            payment_id: payment_id?,
        })
    }

    /// The completion it asks for, in `project_id`.
    fn completion(&self, project_id: i64) -> Completion {
        Completion {
            project_id,
            order_id: self.order_id.to_string(),
            payment_system: self.payment_system.to_string(),
            payment_id: self.payment_id.clone(),
            audit: None,
        }
    }
}

impl CompleteOrderResponse {
    /// The answer to `request`, which completed as `done` says.
    fn of(request: CompleteOrderRequest, done: CompletedOrder) -> Self {
        CompleteOrderResponse {
            success: true,
            order_id: request.order_id,
            payment_system: request.payment_system,
            payment_id: done.payment_id,
            status: CompletedStatus::Completed,
            amount: done.amount.to_string(),
            completed_at: done.completed_at,
        }
    }
}

#[OpenApi(tag = "ApiTags::PaymentOrders")]
impl CompleteApi {
    /// Complete a payment order
    ///
    /// Marks the order completed, credits its amount to the user's main
    /// balance (on the order's server, or the general account) and logs the
    /// operation, all in one database transaction. Call it from your server
    /// after the payment gateway's callback, once you have confirmed the
    /// payment and verified the callback's signature. Exactly once: of any
    /// number of calls for one order, concurrent or not, one gets 200 and
    /// the rest 409 ORDER_ALREADY_COMPLETED, which means "already done":
    /// treat it as success and do not resend. A cancelled order is never
    /// completed (409 ORDER_CANCELLED). An order whose credit would take the
    /// balance past its ceiling is refused for good (422
    /// PAYMENT_PROCESSING_ERROR, nothing changed; do not retry). On 5xx
    /// nothing was changed; retry with exponential back-off. Requires the `payment/order/complete`
    /// permission.
    #[oai(
        path = "/v2/payment/order/complete",
        method = "post",
        operation_id = "completePaymentOrder"
    )]
    async fn complete(
        &self,
        auth: CompleteToken,
        state: poem::web::Data<&AppState>,
        body: JsonObject<CompleteOrderRequest>,
    ) -> CompleteReply {
        answer(async {
            let request = validate(|check| CompleteOrderRequest::read(&body, check))
                .inspect_err(|_| state.metrics.record_completion("validation_error"))?;
            let completion = request.completion(auth.0.principal.project_id);
            let completed = orders::complete(&state.db, &*state.store, &completion).await;
            record_outcome(&state, &request.order_id, &completed);
            let reply = CompleteOrderResponse::of(request, completed?);
            Ok(CompleteReply::Ok(Json(reply)))
        })
        .await
    }
}
