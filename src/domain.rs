//! The contract's value formats, one type each, made only by parsing.
//!
//! Whatever holds an [`OrderId`], a [`PaymentSystem`], an [`Email`], an
//! [`IdempotencyKey`] or a [`UserRef`] holds a valid one, so nothing checks
//! it again; and each format's rule, its published pattern and limits, and
//! the sentence that refuses it are written here once. The API (through the
//! poem-openapi impls in `api::formats`), the command line (clap value
//! parsers) and the panel (its form parsers) all make them with `FromStr`,
//! so the three accept the same input and refuse it in the same words. The
//! amount is [`crate::money::Money`], a leaf beside this one.
//!
//! A leaf: nothing of the crate above it is imported here.

use std::{fmt, ops::Deref, str::FromStr, sync::LazyLock};

use regex::Regex;
use serde::{Serialize, Serializer};

/// Why a text is no value of a type: what it must be, as a predicate
/// (`must be ...`) that each reader puts after its own name for the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(&'static str);

impl Invalid {
    /// What the value must be.
    pub const fn rule(self) -> &'static str {
        self.0
    }
}

/// A text format of the contract, as the OpenAPI document publishes it.
pub trait TextFormat: FromStr<Err = Invalid> + Deref<Target = str> {
    /// The regular expression every value matches; `None` when none says
    /// it (an e-mail address).
    const PATTERN: Option<&'static str>;
    /// The shortest value, in characters, when the format has a minimum.
    const MIN_LEN: Option<usize>;
    /// The longest value: in characters, which are bytes for the ASCII
    /// formats; an e-mail address's limit is bytes.
    const MAX_LEN: usize;
    /// What a value must be.
    const INVALID: Invalid;
}

/// What every text type here shares: it reads as the text it holds.
macro_rules! text_type {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
    };
}

/// A text type whose values are exactly the texts one regular expression
/// matches; the limits are the lengths the pattern allows.
macro_rules! patterned {
    (
        $(#[$doc:meta])*
        $name:ident = $pattern:literal, $min:literal..=$max:literal, $invalid:literal
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl TextFormat for $name {
            const PATTERN: Option<&'static str> = Some($pattern);
            const MIN_LEN: Option<usize> = Some($min);
            const MAX_LEN: usize = $max;
            const INVALID: Invalid = Invalid($invalid);
        }

        impl FromStr for $name {
            type Err = Invalid;

            fn from_str(text: &str) -> Result<Self, Invalid> {
                static PATTERN: LazyLock<Regex> =
                    LazyLock::new(|| Regex::new($pattern).expect("a valid pattern"));
                match PATTERN.is_match(text) {
                    true => Ok($name(text.to_owned())),
                    false => Err(Self::INVALID),
                }
            }
        }

        text_type!($name);
    };
}

patterned!(
    /// A payment order's id: `Order:` followed by 8 to 11 ASCII letters or
    /// digits (the service issues `Order:` and 11).
    OrderId = r"^Order:[A-Za-z0-9]{8,11}$", 14..=17,
        "must be Order: followed by 8 to 11 letters or digits"
);

patterned!(
    /// The payment system an order is paid through: `cstm:` followed by 4
    /// to 20 lower-case letters. Completion and cancellation must name the
    /// order's.
    PaymentSystem = r"^cstm:[a-z]{4,20}$", 9..=25,
        "must be cstm: followed by 4 to 20 lower-case letters"
);

patterned!(
    /// What makes a creation safe to retry (the `Idempotency-Key` header):
    /// 1 to 255 visible ASCII characters.
    IdempotencyKey = r"^[!-~]{1,255}$", 1..=255,
        "must be 1 to 255 visible ASCII characters"
);

/// An e-mail address: an RFC 5322 addr-spec as the `email_address` crate
/// checks it, of at most 254 bytes (RFC 5321's path limit). Held
/// lower-cased: addresses are compared case-insensitively, so stored and
/// looked up that way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    /// `text` as addresses are compared: for searching the stored ones
    /// with part of one.
    pub fn folded(text: &str) -> String {
        text.to_lowercase()
    }
}

impl TextFormat for Email {
    const PATTERN: Option<&'static str> = None;
    const MIN_LEN: Option<usize> = None;
    const MAX_LEN: usize = 254;
    const INVALID: Invalid = Invalid("must be a valid e-mail address");
}

impl FromStr for Email {
    type Err = Invalid;

    fn from_str(text: &str) -> Result<Self, Invalid> {
        match text.len() <= Self::MAX_LEN && email_address::EmailAddress::is_valid(text) {
            true => Ok(Email(Self::folded(text))),
            false => Err(Self::INVALID),
        }
    }
}

text_type!(Email);

/// A user of a project as a caller names one: by id, by e-mail address, or
/// by both, which must then name the same user. Never by neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    Id(i64),
    Email(Email),
    Both(i64, Email),
}

