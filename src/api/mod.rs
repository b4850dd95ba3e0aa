//! HTTP only: the v2 endpoints, their security scheme, error bodies and the
//! catch-all that turns every framework rejection into the JSON error body
//! (docs/api.md).
//! Business rules live in `service/`.

pub mod balance;
pub mod balance_query;
pub mod complete;
pub mod docs;
pub mod error;
pub mod formats;
pub mod middleware;
pub mod operations;
pub mod orders;
pub mod params;
pub mod request_body;
pub mod security;
pub mod tags;
pub mod validation;

use poem::{Response, http::StatusCode};
use poem_openapi::{
    LicenseObject, OpenApiService, ServerObject,
    error::{AuthorizationError, ContentTypeError, ParseParamError, ParseRequestPayloadError},
};

use self::error::ApiError;

/// Version of the published contract.
pub const API_VERSION: &str = "2.0.0";

/// The v2 endpoints, in the order the document lists them.
pub type V2Endpoints = (
    balance::BalanceApi,
    operations::OperationsApi,
    orders::OrdersApi,
    complete::CompleteApi,
);

/// The v2 API as poem-openapi sees it: the endpoints and the document.
pub type V2Service = OpenApiService<V2Endpoints, ()>;

/// The v2 endpoints themselves, for `app`'s direct dispatch.
pub fn v2_operations() -> V2Endpoints {
    (
        balance::BalanceApi,
        operations::OperationsApi,
        orders::OrdersApi,
        complete::CompleteApi,
    )
}

const DESCRIPTION: &str = r#"Reads the balances of users' master accounts and completes payment orders when a payment gateway's webhook arrives.

## Authentication

Every request carries `Authorization: Bearer <token>`. A token is 64 letters and digits, belongs to one project, and holds per-endpoint permissions (`master-account/balance`, `master-account/operations`, `payment/order/create`, `payment/order/read`, `payment/order/complete`, `payment/order/cancel`). Tokens are issued by the operator (`masterpay token create --project ID --name NAME --allow PERMISSIONS`), shown once and stored only as a hash. Checks run in this order: EMPTY_TOKEN, INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED, EMPTY_ACCESS (403), PROJECT_NOT_FOUND, NOT_FOUND (404), ACCESS_DENIED (403), then the parameters (400), then the business rules. A token may carry an expiry, after which it is answered TOKEN_DISABLED (it still exists; the operator can extend it). Reissuing a token gives it a new value; the old value keeps working for the grace period the operator chose (up to 7 days), then is answered TOKEN_NOT_FOUND, so a panel can switch values without downtime. Keep tokens out of version control, URLs and logs.

## Errors

Every error is JSON: `{"success": false, "code": "..."}`. VALIDATION_ERROR also carries `message`, an object mapping each offending parameter or body field to one sentence; all offending fields are reported at once. Unknown paths and wrong methods give 404 NOT_FOUND. On 5xx retry with exponential back-off: nothing was changed, unless the request was already being committed when the answer went out, in which case a retried completion answers 409 ORDER_ALREADY_COMPLETED and a retried create with the same Idempotency-Key answers the order it made. 409 ORDER_ALREADY_COMPLETED on completion means a duplicate webhook: treat it as success. 422 PAYMENT_PROCESSING_ERROR on completion is final (the credit would pass the largest balance kept): nothing was changed, do not retry; the operator completes the order once the balance allows.

## An order's life

Create the order (`POST /v2/payment/order/create`, with an `Idempotency-Key` so that a retry never makes two), send the user to the payment gateway, then complete it when the gateway's webhook arrives (`POST /v2/payment/order/complete`) or cancel it if the payment is abandoned (`POST /v2/payment/order/cancel`). Exactly one of completion and cancellation wins. When an answer is lost (a timeout), read the order (`GET /v2/payment/order`) to learn where it stands; `GET /v2/master-account/operations` lists what changed a user's balances.

## Money

Amounts are decimal strings with exactly two fraction digits (`"1250.50"`), never floats.

## This document

Served by every instance at `/openapi.json` and `/openapi.yaml` (also printed by `masterpay openapi`), with Swagger UI at `/docs/`: click **Authorize**, paste the token, then **Try it out** on an operation. The project's CI generates clients from it with openapi-python-client and openapi-typescript and runs them against a live server."#;

