//! `GET /v2/master-account/balance` (seed section 4.1).

use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::Query,
    payload::Json,
    registry::MetaSchema,
    types::{Example, ParseFromParameter},
};
use serde::Serialize;
use serde_json::json;

use super::{
    ApiTags,
    error::{
        AuthErrorBody, BalanceNotFoundBody, BalanceNotFoundCode, FieldErrors, InternalErrorBody,
        InternalErrorCode, UnavailableBody, UnavailableCode, ValidationErrorBody,
    },
    params::{ParamSpec, RawParam},
    payload::JsonBody,
    security::{Authenticated, BalanceToken},
};
use crate::{
    db::is_unavailable,
    service::{
        balances::{self, BalanceLookupError, LookupRequest, UserRef},
        validate,
    },
};

pub struct BalanceApi;

// Sent as a `JsonBody`, so its `serde` attributes must give the JSON its
// `oai` attributes describe (a unit test compares the two). The doc comment
// below is the published schema's description.
/// The balance of a user's master account. Amounts are decimal strings with
/// exactly two fraction digits, so no precision is lost.
#[derive(Debug, Clone, Object, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub main_balance: Option<String>,
    /// Bonus balance, a decimal string with two fraction digits; present
    /// when balance_type is `bonus` or omitted.
    #[oai(
        skip_serializing_if_is_none,
        validator(pattern = r"^[0-9]+\.[0-9]{2}$")
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bonus_balance: Option<String>,
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

#[derive(ApiResponse)]
pub enum BalanceReply {
    /// The balance. With balance_type `main` only main_balance is present,
    /// with `bonus` only bonus_balance, without it both.
    #[oai(status = 200)]
    Ok(JsonBody<BalanceResponse>),
    /// VALIDATION_ERROR: server_id missing or not an integer >= 0, neither
    /// user_id nor email given, user_id not a positive integer, email not a
    /// valid address, balance_type neither `main` nor `bonus`, or a parameter
    /// repeated.
    #[oai(status = 400)]
    BadRequest(Json<ValidationErrorBody>),
    /// The token was refused, or lacks the `master-account/balance` permission.
    #[oai(status = 403)]
    Forbidden(Json<AuthErrorBody>),
    /// USER_NOT_FOUND, SERVER_NOT_FOUND, PROJECT_NOT_FOUND or NOT_FOUND.
    #[oai(status = 404)]
    NotFound(Json<BalanceNotFoundBody>),
    /// INTERNAL_ERROR: an unexpected failure; nothing was changed (the
    /// endpoint only reads). Retry with exponential back-off.
    #[oai(status = 500)]
    Internal(Json<InternalErrorBody>),
    /// SERVICE_UNAVAILABLE: the database did not answer in time, or the
    /// request took too long. Retry with exponential back-off.
    #[oai(status = 503)]
    Unavailable(Json<UnavailableBody>),
}

pub struct ServerIdSpec;
impl ParamSpec for ServerIdSpec {
    const NAME: &'static str = "ServerId";
    const REQUIRED: bool = true;
    fn schema() -> MetaSchema {
        MetaSchema {
            format: Some("int64"),
            minimum: Some(0.0),
            description: Some(
                "0 for the general master-account balance, > 0 for the balance on that server.",
            ),
            example: Some(json!(0)),
            ..MetaSchema::new("integer")
        }
    }
}

pub struct UserIdSpec;
impl ParamSpec for UserIdSpec {
    const NAME: &'static str = "UserId";
    const REQUIRED: bool = false;
    fn schema() -> MetaSchema {
        MetaSchema {
            format: Some("int64"),
            minimum: Some(1.0),
            description: Some("The user's id. Required when email is absent."),
            example: Some(json!(1)),
            ..MetaSchema::new("integer")
        }
    }
}

pub struct EmailSpec;
impl ParamSpec for EmailSpec {
    const NAME: &'static str = "Email";
    const REQUIRED: bool = false;
    fn schema() -> MetaSchema {
        MetaSchema {
            format: Some("email"),
            max_length: Some(validate::EMAIL_MAX_LEN),
            description: Some(
                "The user's e-mail address (case-insensitive). Required when user_id is absent. When both are given they must name the same user. The examples of user_id and email name the same user: the first one `masterpay serve --demo` creates on a new database.",
            ),
            example: Some(json!("alice1@example.com")),
            ..MetaSchema::new("string")
        }
    }
}