impl UserRef {
    /// Why neither was given, said of `user_id`.
    pub const NEITHER: Invalid = Invalid("is required when email is empty");
    /// Why one text names no user (see the `FromStr` impl).
    pub const NOT_ONE: Invalid =
        Invalid("must be a user id (a positive number) or an e-mail address");

    /// The user named by `user_id`, `email` or both.
    pub fn new(user_id: Option<i64>, email: Option<Email>) -> Result<UserRef, Invalid> {
        match (user_id, email) {
            (Some(id), None) => Ok(UserRef::Id(id)),
            (None, Some(email)) => Ok(UserRef::Email(email)),
            (Some(id), Some(email)) => Ok(UserRef::Both(id, email)),
            (None, None) => Err(Self::NEITHER),
        }
    }

    pub fn user_id(&self) -> Option<i64> {
        match self {
            UserRef::Id(id) | UserRef::Both(id, _) => Some(*id),
            UserRef::Email(_) => None,
        }
    }

    pub fn email(&self) -> Option<&Email> {
        match self {
            UserRef::Email(email) | UserRef::Both(_, email) => Some(email),
            UserRef::Id(_) => None,
        }
    }
}

/// One text that names a user: a positive id, else an e-mail address.
impl FromStr for UserRef {
    type Err = Invalid;

    fn from_str(text: &str) -> Result<Self, Invalid> {
        match text.parse::<i64>() {
            Ok(id) if id > 0 => Ok(UserRef::Id(id)),
            _ => text.parse().map(UserRef::Email).map_err(|_| Self::NOT_ONE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published limits are the lengths the pattern allows.
    fn limits_are_the_patterns<T: TextFormat>(shortest: &str, longest: &str) {
        assert!(shortest.parse::<T>().is_ok(), "{shortest}");
        assert!(longest.parse::<T>().is_ok(), "{longest}");
        assert_eq!(Some(shortest.len()), T::MIN_LEN);
        assert_eq!(longest.len(), T::MAX_LEN);
        assert!(shortest[..shortest.len() - 1].parse::<T>().is_err());
        assert!(format!("{longest}a").parse::<T>().is_err());
    }

    #[test]
    fn order_ids() {
        limits_are_the_patterns::<OrderId>("Order:abcd1234", "Order:ABCDEFGH123");
        for bad in [
            "order:abcd1234",
            "Order:abcd-1234",
            "Order:abcd1234\n",
            "Order:ÄÖÜäöüßé",
            "",
        ] {
            assert_eq!(bad.parse::<OrderId>(), Err(OrderId::INVALID), "{bad:?}");
        }
        assert_eq!(
            OrderId::INVALID.to_string(),
            "must be Order: followed by 8 to 11 letters or digits"
        );
    }

    #[test]
    fn payment_systems() {
        limits_are_the_patterns::<PaymentSystem>("cstm:abcd", "cstm:abcdefghijklmnopqrst");
        for bad in [
            "cstm:Abcd",
            "cstm:ab1d",
            "xstm:abcd",
            "cstm:päygate",
            "card",
        ] {
            assert!(bad.parse::<PaymentSystem>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn idempotency_keys() {
        let longest: String = ('!'..='~').cycle().take(255).collect();
        limits_are_the_patterns::<IdempotencyKey>("k", &longest);
        for bad in ["", "a b", "ключ", "tab\t", "\u{fffd}"] {
            assert!(bad.parse::<IdempotencyKey>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn emails_are_held_lower_cased() {
        let email: Email = "Alice@Example.COM".parse().unwrap();
        assert_eq!(email, "alice@example.com");
        for bad in ["alice", "alice@", "@example.com", ""] {
            assert_eq!(bad.parse::<Email>(), Err(Email::INVALID), "{bad:?}");
        }
        let labels = [
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(63),
            "e".repeat(56),
        ];
        let longest = format!("a@{}.com", labels.join("."));
        assert_eq!(longest.len(), Email::MAX_LEN);
        assert!(longest.parse::<Email>().is_ok());
        assert!(format!("a{longest}").parse::<Email>().is_err());
    }

    #[test]
    fn a_user_is_named_by_id_email_or_both() {
        let email = || "ann@x.io".parse::<Email>().unwrap();
        assert_eq!(UserRef::new(Some(7), None), Ok(UserRef::Id(7)));
        assert_eq!(
            UserRef::new(None, Some(email())),
            Ok(UserRef::Email(email()))
        );
        let both = UserRef::new(Some(7), Some(email())).unwrap();
        assert_eq!((both.user_id(), both.email()), (Some(7), Some(&email())));
        assert_eq!(UserRef::new(None, None), Err(UserRef::NEITHER));
        assert_eq!("42".parse(), Ok(UserRef::Id(42)));
        assert_eq!("Ann@X.io".parse(), Ok(UserRef::Email(email())));
        for bad in ["0", "-3", "ann", ""] {
            assert_eq!(bad.parse::<UserRef>(), Err(UserRef::NOT_ONE), "{bad:?}");
        }
    }
}