/// Builds the v2 service; `server_url` is where the document says the API lives.
pub fn v2_service() -> V2Service {
    OpenApiService::new(v2_operations(), "masterpay API", API_VERSION)
        .description(DESCRIPTION)
        .license(LicenseObject::new("MIT").url("https://opensource.org/licenses/MIT"))
        .server(
            ServerObject::new("/")
                .description("The masterpay instance that serves this document (relative URL)."),
        )
}

/// The published document, as committed in `openapi/v2.yaml`.
pub fn openapi_yaml() -> String {
    serde_yaml::to_string(&document()).unwrap_or_default()
}

/// The published document as JSON.
pub fn openapi_json() -> String {
    serde_json::to_string_pretty(&document()).unwrap_or_default()
}

/// The document poem-openapi writes from the annotated endpoints, with what
/// it has no annotation for: the links from a created order to reading,
/// completing and cancelling it (so that generated clients and stateful
/// testers can chain the calls), and the closed request bodies.
fn document() -> serde_json::Value {
    let mut document: serde_json::Value =
        serde_json::from_str(&v2_service().spec()).unwrap_or_default();
    let order_in_body = serde_json::json!({
        "order_id": "$response.body#/order_id",
        "payment_system": "$response.body#/payment_system",
    });
    let links = serde_json::json!({
        "GetOrder": {
            "operationId": "getPaymentOrder",
            "parameters": {"order_id": "$response.body#/order_id"},
            "description": "Read the created order: its `order_id` is the `order_id` parameter.",
        },
        "CompleteOrder": {
            "operationId": "completePaymentOrder",
            "requestBody": order_in_body,
            "description": "Complete the created order: its `order_id` and `payment_system` go into the body.",
        },
        "CancelOrder": {
            "operationId": "cancelPaymentOrder",
            "requestBody": order_in_body,
            "description": "Cancel the created order: its `order_id` and `payment_system` go into the body.",
        },
    });
    if let Some(created) =
        document.pointer_mut("/paths/~1v2~1payment~1order~1create/post/responses/201")
        && let Some(created) = created.as_object_mut()
    {
        created.insert("links".into(), links);
        // poem-openapi writes a response header's name in capitals.
        if let Some(headers) = created.get_mut("headers").and_then(|h| h.as_object_mut())
            && let Some(replayed) = headers.remove("IDEMPOTENT-REPLAYED")
        {
            headers.insert("Idempotent-Replayed".into(), replayed);
        }
    }
    // The bodies that refuse unknown fields say so: poem-openapi does not
    // write `deny_unknown_fields` into the schema.
    for schema in ["CreateOrderRequest", "CancelOrderRequest"] {
        if let Some(schema) = document
            .pointer_mut(&format!("/components/schemas/{schema}"))
            .and_then(|s| s.as_object_mut())
        {
            schema.insert("additionalProperties".into(), false.into());
        }
    }
    document
}

/// Maps any error that escaped an endpoint to the JSON error body.
pub async fn error_to_json(err: poem::Error) -> Response {
    api_error_for(&err).to_response()
}

fn api_error_for(err: &poem::Error) -> ApiError {
    if let Some(api) = err.downcast_ref::<ApiError>() {
        return api.clone();
    }
    if err.is::<AuthorizationError>() {
        return ApiError::new(StatusCode::FORBIDDEN, "EMPTY_TOKEN");
    }
    if let Some(e) = err.downcast_ref::<ParseParamError>() {
        return ApiError::validation_field(e.name, format!("{} is invalid", e.name));
    }
    if err.is::<ParseRequestPayloadError>() || err.is::<ContentTypeError>() {
        return ApiError::validation_field(
            "body",
            "the body must be a JSON object sent as application/json",
        );
    }
    // Also poem's own body errors, by the status they carry.
    let status = err.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::payload_too_large()
    } else if status.is_server_error() {
        tracing::error!(error = %err, "unhandled error");
        ApiError::internal()
    } else if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
        ApiError::not_found()
    } else {
        ApiError::new(status, "BAD_REQUEST")
    }
}
