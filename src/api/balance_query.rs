//! The query of `GET /v2/master-account/balance`: its parameters as
//! published, and their validation, which both the endpoint and the
//! authentication middleware (to read the asked account with the token) use.

use poem_openapi::{registry::MetaSchema, types::ParseFromParameter};
use serde_json::json;

use super::{
    error::FieldErrors,
    params::{ParamSpec, RawParam},
};
use crate::service::{
    balances::{LookupRequest, UserRef},
    validate,
};

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
pub enum BalanceType {
    Main,
    Bonus,
    Both,
}

/// The query after validation: the lookup it asks for, and which of its
/// balances to answer with.
pub struct BalanceQuery {
    pub lookup: LookupRequest,
    pub balance_type: BalanceType,
}

/// Validates every parameter and reports all offending ones at once.
pub fn validate_query(
    server_id: &RawParam<ServerIdSpec>,
    user_id: &RawParam<UserIdSpec>,
    email: &RawParam<EmailSpec>,
    balance_type: &RawParam<BalanceTypeSpec>,
) -> Result<BalanceQuery, FieldErrors> {
    let mut errors = FieldErrors::new();
    let who = validate_user(user_id, email, &mut errors);
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

    match (server, who, kind) {
        (Some(server_id), Some(who), Some(balance_type)) if errors.is_empty() => Ok(BalanceQuery {
            lookup: LookupRequest { who, server_id },
            balance_type,
        }),
        _ => Err(errors),
    }
}

/// The user a query names by `user_id`, `email` or both; each offending
/// parameter goes into `errors`, and `user_id` when neither is given.
pub fn validate_user(
    user_id: &RawParam<UserIdSpec>,
    email: &RawParam<EmailSpec>,
    errors: &mut FieldErrors,
) -> Option<UserRef> {
    let mut fail = |field: &str, sentence: &str| {
        errors.insert(field.to_owned(), sentence.to_owned());
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

    let valid = (user_given || email_given)
        && user.is_some() == user_given
        && mail.is_some() == email_given;
    valid.then_some(UserRef {
        user_id: user,
        email: mail,
    })
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
pub fn parse_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
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
}
