//! `GET /v2/master-account/operations`: a user's operation history, a page
//! at a time.

use chrono::{DateTime, Utc};
use entity::operation_log::{BalanceType, LogKind};
use poem_openapi::{Enum, Object, OpenApi, payload::Json, registry::MetaSchema, types::Example};
use serde_json::json;

use super::{
    balance_query::{EmailSpec, UserIdSpec},
    error::{
        AuthErrorBody, BalanceNotFoundBody, BalanceNotFoundCode, FieldErrors, InternalErrorBody,
        UnavailableBody, ValidationErrorBody, answer, reply, shared_replies, store_failure,
    },
    formats::example_time,
    params::{QueryParam, RawParam, param_spec},
    security::OperationsToken,
    tags::ApiTags,
    validation::validate,
};
use crate::{
    money::signed_cents,
    service::ledger::{self, Entry, HistoryError, HistoryRequest, Page},
    state::AppState,
};

pub struct OperationsApi;

/// What changed a balance: `order_credit` (a completed order's credit of
/// the main balance) or `balance_set` (an operator set the balance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum OperationKind {
    /// A completed order's credit of the main balance.
    OrderCredit,
    /// An operator set the balance.
    BalanceSet,
}

/// Which of the account's balances changed: `main` or `bonus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum OperationBalanceType {
    /// The main balance.
    Main,
    /// The bonus balance.
    Bonus,
}

/// One change of one balance, as logged in the transaction that made it.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct Operation {
    /// The entry's id; later entries have higher ids.
    pub id: i64,
    pub kind: OperationKind,
    /// The account changed: 0 for the general master-account balance, else
    /// the server's id.
    pub server_id: i64,
    pub balance_type: OperationBalanceType,
    /// The signed change: a decimal string with two fraction digits,
    /// negative when the balance went down.
    #[oai(validator(pattern = r"^-?[0-9]+\.[0-9]{2}$"))]
    pub amount: String,
    /// The balance before the change.
    #[oai(validator(pattern = r"^[0-9]+\.[0-9]{2}$"))]
    pub balance_before: String,
    /// The balance after the change.
    #[oai(validator(pattern = r"^[0-9]+\.[0-9]{2}$"))]
    pub balance_after: String,
    /// The order credited, for `order_credit`; null for `balance_set`.
    #[oai(nullable)]
    pub order_id: Option<String>,
    /// When the change was made (RFC 3339, UTC).
    pub created_at: DateTime<Utc>,
}

impl From<Entry> for Operation {
    fn from(entry: Entry) -> Operation {
        Operation {
            id: entry.id,
            kind: match entry.kind {
                LogKind::OrderCredit => OperationKind::OrderCredit,
                LogKind::BalanceSet => OperationKind::BalanceSet,
            },
            server_id: entry.server_id,
            balance_type: match entry.balance_type {
                BalanceType::Main => OperationBalanceType::Main,
                BalanceType::Bonus => OperationBalanceType::Bonus,
            },
            amount: signed_cents(entry.amount_cents),
            balance_before: entry.balance_before.to_string(),
            balance_after: entry.balance_after.to_string(),
            order_id: entry.order_id,
            created_at: entry.created_at,
        }
    }
}

impl Example for Operation {
    fn example() -> Self {
        Operation {
            id: 42,
            kind: OperationKind::OrderCredit,
            server_id: 0,
            balance_type: OperationBalanceType::Main,
            amount: "10.25".into(),
            balance_before: "1240.25".into(),
            balance_after: "1250.50".into(),
            order_id: Some("Order:AbC123xYz".into()),
            created_at: example_time(),
        }
    }
}

/// One page of a user's operations, newest first.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct OperationsPage {
    /// Always `true` on success.
    pub success: bool,
    /// At most `limit` entries, newest first.
    pub operations: Vec<Operation>,
    /// Pass it as `cursor` (with the same other parameters) for the next
    /// page; null on the last page. Pages do not shift while new entries
    /// arrive: no entry is skipped or repeated.
    #[oai(nullable)]
    pub next_cursor: Option<String>,
}

impl From<Page> for OperationsPage {
    fn from(page: Page) -> OperationsPage {
        OperationsPage {
            success: true,
            operations: page.entries.into_iter().map(Operation::from).collect(),
            next_cursor: page.next_cursor,
        }
    }
}

impl Example for OperationsPage {
    fn example() -> Self {
        OperationsPage {
            success: true,
            operations: vec![Operation::example()],
            next_cursor: Some("000000000000002a5c0b7e61d9a4f3c2b1e08d7a".into()),
        }
    }
}

