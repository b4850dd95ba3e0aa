//! The query of `GET /v2/master-account/balance`: its parameters as
//! published, and their reading, which both the endpoint and the
//! authentication middleware (to read the asked account with the token) use.

use poem_openapi::registry::MetaSchema;
use serde_json::json;

use super::{
    formats::{FieldValue, text_schema},
    params::{RawParam, param_spec},
    validation::{Validation, validate},
};
use crate::{domain::Email, service::balances::LookupRequest};

param_spec!(
    ServerIdSpec,
    required = true,
    MetaSchema {
        format: Some("int64"),
        minimum: Some(0.0),
        description: Some(
            "0 for the general master-account balance, > 0 for the balance on that server.",
        ),
        example: Some(json!(0)),
        ..MetaSchema::new("integer")
    }
);

param_spec!(
    UserIdSpec,
    required = false,
    MetaSchema {
        format: Some("int64"),
        minimum: Some(1.0),
        description: Some("The user's id. Required when email is absent."),
        example: Some(json!(1)),
        ..MetaSchema::new("integer")
    }
);

param_spec!(
    EmailSpec,
    required = false,
    MetaSchema {
        format: Some("email"),
        description: Some(
            "The user's e-mail address (case-insensitive). Required when user_id is absent. When both are given they must name the same user. The examples of user_id and email name the same user: the first one `masterpay serve --demo` creates on a new database.",
        ),
        example: Some(json!("alice1@example.com")),
        ..text_schema::<Email>()
    }
);

param_spec!(
    BalanceTypeSpec,
    required = false,
    MetaSchema {
        enum_items: vec![json!("main"), json!("bonus")],
        description: Some("Which balance to return; both when omitted."),
        example: Some(json!("main")),
        ..MetaSchema::new("string")
    }
);

/// Which balances the answer holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BalancesShown {
    Main,
    Bonus,
    Both,
}

impl FieldValue for BalancesShown {
    const NOT_TEXT: &'static str = "must be main or bonus";

    /// `main` or `bonus`, exactly: [`BalancesShown::Both`] is the absent
    /// parameter's.
    fn from_text(text: &str) -> Result<Self, String> {
        match text {
            "main" => Ok(BalancesShown::Main),
            "bonus" => Ok(BalancesShown::Bonus),
            _ => Err(Self::NOT_TEXT.to_owned()),
        }
    }
}

/// The query after validation: the lookup it asks for, and which of its
/// balances to answer with.
pub struct BalanceQuery {
    pub lookup: LookupRequest,
    pub balance_type: BalancesShown,
}

impl BalanceQuery {
    /// The query the parameters ask for, every offending one named.
    pub fn read(
        check: &mut Validation,
        server_id: &RawParam<ServerIdSpec>,
        user_id: &RawParam<UserIdSpec>,
        email: &RawParam<EmailSpec>,
        balance_type: &RawParam<BalanceTypeSpec>,
    ) -> Option<BalanceQuery> {
        let who = check.user_params(user_id, email);
        let server_id = check.integer_param(server_id, 0..=i64::MAX);
        let server_id = check.given("server_id", server_id);
        let balance_type = check.param(balance_type);
        Some(BalanceQuery {
            lookup: LookupRequest {
                who: who?,
                server_id: server_id?,
            },
            balance_type: balance_type?.unwrap_or(BalancesShown::Both),
        })
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
    let query = validate(|check| {
        BalanceQuery::read(
            check,
            &RawParam::new("server_id", server_id),
            &RawParam::new("user_id", user_id),
            &RawParam::new("email", email),
            &RawParam::new("balance_type", balance_type),
        )
    });
    Some(query.ok()?.lookup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::UserRef;

    /// The lookup the middleware reads with the token is the one the
    /// endpoint validates from the same query (as poem hands it the values:
    /// percent-decoded, `+` as a space); invalid queries and other paths ask
    /// for none, so they never read one.
    #[test]
    fn the_requested_lookup_is_the_endpoints() {
        let lookup = |user_id: Option<i64>, email: Option<&str>, server_id| LookupRequest {
            who: UserRef::new(user_id, email.map(|e| e.parse().unwrap())).unwrap(),
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
