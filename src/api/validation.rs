//! The one validation step of a request: every parameter and body field is
//! read into its type, and every one that does not read is named at once in
//! VALIDATION_ERROR's `message` (docs/api.md, "Validation"), its name
//! followed by what its type says it must be.

use std::{fmt::Display, ops::RangeInclusive};

use serde_json::{Map, Value};

use super::{error::FieldErrors, formats::FieldValue, params::RawParam};
use crate::domain::{Email, UserRef};

/// The offences found so far; see [`validate`].
pub struct Validation {
    errors: FieldErrors,
}

/// What `read` makes of a request, which it reads into the [`Validation`]
/// it is given: `Ok` only when no field offended, else every offence.
pub fn validate<T>(read: impl FnOnce(&mut Validation) -> Option<T>) -> Result<T, FieldErrors> {
    let mut check = Validation {
        errors: FieldErrors::new(),
    };
    match read(&mut check) {
        Some(value) if check.errors.is_empty() => Ok(value),
        _ => Err(check.errors),
    }
}

impl Validation {
    /// Records that `name` offends: `rule` says what it must be.
    pub fn refuse(&mut self, name: &str, rule: impl Display) {
        self.errors
            .insert(name.to_owned(), format!("{name} {rule}"));
    }

    /// `value`, or its refusal recorded under `name`.
    pub fn check<T, E: Display>(&mut self, name: &str, value: Result<T, E>) -> Option<T> {
        value.map_err(|rule| self.refuse(name, rule)).ok()
    }

    /// The value of `name` as read (`None`: offended) when it was given,
    /// else its absence recorded.
    pub fn given<T>(&mut self, name: &str, value: Option<Option<T>>) -> Option<T> {
        match value {
            Some(None) => {
                self.refuse(name, "is required");
                None
            }
            value => value.flatten(),
        }
    }

    /// The fields of a JSON object body, each one not in `known` (when
    /// given) recorded as an offence; `None`, with the offence under `body`,
    /// when the body is no object.
    pub fn object<'a, 'c>(
        &'c mut self,
        body: &'a Value,
        known: Option<&[&str]>,
    ) -> Option<Fields<'a, 'c>> {
        let Value::Object(object) = body else {
            self.errors.insert(
                "body".to_owned(),
                "the body must be a JSON object".to_owned(),
            );
            return None;
        };
        let unknown = |name: &&String| known.is_some_and(|known| !known.contains(&name.as_str()));
        for name in object.keys().filter(unknown) {
            self.refuse(name, "is not a field of this request");
        }
        Some(Fields {
            object,
            check: self,
        })
    }

    /// `n` when it is an integer in `range`, else its refusal recorded
    /// under `name`.
    fn integer(&mut self, name: &str, n: Option<i64>, range: RangeInclusive<i64>) -> Option<i64> {
        let n = n.filter(|n| range.contains(n));
        if n.is_none() {
            let rule = match *range.end() {
                i64::MAX => format!("must be an integer >= {}", range.start()),
                end => format!("must be an integer from {} to {end}", range.start()),
            };
            self.refuse(name, rule);
        }
        n
    }

    /// The single value of a parameter: `Some(None)` when absent.
    fn single<'p, S>(&mut self, raw: &'p RawParam<S>) -> Option<Option<&'p str>> {
        self.check(raw.name(), raw.single())
    }

    /// A parameter read as `T`: `Some(None)` when absent.
    pub fn param<T: FieldValue, S>(&mut self, raw: &RawParam<S>) -> Option<Option<T>> {
        match self.single(raw)? {
            None => Some(None),
            Some(text) => self.check(raw.name(), T::from_text(text)).map(Some),
        }
    }

    /// A parameter read as an integer in `range`, written as plain digits
    /// (a minus sign at most: no `+`, blanks, fraction or exponent):
    /// `Some(None)` when absent.
    pub fn integer_param<S>(
        &mut self,
        raw: &RawParam<S>,
        range: RangeInclusive<i64>,
    ) -> Option<Option<i64>> {
        match self.single(raw)? {
            None => Some(None),
            Some(text) => self
                .integer(raw.name(), parse_integer(text), range)
                .map(Some),
        }
    }

    /// The user a query names by `user_id`, `email` or both; an empty value
    /// counts as absent.
    pub fn user_params<U, E>(
        &mut self,
        user_id: &RawParam<U>,
        email: &RawParam<E>,
    ) -> Option<UserRef> {
        fn given(raw: Option<Option<&str>>) -> Option<Option<&str>> {
            raw.map(|text| text.filter(|t| !t.is_empty()))
        }
        let user_id = match given(self.single(user_id)) {
            Some(Some(_)) => self.integer_param(user_id, 1..=i64::MAX),
            absent_or_repeated => absent_or_repeated.map(|_| None),
        };
        let email = match given(self.single(email)) {
            Some(Some(_)) => self.param(email),
            absent_or_repeated => absent_or_repeated.map(|_| None),
        };
        self.user(user_id, email)
    }

    /// The user named by `user_id` and `email` as read (`None`: offended):
    /// one of them at least, else the offence under `user_id`.
    fn user(
        &mut self,
        user_id: Option<Option<i64>>,
        email: Option<Option<Email>>,
    ) -> Option<UserRef> {
        let user = UserRef::new(user_id?, email?);
        self.check("user_id", user)
    }
}

