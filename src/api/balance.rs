//! `GET /v2/master-account/balance`: the endpoint and its reply.

use poem_openapi::{Object, OpenApi, payload::Json, types::Example};

use super::{
    balance_query::{
        BalanceQuery, BalanceTypeSpec, BalancesShown, EmailSpec, ServerIdSpec, UserIdSpec,
    },
    error::{
        AuthErrorBody, BalanceNotFoundBody, BalanceNotFoundCode, InternalErrorBody,
        UnavailableBody, ValidationErrorBody, answer, reply, shared_replies, store_failure,
    },
    params::{QueryParam, RawParam},
    security::BalanceToken,
    tags::ApiTags,
    validation::validate,
};
use crate::{
    service::balances::{self, AccountBalance, BalanceLookupError},
    state::AppState,
};

pub struct BalanceApi;

/// The balance of a user's master account. Amounts are decimal strings with
/// exactly two fraction digits, so no precision is lost.
#[derive(Debug, Clone, Object)]
#[oai(example)]
pub struct BalanceResponse {
    /// Always `true` on success.
    pub success: bool,
    /// Main balance, a decimal string with two fraction digits; present when
    /// balance_type is `main` or omitted.
    #[oai(
        skip_serializing_if_is_none,
        validator(pattern = r"^[0-9]+\.[0-9]{2}$")
    )]
    pub main_balance: Option<String>,
    /// Bonus balance, a decimal string with two fraction digits; present
    /// when balance_type is `bonus` or omitted.
    #[oai(
        skip_serializing_if_is_none,
        validator(pattern = r"^[0-9]+\.[0-9]{2}$")
    )]
    pub bonus_balance: Option<String>,
}

impl BalanceResponse {
    /// The answer with the balances `shown` of `balance`.
    fn of(balance: AccountBalance, shown: BalancesShown) -> Self {
        let main = || Some(balance.main.to_string());
        let bonus = || Some(balance.bonus.to_string());
        let (main_balance, bonus_balance) = match shown {
            BalancesShown::Main => (main(), None),
            BalancesShown::Bonus => (None, bonus()),
            BalancesShown::Both => (main(), bonus()),
        };
        BalanceResponse {
            success: true,
            main_balance,
            bonus_balance,
        }
    }
}

impl Example for BalanceResponse {
    fn example() -> Self {
        BalanceResponse {
            success: true,
            main_balance: Some("1250.50".into()),
            bonus_balance: Some("0.00".into()),
        }
    }
}

reply! {
    pub enum BalanceReply {
        /// The balance. With balance_type `main` only main_balance is present,
        /// with `bonus` only bonus_balance, without it both.
        Ok(Json<BalanceResponse>) = 200,
        /// VALIDATION_ERROR: server_id missing or not an integer >= 0, neither
        /// user_id nor email given, user_id not a positive integer, email not a
        /// valid address, balance_type neither `main` nor `bonus`, or a parameter
        /// repeated.
        BadRequest(Json<ValidationErrorBody>) = 400,
        /// The token was refused, or lacks the `master-account/balance` permission.
        Forbidden(Json<AuthErrorBody>) = 403,
        /// USER_NOT_FOUND, SERVER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
        NotFound(Json<BalanceNotFoundBody>) = 404,
        /// INTERNAL_ERROR; nothing was changed (the endpoint only reads). Retry
        /// with exponential back-off.
        Internal(Json<InternalErrorBody>) = 500,
        /// SERVICE_UNAVAILABLE. Retry with exponential back-off.
        Unavailable(Json<UnavailableBody>) = 503,
    }
}

shared_replies! { BalanceReply, store, NotFound: BalanceNotFoundCode }

impl From<BalanceLookupError> for BalanceReply {
    fn from(err: BalanceLookupError) -> Self {
        match err {
            BalanceLookupError::UserNotFound => BalanceNotFoundCode::UserNotFound.into(),
            BalanceLookupError::ServerNotFound => BalanceNotFoundCode::ServerNotFound.into(),
            BalanceLookupError::Store(err) => store_failure(&err, "balance lookup"),
        }
    }
}

#[OpenApi(tag = "ApiTags::MasterAccount")]
impl BalanceApi {
    /// Get a master-account balance
    ///
    /// Returns the main balance, the bonus balance, or both, of a user of the
    /// token's project: the general master-account balance (server_id 0) or
    /// the balance on one server. The user is named by user_id, by email, or
    /// by both (then both must name the same user). Parameters are checked
    /// after the token; every invalid parameter is reported at once. The user
    /// is resolved before the server. Requires the `master-account/balance`
    /// permission.
    #[oai(
        path = "/v2/master-account/balance",
        method = "get",
        operation_id = "getMasterAccountBalance"
    )]
    async fn get_balance(
        &self,
        caller: BalanceToken,
        state: poem::web::Data<&AppState>,
        /// 0 for the general master-account balance; > 0 for the balance on that server.
        server_id: QueryParam<RawParam<ServerIdSpec>>,
        /// The user's id; required when email is absent.
        user_id: QueryParam<RawParam<UserIdSpec>>,
        /// The user's e-mail address; required when user_id is absent.
        email: QueryParam<RawParam<EmailSpec>>,
        /// `main` or `bonus`; both balances when omitted.
        balance_type: QueryParam<RawParam<BalanceTypeSpec>>,
    ) -> BalanceReply {
        answer(async {
            let query = validate(|check| {
                BalanceQuery::read(check, &server_id, &user_id, &email, &balance_type)
            })?;
            let balance = balances::lookup(&*state.store, &caller.0, &query.lookup).await?;
            Ok(BalanceReply::Ok(Json(BalanceResponse::of(
                balance,
                query.balance_type,
            ))))
        })
        .await
    }
}