pub struct BalanceTypeSpec;
impl ParamSpec for BalanceTypeSpec {
    const NAME: &'static str = "BalanceType";
    const REQUIRED: bool = false;
    fn schema() -> MetaSchema {
        MetaSchema {
            enum_items: vec![json!("main"), json!("bonus")],
            description: Some("Which balance to return; both when omitted."),
            example: Some(json!("main")),
            ..MetaSchema::new("string")
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BalanceType {
    Main,
    Bonus,
    Both,
}

/// The query after validation: the lookup it asks for, and which of its
/// balances to answer with.
struct BalanceQuery {
    lookup: LookupRequest,
    balance_type: BalanceType,
}

/// Validates every parameter and reports all offending ones at once.
fn validate_query(
    server_id: &RawParam<ServerIdSpec>,
    user_id: &RawParam<UserIdSpec>,
    email: &RawParam<EmailSpec>,
    balance_type: &RawParam<BalanceTypeSpec>,
) -> Result<BalanceQuery, FieldErrors> {
    let mut errors = FieldErrors::new();
    let mut fail = |field: &str, sentence: &str| {
        errors.insert(field.to_owned(), sentence.to_owned());
    };

    let server = match server_id.single("server_id") {
        Err(e) => {
            fail("server_id", &e);
            None
        }
        Ok(None) => {
            fail("server_id", "server_id is required");
            None
        }
        Ok(Some(text)) => match parse_integer(text) {
            Some(n) if n >= 0 => Some(n),
            _ => {
                fail("server_id", "server_id must be an integer >= 0");
                None
            }
        },
    };

    let user = match user_id.single("user_id") {
        Err(e) => {
            fail("user_id", &e);
            None
        }
        Ok(None) | Ok(Some("")) => None,
        Ok(Some(text)) => match parse_integer(text) {
            Some(n) if n >= 1 => Some(n),
            _ => {
                fail("user_id", "user_id must be an integer >= 1");
                None
            }
        },
    };
    let user_given = !matches!(user_id.single("user_id"), Ok(None) | Ok(Some("")));

    let mail = match email.single("email") {
        Err(e) => {
            fail("email", &e);
            None
        }
        Ok(None) | Ok(Some("")) => None,
        Ok(Some(text)) if validate::is_email(text) => Some(text.to_owned()),
        Ok(Some(_)) => {
            fail("email", "email must be a valid e-mail address");
            None
        }
    };
    let email_given = !matches!(email.single("email"), Ok(None) | Ok(Some("")));

    if !user_given && !email_given {
        fail("user_id", "user_id is required when email is empty");
    }

    let kind = match balance_type.single("balance_type") {
        Err(e) => {
            fail("balance_type", &e);
            None
        }
        Ok(None) => Some(BalanceType::Both),
        Ok(Some("main")) => Some(BalanceType::Main),
        Ok(Some("bonus")) => Some(BalanceType::Bonus),
        Ok(Some(_)) => {
            fail("balance_type", "balance_type must be main or bonus");
            None
        }
    };

    match (server, kind) {
        (Some(server_id), Some(balance_type)) if errors.is_empty() => Ok(BalanceQuery {
            lookup: LookupRequest {
                who: UserRef {
                    user_id: user,
                    email: mail,
                },
                server_id,
            },
            balance_type,
        }),
        _ => Err(errors),
    }
}

/// The path of this endpoint.
const PATH: &str = "/v2/master-account/balance";

/// The lookup a request for `path` with `query` asks for, read as the
/// endpoint reads its parameters, when it is a valid balance query: what
/// `security` reads together with the token. A request the router or the
/// endpoint would read differently only misses the prefetched row (the
/// endpoint compares it with its own validated lookup), never gets another's.
pub fn requested_lookup(path: &str, query: Option<&str>) -> Option<LookupRequest> {
    if path != PATH {
        return None;
    }
    let (mut server_id, mut user_id, mut email, mut balance_type) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "server_id" => server_id.push(value),
            "user_id" => user_id.push(value),
            "email" => email.push(value),
            "balance_type" => balance_type.push(value),
            _ => {}
        }
    }
    let query = validate_query(
        &RawParam::parse_from_parameters(server_id).ok()?,
        &RawParam::parse_from_parameters(user_id).ok()?,
        &RawParam::parse_from_parameters(email).ok()?,
        &RawParam::parse_from_parameters(balance_type).ok()?,
    )
    .ok()?;
    Some(query.lookup)
}

/// A plain decimal integer: optional minus sign and digits, nothing else
/// (no `+`, spaces, exponent or fraction), within `i64`.
fn parse_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
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
        auth: BalanceToken,
        request: poem::web::Data<&Authenticated>,
        /// 0 for the general master-account balance; > 0 for the balance on that server.
        server_id: Query<RawParam<ServerIdSpec>>,
        /// The user's id; required when email is absent.
        user_id: Query<RawParam<UserIdSpec>>,
        /// The user's e-mail address; required when user_id is absent.
        email: Query<RawParam<EmailSpec>>,
        /// `main` or `bonus`; both balances when omitted.
        balance_type: Query<RawParam<BalanceTypeSpec>>,
    ) -> BalanceReply {
        let query = match validate_query(&server_id, &user_id, &email, &balance_type) {
            Ok(query) => query,
            Err(errors) => return BalanceReply::BadRequest(Json(ValidationErrorBody::new(errors))),
        };
        match balances::lookup(
            &request.reader,
            auth.0.project_id,
            &query.lookup,
            request.prefetched.as_ref(),
        )
        .await
        {
            Ok(balance) => {
                let main = balance.main.to_string();
                let bonus = balance.bonus.to_string();
                let (main_balance, bonus_balance) = match query.balance_type {
                    BalanceType::Main => (Some(main), None),
                    BalanceType::Bonus => (None, Some(bonus)),
                    BalanceType::Both => (Some(main), Some(bonus)),
                };
                BalanceReply::Ok(JsonBody(BalanceResponse {
                    success: true,
                    main_balance,
                    bonus_balance,
                }))
            }
            Err(BalanceLookupError::UserNotFound) => BalanceReply::NotFound(Json(
                BalanceNotFoundBody::new(BalanceNotFoundCode::UserNotFound),
            )),
            Err(BalanceLookupError::ServerNotFound) => BalanceReply::NotFound(Json(
                BalanceNotFoundBody::new(BalanceNotFoundCode::ServerNotFound),
            )),
            Err(BalanceLookupError::Db(err)) if is_unavailable(&err) => {
                tracing::error!(error = %err, "balance lookup: database unavailable");
                BalanceReply::Unavailable(Json(UnavailableBody::new(
                    UnavailableCode::ServiceUnavailable,
                )))
            }
            Err(BalanceLookupError::Db(err)) => {
                tracing::error!(error = %err, "balance lookup failed");
                BalanceReply::Internal(Json(InternalErrorBody::new(
                    InternalErrorCode::InternalError,
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use poem_openapi::types::ToJSON;

    use super::*;

    /// The lookup the middleware reads with the token is the one the
    /// endpoint validates from the same query (as poem hands it the values:
    /// percent-decoded, `+` as a space); invalid queries and other paths ask
    /// for none, so they never read one.
    #[test]
    fn the_requested_lookup_is_the_endpoints() {
        let lookup = |user_id: Option<i64>, email: Option<&str>, server_id| LookupRequest {
            who: UserRef {
                user_id,
                email: email.map(str::to_owned),
            },
            server_id,
        };
        let asked = |query: &str| requested_lookup(PATH, Some(query));
        assert_eq!(
            asked("server_id=0&user_id=7"),
            Some(lookup(Some(7), None, 0))
        );
        assert_eq!(
            asked("user_id=7&server_id=12&balance_type=bonus&unknown=1"),
            Some(lookup(Some(7), None, 12))
        );
        assert_eq!(
            asked("server_id=0&email=Alice%40Example.com"),
            Some(lookup(None, Some("Alice@Example.com"), 0))
        );
        assert_eq!(
            asked("server_id=0&user_id=&email=a%2Bb@example.com"),
            Some(lookup(None, Some("a+b@example.com"), 0))
        );
        assert_eq!(
            asked("server_id=0&user_id=3&email=c@example.com"),
            Some(lookup(Some(3), Some("c@example.com"), 0))
        );
        for invalid in [
            "",
            "user_id=7",
            "server_id=0",
            "server_id=-1&user_id=7",
            "server_id=0&user_id=0",
            "server_id=0&user_id=7&user_id=7",
            "server_id=0&email=a+b@example.com",
            "server_id=0&user_id=7&balance_type=gold",
        ] {
            assert_eq!(asked(invalid), None, "{invalid}");
        }
        let other = "/v2/payment/order/complete";
        assert_eq!(requested_lookup(other, Some("server_id=0&user_id=7")), None);
        assert_eq!(requested_lookup(PATH, None), None);
    }

    /// The reply is written by `serde` but documented by poem-openapi: every
    /// shape it takes (main, bonus, both) must read the same both ways.
    #[test]
    fn the_sent_reply_is_the_documented_one() {
        let amount = || Some("1250.50".to_owned());
        for (main_balance, bonus_balance) in
            [(amount(), None), (None, amount()), (amount(), amount())]
        {
            let reply = BalanceResponse {
                success: true,
                main_balance,
                bonus_balance,
            };
            assert_eq!(
                serde_json::to_value(&reply).unwrap(),
                reply.to_json().unwrap()
            );
        }
        let example = BalanceResponse::example();
        assert_eq!(
            serde_json::to_string(&example).unwrap(),
            serde_json::to_string(&example.to_json()).unwrap()
        );
    }
}