/// The fields of a JSON object body, read one by one into the validation.
pub struct Fields<'a, 'c> {
    object: &'a Map<String, Value>,
    check: &'c mut Validation,
}

impl<'a> Fields<'a, '_> {
    /// The field `name` as sent, when it was and is not null.
    pub fn value(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|value| !value.is_null())
    }

    /// The field read as `T`: `Some(None)` when absent or null.
    pub fn optional<T: FieldValue>(&mut self, name: &str) -> Option<Option<T>> {
        match self.value(name) {
            None => Some(None),
            Some(value) => self.check.check(name, T::from_json(value)).map(Some),
        }
    }

    /// The field read as `T`, which must be given.
    pub fn required<T: FieldValue>(&mut self, name: &str) -> Option<T> {
        let value = self.optional(name);
        self.check.given(name, value)
    }

    /// The value of `name` as read (`None`: offended) when it was given,
    /// else its absence recorded.
    pub fn given<T>(&mut self, name: &str, value: Option<Option<T>>) -> Option<T> {
        self.check.given(name, value)
    }

    /// The field read as an integer of at least `min`: `Some(None)` when
    /// absent or null.
    pub fn integer(&mut self, name: &str, min: i64) -> Option<Option<i64>> {
        match self.value(name) {
            None => Some(None),
            Some(value) => self
                .check
                .integer(name, value.as_i64(), min..=i64::MAX)
                .map(Some),
        }
    }

    /// The user the body names by `user_id`, `email` or both; an empty
    /// `email` counts as absent.
    pub fn user(&mut self) -> Option<UserRef> {
        let user_id = self.integer("user_id", 1);
        let email = match self.value("email") {
            Some(Value::String(text)) if text.is_empty() => Some(None),
            _ => self.optional("email"),
        };
        self.check.user(user_id, email)
    }

    /// `value`, or its refusal recorded under `name`.
    pub fn check<T, E: Display>(&mut self, name: &str, value: Result<T, E>) -> Option<T> {
        self.check.check(name, value)
    }

    /// Records that `name` offends: `rule` says what it must be.
    pub fn refuse(&mut self, name: &str, rule: impl Display) {
        self.check.refuse(name, rule);
    }
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
    use serde_json::json;

    use super::*;
    use crate::domain::OrderId;

    fn params(name: &'static str, values: &[&str]) -> RawParam<()> {
        RawParam::new(name, values)
    }

    #[test]
    fn every_offending_field_is_named_at_once_with_its_types_sentence() {
        let body = json!({"order_id": "Order:x", "user_id": 0, "extra": 1});
        let errors = validate(|check| {
            let key = check.param::<OrderId, _>(&params("Idempotency-Key", &["a", "b"]));
            let mut fields = check.object(&body, Some(&["order_id", "user_id", "email"]))?;
            let order_id = fields.required::<OrderId>("order_id");
            let amount = fields.required::<crate::money::Money>("amount");
            let user = fields.user();
            Some((key?, order_id?, amount?, user?))
        })
        .unwrap_err();
        assert_eq!(
            errors,
            FieldErrors::from([
                (
                    "Idempotency-Key".into(),
                    "Idempotency-Key must be given only once".into()
                ),
                (
                    "order_id".into(),
                    "order_id must be Order: followed by 8 to 11 letters or digits".into()
                ),
                ("amount".into(), "amount is required".into()),
                ("user_id".into(), "user_id must be an integer >= 1".into()),
                (
                    "extra".into(),
                    "extra is not a field of this request".into()
                ),
            ])
        );
    }

    #[test]
    fn a_user_is_named_by_either_and_empty_values_count_as_absent() {
        let query = |user_id: &[&str], email: &[&str]| {
            validate(|check| {
                check.user_params(&params("user_id", user_id), &params("email", email))
            })
        };
        assert_eq!(query(&["7"], &[""]), Ok(UserRef::Id(7)));
        assert!(matches!(query(&[""], &["A@b.io"]), Ok(UserRef::Email(e)) if e == "a@b.io"));
        assert_eq!(
            query(&[""], &[]),
            Err(FieldErrors::from([(
                "user_id".into(),
                "user_id is required when email is empty".into()
            )]))
        );
        assert_eq!(
            query(&["+7"], &["x"])
                .unwrap_err()
                .keys()
                .collect::<Vec<_>>(),
            ["email", "user_id"]
        );
        let body = json!({"user_id": null, "email": ""});
        assert_eq!(
            validate(|check| check.object(&body, None)?.user()).unwrap_err()["user_id"],
            "user_id is required when email is empty"
        );
    }

    #[test]
    fn integers_are_plain_digits() {
        for good in ["0", "7", "-1", "9223372036854775807"] {
            assert!(parse_integer(good).is_some(), "{good}");
        }
        for bad in ["", "+1", " 1", "1.0", "1e3", "-", "9223372036854775808"] {
            assert_eq!(parse_integer(bad), None, "{bad}");
        }
        assert_eq!(
            validate(|check| check.integer_param(&params("limit", &["0"]), 1..=100)).unwrap_err()["limit"],
            "limit must be an integer from 1 to 100"
        );
    }
}
