//! `POST /v2/payment/order/create`, `GET /v2/payment/order` and
//! `POST /v2/payment/order/cancel`: an order's life besides its completion
//! (`complete`), with the order as all three answer it.

use chrono::{DateTime, Utc};
use entity::payment_order::OrderStatus;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi, payload::Json, types::Example};
use serde_json::Value;

use super::{
    error::{
        AuthErrorBody, BalanceNotFoundBody, BalanceNotFoundCode, CancelConflictBody,
        CancelConflictCode, FieldErrors, IdempotencyConflictBody, IdempotencyConflictCode,
        InternalErrorBody, InternalErrorCode, OrderNotFoundBody, OrderNotFoundCode,
        PayloadTooLargeBody, RequestTimeoutBody, StoreFailure, UnavailableBody,
        ValidationErrorBody,
    },
    params::{HeaderParam, ParamSpec, QueryParam, RawParam},
    request_body::{Fields, JsonObject},
    security::{CancelToken, CreateToken, ReadToken},
    tags::ApiTags,
};
use crate::{
    metrics::OrderEvent,
    money::Money,
    service::{
        orders::{self, CancelError, Cancellation, CreateError, Order, OrderRequest},
        validate,
    },
    state::AppState,
};

pub struct OrdersApi;

/// Where an order is in its life: `pending` (created, awaiting payment),
/// `completed` (paid: its amount was credited, exactly once) or `cancelled`
/// (never credited). `completed` and `cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum PaymentOrderStatus {
    /// Created, awaiting payment.
    Pending,
    /// Paid: its amount was credited, exactly once.
    Completed,
    /// Cancelled: never credited.
    Cancelled,
}

/// A payment order.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct PaymentOrder {
    /// Always `true` on success.
    pub success: bool,
    /// The order's id, issued by the service: `Order:` followed by 8 to 11
    /// letters or digits.
    #[oai(validator(pattern = r"^Order:[A-Za-z0-9]{8,11}$"))]
    pub order_id: String,
    pub status: PaymentOrderStatus,
    /// The user the order credits.
    pub user_id: i64,
    /// The server whose balance the order credits; 0 for the general
    /// master-account balance.
    pub server_id: i64,
    /// The amount credited to the main balance on completion: a decimal
    /// string with two fraction digits.
    #[oai(validator(pattern = r"^[0-9]+\.[0-9]{2}$"))]
    pub amount: String,
    /// `cstm:` followed by 4 to 20 lower-case letters; completion and
    /// cancellation must name the same.
    #[oai(validator(pattern = r"^cstm:[a-z]{4,20}$"))]
    pub payment_system: String,
    /// The payment's id in the payment system, as given on completion; null
    /// when none was given or the order is not completed.
    #[oai(nullable)]
    pub payment_id: Option<String>,
    /// When the order was created (RFC 3339, UTC).
    pub created_at: DateTime<Utc>,
    /// When the order was completed; null unless it is.
    #[oai(nullable)]
    pub completed_at: Option<DateTime<Utc>>,
    /// When the order was cancelled; null unless it is.
    #[oai(nullable)]
    pub cancelled_at: Option<DateTime<Utc>>,
}

impl From<Order> for PaymentOrder {
    fn from(order: Order) -> PaymentOrder {
        PaymentOrder {
            success: true,
            order_id: order.order_id,
            status: match order.status {
                OrderStatus::Pending => PaymentOrderStatus::Pending,
                OrderStatus::Completed => PaymentOrderStatus::Completed,
                OrderStatus::Cancelled => PaymentOrderStatus::Cancelled,
            },
            user_id: order.user_id,
            server_id: order.server_id,
            amount: order.amount.to_string(),
            payment_system: order.payment_system,
            payment_id: order.payment_id,
            created_at: order.created_at,
            completed_at: order.completed_at,
            cancelled_at: order.cancelled_at,
        }
    }
}

fn example_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T10:15:30.123456Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

