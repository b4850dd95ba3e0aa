//! `POST /v2/payment/order/create`, `GET /v2/payment/order` and
//! `POST /v2/payment/order/cancel`: an order's life besides its completion
//! (`complete`), with the order as all three answer it.

use chrono::{DateTime, Utc};
use entity::payment_order::OrderStatus;
use poem_openapi::{
    Enum, Object, OpenApi,
    payload::Json,
    registry::MetaSchema,
    types::{Example, ToJSON},
};

use super::{
    error::{
        AuthErrorBody, BalanceNotFoundBody, BalanceNotFoundCode, CancelConflictBody,
        CancelConflictCode, IdempotencyConflictBody, IdempotencyConflictCode, InternalErrorBody,
        InternalErrorCode, OrderNotFoundBody, OrderNotFoundCode, PayloadTooLargeBody,
        RequestTimeoutBody, UnavailableBody, ValidationErrorBody, answer, reply, shared_replies,
        store_failure,
    },
    formats::{example_time, text_schema},
    params::{HeaderParam, QueryParam, RawParam, param_spec},
    request_body::JsonObject,
    security::{CancelToken, CreateToken, ReadToken},
    tags::ApiTags,
    validation::{Validation, validate},
};
use crate::{
    domain::{Email, IdempotencyKey, OrderId, PaymentSystem},
    metrics::OrderEvent,
    money::Money,
    service::orders::{self, CancelError, Cancellation, CreateError, Created, Order, OrderRequest},
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
    pub order_id: OrderId,
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
    pub payment_system: PaymentSystem,
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

impl Example for PaymentOrder {
    fn example() -> Self {
        PaymentOrder {
            success: true,
            order_id: OrderId::example(),
            status: PaymentOrderStatus::Pending,
            user_id: 1,
            server_id: 0,
            amount: "10.25".into(),
            payment_system: PaymentSystem::example(),
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
    #[oai(nullable)]
    pub email: Option<Email>,
    /// The server whose balance the order credits; 0 for the general
    /// master-account balance.
    #[oai(validator(minimum(value = "0")))]
    pub server_id: i64,
    /// A decimal string of at least 0.01 and at most 999999999999999.99,
    /// with at most two fraction digits; never a number.
    pub amount: Money,
    /// `cstm:` followed by 4 to 20 lower-case letters.
    pub payment_system: PaymentSystem,
}

impl Example for CreateOrderRequest {
    fn example() -> Self {
        CreateOrderRequest {
            user_id: Some(1),
            email: None,
            server_id: 0,
            amount: Money::example(),
            payment_system: PaymentSystem::example(),
        }
    }
}

/// The order to cancel. No other field is accepted.
#[derive(Debug, Clone, Object)]
#[oai(example, deny_unknown_fields)]
pub struct CancelOrderRequest {
    /// The order's id: `Order:` followed by 8 to 11 letters or digits.
    pub order_id: OrderId,
    /// The payment system the order was created with.
    pub payment_system: PaymentSystem,
}

impl Example for CancelOrderRequest {
    fn example() -> Self {
        CancelOrderRequest {
            order_id: OrderId::example(),
            payment_system: PaymentSystem::example(),
        }
    }
}

param_spec!(
    IdempotencyKeySpec,
    required = false,
    MetaSchema {
        example: IdempotencyKey::example().to_json(),
        ..text_schema::<IdempotencyKey>()
    }
);

param_spec!(
    OrderIdSpec,
    required = true,
    MetaSchema {
        example: OrderId::example().to_json(),
        ..text_schema::<OrderId>()
    }
);

reply! {
    pub enum CreateReply {
        /// The order was created, pending; or, for a repeat of an earlier
        /// request with the same Idempotency-Key and body, that request's
        /// answer, with nothing created (then `Idempotent-Replayed: true`).
        Created(
            Json<PaymentOrder>,
            /// `true` when this answer replays an earlier request with the same
            /// Idempotency-Key; absent otherwise.
            #[oai(header = "Idempotent-Replayed")]
            Option<bool>,
        ) = 201,
        /// VALIDATION_ERROR: a field missing or malformed (every one is named),
        /// an unknown field, a malformed Idempotency-Key, or the body not a JSON
        /// object sent as application/json (reported under `body`).
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `payment/order/create` permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// USER_NOT_FOUND, SERVER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<BalanceNotFoundBody>) = 404,
        /// REQUEST_TIMEOUT; nothing was created.
        RequestTimeout(Json<RequestTimeoutBody>) = 408,
        /// IDEMPOTENCY_KEY_REUSED; nothing was created.
        Conflict(Json<IdempotencyConflictBody>) = 409,
        /// PAYLOAD_TOO_LARGE; nothing was created.
        PayloadTooLarge(Json<PayloadTooLargeBody>) = 413,
        /// INTERNAL_ERROR. Retry with the same Idempotency-Key: should the
        /// order have been created after all, the retry answers it instead of
        /// creating another.
        Internal(Json<InternalErrorBody>) = 500,
        /// SERVICE_UNAVAILABLE; the order may have been created all the same.
        /// Retry with the same Idempotency-Key and exponential back-off: the
        /// retry answers the order if it exists, and creates it if not.
        Unavailable(Json<UnavailableBody>) = 503,
    }
}

reply! {
    pub enum ReadReply {
        /// The order as it stands now.
        Ok(Json<PaymentOrder>) = 200,
        /// VALIDATION_ERROR: order_id missing, repeated or malformed.
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `payment/order/read` permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// ORDER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<OrderNotFoundBody>) = 404,
        /// INTERNAL_ERROR. Retry with back-off.
        Internal(Json<InternalErrorBody>) = 500,
        /// SERVICE_UNAVAILABLE. Retry with back-off.
        Unavailable(Json<UnavailableBody>) = 503,
    }
}

reply! {
    pub enum CancelReply {
        /// The order was pending and is now cancelled; it will never be
        /// credited.
        Ok(Json<PaymentOrder>) = 200,
        /// VALIDATION_ERROR: order_id or payment_system missing or malformed, an
        /// unknown field, or the body not a JSON object sent as
        /// application/json (reported under `body`).
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `payment/order/cancel` permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// ORDER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<OrderNotFoundBody>) = 404,
        /// REQUEST_TIMEOUT; nothing was changed.
        RequestTimeout(Json<RequestTimeoutBody>) = 408,
        /// ORDER_ALREADY_COMPLETED or ORDER_ALREADY_CANCELLED; nothing was
        /// changed.
        Conflict(Json<CancelConflictBody>) = 409,
        /// PAYLOAD_TOO_LARGE; nothing was changed.
        PayloadTooLarge(Json<PayloadTooLargeBody>) = 413,
        /// INTERNAL_ERROR; nothing was changed. Retry with back-off.
        Internal(Json<InternalErrorBody>) = 500,
        /// SERVICE_UNAVAILABLE; nothing was changed. Retry with back-off.
        Unavailable(Json<UnavailableBody>) = 503,
    }
}

shared_replies! {
    CreateReply,
    store,
    NotFound: BalanceNotFoundCode,
    Conflict: IdempotencyConflictCode,
}
shared_replies! { ReadReply, store, NotFound: OrderNotFoundCode }
shared_replies! {
    CancelReply,
    store,
    NotFound: OrderNotFoundCode,
    Conflict: CancelConflictCode,
}

impl From<CreateError> for CreateReply {
    fn from(err: CreateError) -> Self {
        match err {
            CreateError::UserNotFound => BalanceNotFoundCode::UserNotFound.into(),
            CreateError::ServerNotFound => BalanceNotFoundCode::ServerNotFound.into(),
            CreateError::KeyReused => IdempotencyConflictCode::IdempotencyKeyReused.into(),
            CreateError::Store(err) => store_failure(&err, "order creation"),
            // The request was validated, and names no order id.
            err @ (CreateError::Invalid(..) | CreateError::OrderIdTaken(_)) => {
                tracing::error!(error = %err, "order creation refused a validated request");
                InternalErrorCode::InternalError.into()
            }
        }
    }
}

impl From<CancelError> for CancelReply {
    fn from(err: CancelError) -> Self {
        match err {
            CancelError::OrderNotFound => OrderNotFoundCode::OrderNotFound.into(),
            CancelError::AlreadyCompleted => CancelConflictCode::OrderAlreadyCompleted.into(),
            CancelError::AlreadyCancelled => CancelConflictCode::OrderAlreadyCancelled.into(),
            CancelError::Store(err) => store_failure(&err, "order cancellation"),
        }
    }
}

impl CreateOrderRequest {
    /// The creation the body asks for, in `project_id`, every offending
    /// field named.
    fn read(
        body: &JsonObject<Self>,
        check: &mut Validation,
        project_id: i64,
    ) -> Option<OrderRequest> {
        const FIELDS: &[&str] = &["user_id", "email", "server_id", "amount", "payment_system"];
        let mut fields = body.fields(check, Some(FIELDS))?;
        let who = fields.user();
        let server_id = fields.integer("server_id", 0);
        let server_id = fields.given("server_id", server_id);
        let amount = fields
            .required::<Money>("amount")
            .and_then(|amount| fields.check("amount", amount.positive()));
        let payment_system = fields.required("payment_system");
        Some(OrderRequest {
            project_id,
            who: who?,
            server_id: server_id?,
            amount: amount?,
            payment_system: payment_system?,
            order_id: None,
        })
    }
}

impl CancelOrderRequest {
    /// The cancellation the body asks for, in `project_id`, every offending
    /// field named.
    fn read(
        body: &JsonObject<Self>,
        check: &mut Validation,
        project_id: i64,
    ) -> Option<Cancellation> {
        let mut fields = body.fields(check, Some(&["order_id", "payment_system"]))?;
        let order_id = fields.required("order_id");
        let payment_system = fields.required("payment_system");
        Some(Cancellation {
            project_id,
            order_id: order_id?,
            payment_system: payment_system?,
        })
    }
}

/// Counts a creation, and logs one that created an order.
fn record_creation(state: &AppState, created: &Created) {
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
        answer(async {
            let project_id = caller.0.principal.project_id;
            let (request, key) = validate(|check| {
                let key = check.param::<IdempotencyKey, _>(&idempotency_key);
                CreateOrderRequest::read(&body, check, project_id).zip(key)
            })?;
            let created = orders::create(&state.db, &*state.store, &request, key.as_ref()).await?;
            record_creation(&state, &created);
            let replayed = created.replayed.then_some(true);
            Ok(CreateReply::Created(Json(created.order.into()), replayed))
        })
        .await
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
        answer(async {
            let order_id = validate(|check| {
                let order_id = check.param::<OrderId, _>(&order_id);
                check.given("order_id", order_id)
            })?;
            let project_id = caller.0.principal.project_id;
            let order = orders::get(&state.db, Some(project_id), &order_id)
                .await
                .map_err(|err| store_failure::<ReadReply>(&err, "order read"))?
                .ok_or(OrderNotFoundCode::OrderNotFound)?;
            Ok(ReadReply::Ok(Json(order.into())))
        })
        .await
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
        answer(async {
            let project_id = caller.0.principal.project_id;
            let request = validate(|check| CancelOrderRequest::read(&body, check, project_id))?;
            let order = orders::cancel(&state.db, None, &request).await?;
            tracing::info!(order_id = %order.order_id, "order cancelled");
            state.metrics.record_order_event(OrderEvent::Cancelled);
            Ok(CancelReply::Ok(Json(order.into())))
        })
        .await
    }
}