param_spec!(
    AccountFilterSpec,
    required = false,
    MetaSchema {
        format: Some("int64"),
        minimum: Some(0.0),
        example: Some(json!(0)),
        ..MetaSchema::new("integer")
    }
);

param_spec!(
    LimitSpec,
    required = false,
    MetaSchema {
        format: Some("int32"),
        minimum: Some(1.0),
        maximum: Some(ledger::MAX_LIMIT as f64),
        default: Some(json!(ledger::DEFAULT_LIMIT)),
        example: Some(json!(ledger::DEFAULT_LIMIT)),
        ..MetaSchema::new("integer")
    }
);

param_spec!(
    CursorSpec,
    required = false,
    MetaSchema {
        max_length: Some(64),
        example: Some(json!("000000000000002a5c0b7e61d9a4f3c2b1e08d7a")),
        ..MetaSchema::new("string")
    }
);

reply! {
    pub enum OperationsReply {
        /// A page of the user's operations, newest first.
        Ok(Json<OperationsPage>) = 200,
        /// VALIDATION_ERROR: neither user_id nor email given, user_id not a
        /// positive integer, email not a valid address, server_id not an
        /// integer >= 0, limit not an integer from 1 to 100, a cursor altered or
        /// made for other parameters, or a parameter repeated.
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `master-account/operations`
        /// permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// USER_NOT_FOUND, SERVER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<BalanceNotFoundBody>) = 404,
        /// INTERNAL_ERROR. Retry with back-off.
        Internal(Json<InternalErrorBody>) = 500,
        /// SERVICE_UNAVAILABLE. Retry with back-off.
        Unavailable(Json<UnavailableBody>) = 503,
    }
}

shared_replies! { OperationsReply, store, NotFound: BalanceNotFoundCode }

impl From<HistoryError> for OperationsReply {
    fn from(err: HistoryError) -> Self {
        match err {
            HistoryError::BadCursor => FieldErrors::from([(
                "cursor".to_owned(),
                "cursor must be a next_cursor given for these same parameters".to_owned(),
            )])
            .into(),
            HistoryError::UserNotFound => BalanceNotFoundCode::UserNotFound.into(),
            HistoryError::ServerNotFound => BalanceNotFoundCode::ServerNotFound.into(),
            HistoryError::Store(err) => store_failure(&err, "operation history"),
        }
    }
}

#[OpenApi(tag = "ApiTags::MasterAccount")]
impl OperationsApi {
    /// List a user's operations
    ///
    /// The operation log of a user of the token's project, newest first:
    /// every credit of a completed order and every balance an operator set,
    /// with the balance before and after. All the user's accounts, or one
    /// with server_id (0 for the general account). Pages hold `limit`
    /// entries; pass `next_cursor` as `cursor` for the next, with the same
    /// other parameters. Requires the `master-account/operations`
    /// permission.
    #[oai(
        path = "/v2/master-account/operations",
        method = "get",
        operation_id = "listMasterAccountOperations"
    )]
    // poem-openapi publishes each query parameter from an argument of its own.
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        caller: OperationsToken,
        state: poem::web::Data<&AppState>,
        /// The user's id; required when email is absent.
        user_id: QueryParam<RawParam<UserIdSpec>>,
        /// The user's e-mail address; required when user_id is absent.
        email: QueryParam<RawParam<EmailSpec>>,
        /// Only this account: 0 for the general master-account balance, > 0
        /// for that server's. Every account when omitted.
        server_id: QueryParam<RawParam<AccountFilterSpec>>,
        /// Entries per page, 1 to 100; 20 when omitted.
        limit: QueryParam<RawParam<LimitSpec>>,
        /// Where the page starts: the previous page's `next_cursor`, as it
        /// was given (opaque). The first page when omitted.
        cursor: QueryParam<RawParam<CursorSpec>>,
    ) -> OperationsReply {
        answer(async {
            let project_id = caller.0.principal.project_id;
            // The page the query asks for, every offending parameter named.
            let request = validate(|check| {
                let who = check.user_params(&user_id, &email);
                let server_id = check.integer_param(&server_id, 0..=i64::MAX);
                let limit = check.integer_param(&limit, 1..=ledger::MAX_LIMIT as i64);
                let cursor = check.param(&cursor);
                Some(HistoryRequest {
                    project_id,
                    who: who?,
                    server_id: server_id?,
                    limit: limit?.map_or(ledger::DEFAULT_LIMIT, |n| n as u64),
                    cursor: cursor?,
                })
            })?;
            let page = ledger::page(&state.db, &request).await?;
            Ok(OperationsReply::Ok(Json(page.into())))
        })
        .await
    }
}