impl Example for PaymentOrder {
    fn example() -> Self {
        PaymentOrder {
            success: true,
            order_id: "Order:AbC123xYz".into(),
            status: PaymentOrderStatus::Pending,
            user_id: 1,
            server_id: 0,
            amount: "10.25".into(),
            payment_system: "cstm:paygate".into(),
            payment_id: None,
            created_at: example_time(),
            completed_at: None,
            cancelled_at: None,
        }
    }
}

/// A new payment order. Name the user by user_id, by email, or by both
/// (then both must name the same user). No other field is accepted.
#[derive(Debug, Clone, Object)]
#[oai(example, deny_unknown_fields)]
pub struct CreateOrderRequest {
    /// The user's id; required when email is absent, null or empty.
    #[oai(nullable, validator(minimum(value = "1")))]
    pub user_id: Option<i64>,
    /// The user's e-mail address (case-insensitive); required when user_id
    /// is absent or null.
    #[oai(nullable, validator(max_length = 254))]
    pub email: Option<String>,
    /// The server whose balance the order credits; 0 for the general
    /// master-account balance.
    #[oai(validator(minimum(value = "0")))]
    pub server_id: i64,
    /// A decimal string of at least 0.01 and at most 999999999999999.99,
    /// with at most two fraction digits; never a number.
    #[oai(validator(pattern = r"^[0-9]{1,15}(\.[0-9]{1,2})?$"))]
    pub amount: String,
    /// `cstm:` followed by 4 to 20 lower-case letters.
    #[oai(validator(pattern = r"^cstm:[a-z]{4,20}$", min_length = 9, max_length = 25))]
    pub payment_system: String,
}

impl Example for CreateOrderRequest {
    fn example() -> Self {
        CreateOrderRequest {
            user_id: Some(1),
            email: None,
            server_id: 0,
            amount: "10.25".into(),
            payment_system: "cstm:paygate".into(),
        }
    }
}

/// The order to cancel. No other field is accepted.
#[derive(Debug, Clone, Object)]
#[oai(example, deny_unknown_fields)]
pub struct CancelOrderRequest {
    /// The order's id: `Order:` followed by 8 to 11 letters or digits.
    #[oai(validator(
        pattern = r"^Order:[A-Za-z0-9]{8,11}$",
        min_length = 14,
        max_length = 17
    ))]
    pub order_id: String,
    /// The payment system the order was created with.
    #[oai(validator(pattern = r"^cstm:[a-z]{4,20}$", min_length = 9, max_length = 25))]
    pub payment_system: String,
}

impl Example for CancelOrderRequest {
    fn example() -> Self {
        CancelOrderRequest {
            order_id: "Order:AbC123xYz".into(),
            payment_system: "cstm:paygate".into(),
        }
    }
}

/// The longest Idempotency-Key accepted.
const IDEMPOTENCY_KEY_MAX_LEN: usize = 255;

pub struct IdempotencyKeySpec;
impl ParamSpec for IdempotencyKeySpec {
    const NAME: &'static str = "IdempotencyKey";
    const REQUIRED: bool = false;
    fn schema() -> poem_openapi::registry::MetaSchema {
        poem_openapi::registry::MetaSchema {
            min_length: Some(1),
            max_length: Some(IDEMPOTENCY_KEY_MAX_LEN),
            pattern: Some(r"^[!-~]{1,255}$".into()),
            example: Some(serde_json::json!("3f9c2a7e-5b1d-4c8e-9a60-2d4b8f1e7c35")),
            ..poem_openapi::registry::MetaSchema::new("string")
        }
    }
}

pub struct OrderIdSpec;
impl ParamSpec for OrderIdSpec {
    const NAME: &'static str = "OrderId";
    const REQUIRED: bool = true;
    fn schema() -> poem_openapi::registry::MetaSchema {
        poem_openapi::registry::MetaSchema {
            min_length: Some(14),
            max_length: Some(17),
            pattern: Some(r"^Order:[A-Za-z0-9]{8,11}$".into()),
            example: Some(serde_json::json!("Order:AbC123xYz")),
            ..poem_openapi::registry::MetaSchema::new("string")
        }
    }
}

#[derive(ApiResponse)]
pub enum CreateReply {
    /// The order was created, pending; or, for a repeat of an earlier
    /// request with the same Idempotency-Key and body, that request's
    /// answer, with nothing created (then `Idempotent-Replayed: true`).
    #[oai(status = 201)]
    Created(
        Json<PaymentOrder>,
        /// `true` when this answer replays an earlier request with the same
        /// Idempotency-Key; absent otherwise.
        #[oai(header = "Idempotent-Replayed")]
        Option<bool>,
    ),
    /// VALIDATION_ERROR: a field missing or malformed (every one is named),
    /// an unknown field, a malformed Idempotency-Key, or the body not a JSON
    /// object sent as application/json (reported under `body`).
    #[oai(status = 400)]
    BadRequest(Json<ValidationErrorBody>),
    /// The token was refused, or lacks the `payment/order/create` permission.
    #[oai(status = 403)]
    Forbidden(Json<AuthErrorBody>),
    /// USER_NOT_FOUND, SERVER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
    #[oai(status = 404)]
    NotFound(Json<BalanceNotFoundBody>),
    /// REQUEST_TIMEOUT: the body arrived too slowly; nothing was created.
    #[oai(status = 408)]
    RequestTimeout(Json<RequestTimeoutBody>),
    /// IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used before in this
    /// project with another body; nothing was created.
    #[oai(status = 409)]
    Conflict(Json<IdempotencyConflictBody>),
    /// PAYLOAD_TOO_LARGE: the body exceeds the service's limit.
    #[oai(status = 413)]
    PayloadTooLarge(Json<PayloadTooLargeBody>),
    /// INTERNAL_ERROR: an unexpected failure. Retry with the same
    /// Idempotency-Key: should the order have been created after all, the
    /// retry answers it instead of creating another.
    #[oai(status = 500)]
    Internal(Json<InternalErrorBody>),
    /// SERVICE_UNAVAILABLE: the database did not answer in time (the order
    /// may have been created all the same). Retry with the same
    /// Idempotency-Key and exponential back-off: the retry answers the order
    /// if it exists, and creates it if not.
    #[oai(status = 503)]
    Unavailable(Json<UnavailableBody>),
}

#[derive(ApiResponse)]
pub enum ReadReply {
    /// The order as it stands now.
    #[oai(status = 200)]
    Ok(Json<PaymentOrder>),
    /// VALIDATION_ERROR: order_id missing, repeated or malformed.
    #[oai(status = 400)]
    BadRequest(Json<ValidationErrorBody>),
    /// The token was refused, or lacks the `payment/order/read` permission.
    #[oai(status = 403)]
    Forbidden(Json<AuthErrorBody>),
    /// ORDER_NOT_FOUND (no such order in the token's project),
    /// PROJECT_NOT_FOUND or NOT_FOUND.
    #[oai(status = 404)]
    NotFound(Json<OrderNotFoundBody>),
    /// INTERNAL_ERROR: an unexpected failure. Retry with back-off.
    #[oai(status = 500)]
    Internal(Json<InternalErrorBody>),
    /// SERVICE_UNAVAILABLE: the database did not answer in time. Retry with
    /// back-off.
    #[oai(status = 503)]
    Unavailable(Json<UnavailableBody>),
}

#[derive(ApiResponse)]
pub enum CancelReply {
    /// The order was pending and is now cancelled; it will never be
    /// credited.
    #[oai(status = 200)]
    Ok(Json<PaymentOrder>),
    /// VALIDATION_ERROR: order_id or payment_system missing or malformed, an
    /// unknown field, or the body not a JSON object sent as
    /// application/json (reported under `body`).
    #[oai(status = 400)]
    BadRequest(Json<ValidationErrorBody>),
    /// The token was refused, or lacks the `payment/order/cancel` permission.
    #[oai(status = 403)]
    Forbidden(Json<AuthErrorBody>),
    /// ORDER_NOT_FOUND (no such order in the token's project, or created
    /// with another payment_system), PROJECT_NOT_FOUND or NOT_FOUND.
    #[oai(status = 404)]
    NotFound(Json<OrderNotFoundBody>),
    /// REQUEST_TIMEOUT: the body arrived too slowly; nothing was changed.
    #[oai(status = 408)]
    RequestTimeout(Json<RequestTimeoutBody>),
    /// ORDER_ALREADY_COMPLETED or ORDER_ALREADY_CANCELLED: the order is no
    /// longer pending; nothing was changed.
    #[oai(status = 409)]
    Conflict(Json<CancelConflictBody>),
    /// PAYLOAD_TOO_LARGE: the body exceeds the service's limit.
    #[oai(status = 413)]
    PayloadTooLarge(Json<PayloadTooLargeBody>),
    /// INTERNAL_ERROR: an unexpected failure; nothing was changed. Retry
    /// with back-off.
    #[oai(status = 500)]
    Internal(Json<InternalErrorBody>),
    /// SERVICE_UNAVAILABLE: the database did not answer in time; nothing was
    /// changed. Retry with back-off.
    #[oai(status = 503)]
    Unavailable(Json<UnavailableBody>),
}

/// At most 15 integer digits and 2 fraction digits, as the schema says.
fn is_amount_text(text: &str) -> bool {
    let (int, frac) = text.split_once('.').unwrap_or((text, "00"));
    let digits =
        |s: &str, max: usize| (1..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    digits(int, 15) && digits(frac, 2)
}

/// The creation a body asks for, in `project_id`.
fn validate_create(
    body: &Value,
    key: &RawParam<IdempotencyKeySpec>,
    project_id: i64,
) -> Result<(OrderRequest, Option<String>), FieldErrors> {
    let mut fields = Fields::of(
        body,
        Some(&["user_id", "email", "server_id", "amount", "payment_system"]),
    )?;
    let who = fields.user();
    let server_id = match fields.integer("server_id", 0) {
        Ok(Some(id)) => Some(id),
        Ok(None) => {
            fields.fail("server_id", "server_id is required".into());
            None
        }
        Err(()) => None,
    };
    let amount = fields
        .string(
            "amount",
            is_amount_text,
            "a decimal string with at most 15 integer and 2 fraction digits, such as \"10.50\"",
        )
        .and_then(|text| match text.parse::<Money>() {
            Ok(amount) if amount >= Money::from_cents(1).unwrap_or(Money::MAX) => Some(amount),
            _ => {
                fields.fail("amount", "amount must be at least 0.01".into());
                None
            }
        });
    let payment_system = fields.payment_system();
    let key = match key.single("Idempotency-Key") {
        Ok(None) => Some(None),
        Ok(Some(text))
            if (1..=IDEMPOTENCY_KEY_MAX_LEN).contains(&text.len())
                && text.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Some(Some(text.to_owned()))
        }
        Ok(Some(_)) => {
            fields.fail(
                "Idempotency-Key",
                "Idempotency-Key must be 1 to 255 visible ASCII characters".into(),
            );
            None
        }
        Err(sentence) => {
            fields.fail("Idempotency-Key", sentence);
            None
        }
    };
    let request = match (who, server_id, amount, payment_system, key) {
        (Some(who), Some(server_id), Some(amount), Some(payment_system), Some(key)) => Some((
            OrderRequest {
                project_id,
                who,
                server_id,
                amount,
                payment_system,
                order_id: None,
            },
            key,
        )),
        _ => None,
    };
    fields.finish(request)
}

/// The cancellation a body asks for, in `project_id`.
fn validate_cancel(body: &Value, project_id: i64) -> Result<Cancellation, FieldErrors> {
    let mut fields = Fields::of(body, Some(&["order_id", "payment_system"]))?;
    let order_id = fields.order_id();
    let payment_system = fields.payment_system();
    let request = order_id
        .zip(payment_system)
        .map(|(order_id, payment_system)| Cancellation {
            project_id,
            order_id,
            payment_system,
        });
    fields.finish(request)
}

#[OpenApi(tag = "ApiTags::PaymentOrders")]
impl OrdersApi {
    /// Create a payment order
    ///
    /// Creates a pending order for a user of the token's project, crediting
    /// the general master-account balance (server_id 0) or one server's on
    /// completion. The service issues the order_id. Send an
    /// `Idempotency-Key` (a UUID, say) to retry safely: a repeat with the
    /// same key and body answers exactly as the first time (the order as it
    /// was created, with `Idempotent-Replayed: true`) and creates nothing,
    /// however many instances receive it at once; the same key with another
    /// body answers 409 IDEMPOTENCY_KEY_REUSED. Keys are scoped to the
    /// project and kept as long as the order. The user is resolved before
    /// the server. Requires the `payment/order/create` permission.
    #[oai(
        path = "/v2/payment/order/create",
        method = "post",
        operation_id = "createPaymentOrder"
    )]
    async fn create(
        &self,
        caller: CreateToken,
        state: poem::web::Data<&AppState>,
        /// Makes retries safe: 1 to 255 visible ASCII characters, unique per
        /// order you mean to create.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: HeaderParam<RawParam<IdempotencyKeySpec>>,
        body: JsonObject<CreateOrderRequest>,
    ) -> CreateReply {
        let project_id = caller.0.principal.project_id;
        let (request, key) = match validate_create(&body.0, &idempotency_key, project_id) {
            Ok(valid) => valid,
            Err(errors) => return CreateReply::BadRequest(Json(ValidationErrorBody::new(errors))),
        };
        match orders::create(&state.db, &*state.store, &request, key.as_deref()).await {
            Ok(created) => {
                let event = if created.replayed {
                    OrderEvent::IdempotentReplay
                } else {
                    tracing::info!(
                        order_id = %created.order.order_id,
                        user_id = created.order.user_id,
                        server_id = created.order.server_id,
                        amount = %created.order.amount,
                        "order created"
                    );
                    OrderEvent::Created
                };
                state.metrics.record_order_event(event);
                CreateReply::Created(Json(created.order.into()), created.replayed.then_some(true))
            }
            Err(CreateError::UserNotFound) => CreateReply::NotFound(Json(
                BalanceNotFoundBody::new(BalanceNotFoundCode::UserNotFound),
            )),
            Err(CreateError::ServerNotFound) => CreateReply::NotFound(Json(
                BalanceNotFoundBody::new(BalanceNotFoundCode::ServerNotFound),
            )),
            Err(CreateError::KeyReused) => CreateReply::Conflict(Json(
                IdempotencyConflictBody::new(IdempotencyConflictCode::IdempotencyKeyReused),
            )),
            Err(CreateError::Store(err)) => match StoreFailure::of(&err, "order creation") {
                StoreFailure::Internal(body) => CreateReply::Internal(body),
                StoreFailure::Unavailable(body) => CreateReply::Unavailable(body),
            },
            // The request was validated above, and names no order id.
            Err(err @ (CreateError::Invalid(..) | CreateError::OrderIdTaken(_))) => {
                tracing::error!(error = %err, "order creation refused a validated request");
                CreateReply::Internal(Json(InternalErrorBody::new(
                    InternalErrorCode::InternalError,
                )))
            }
        }
    }

    /// Get a payment order
    ///
    /// The order as it stands now: pending, completed (with its payment_id
    /// and completed_at) or cancelled (with cancelled_at). Use it to learn
    /// whether a completion whose answer was lost went through. Requires the
    /// `payment/order/read` permission.
    #[oai(
        path = "/v2/payment/order",
        method = "get",
        operation_id = "getPaymentOrder"
    )]
    async fn read(
        &self,
        caller: ReadToken,
        state: poem::web::Data<&AppState>,
        /// The order's id, as create answered it.
        order_id: QueryParam<RawParam<OrderIdSpec>>,
    ) -> ReadReply {
        let order_id = match order_id.single("order_id") {
            Ok(Some(id)) if validate::is_order_id(id) => id,
            Ok(None) => {
                return ReadReply::BadRequest(one_error("order_id", "order_id is required"));
            }
            Ok(Some(_)) => {
                return ReadReply::BadRequest(one_error(
                    "order_id",
                    "order_id must be Order: followed by 8 to 11 letters or digits",
                ));
            }
            Err(sentence) => return ReadReply::BadRequest(one_error("order_id", &sentence)),
        };
        match orders::get(&state.db, Some(caller.0.principal.project_id), order_id).await {
            Ok(Some(order)) => ReadReply::Ok(Json(order.into())),
            Ok(None) => ReadReply::NotFound(Json(OrderNotFoundBody::new(
                OrderNotFoundCode::OrderNotFound,
            ))),
            Err(err) => match StoreFailure::of(&err, "order read") {
                StoreFailure::Internal(body) => ReadReply::Internal(body),
                StoreFailure::Unavailable(body) => ReadReply::Unavailable(body),
            },
        }
    }

    /// Cancel a payment order
    ///
    /// A pending order becomes cancelled and is never credited: a later
    /// completion answers 409 ORDER_CANCELLED. A completed order cannot be
    /// cancelled (409 ORDER_ALREADY_COMPLETED); a cancelled one answers 409
    /// ORDER_ALREADY_CANCELLED. When cancellation and completion race, exactly
    /// one of them wins. Requires the `payment/order/cancel` permission.
    #[oai(
        path = "/v2/payment/order/cancel",
        method = "post",
        operation_id = "cancelPaymentOrder"
    )]
    async fn cancel(
        &self,
        caller: CancelToken,
        state: poem::web::Data<&AppState>,
        body: JsonObject<CancelOrderRequest>,
    ) -> CancelReply {
        let request = match validate_cancel(&body.0, caller.0.principal.project_id) {
            Ok(request) => request,
            Err(errors) => return CancelReply::BadRequest(Json(ValidationErrorBody::new(errors))),
        };
        match orders::cancel(&state.db, None, &request).await {
            Ok(order) => {
                tracing::info!(order_id = %order.order_id, "order cancelled");
                state.metrics.record_order_event(OrderEvent::Cancelled);
                CancelReply::Ok(Json(order.into()))
            }
            Err(CancelError::OrderNotFound) => CancelReply::NotFound(Json(OrderNotFoundBody::new(
                OrderNotFoundCode::OrderNotFound,
            ))),
            Err(CancelError::AlreadyCompleted) => CancelReply::Conflict(Json(
                CancelConflictBody::new(CancelConflictCode::OrderAlreadyCompleted),
            )),
            Err(CancelError::AlreadyCancelled) => CancelReply::Conflict(Json(
                CancelConflictBody::new(CancelConflictCode::OrderAlreadyCancelled),
            )),
            Err(CancelError::Store(err)) => match StoreFailure::of(&err, "order cancellation") {
                StoreFailure::Internal(body) => CancelReply::Internal(body),
                StoreFailure::Unavailable(body) => CancelReply::Unavailable(body),
            },
        }
    }
}

fn one_error(field: &str, sentence: &str) -> Json<ValidationErrorBody> {
    Json(ValidationErrorBody::new(FieldErrors::from([(
        field.to_owned(),
        sentence.to_owned(),
    )])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_as_the_schema_says() {
        for good in ["1", "0.01", "10.5", "10.50", "999999999999999.99"] {
            assert!(is_amount_text(good), "{good}");
        }
        for bad in [
            "",
            "1e3",
            "-1",
            "+1",
            "1.",
            ".5",
            "0.001",
            "1 ",
            "1,00",
            "1000000000000000",
        ] {
            assert!(!is_amount_text(bad), "{bad}");
        }
    }
}
