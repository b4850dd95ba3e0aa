//! Exact money.
//!
//! Amounts live as `i64` minor units (cents) in storage and in the service
//! layer, and become `rust_decimal::Decimal` or a two-digit string only at the
//! edges (HTTP and command line). No float is ever involved: sea-orm would read
//! a `Decimal` column on SQLite through `f64`, so the database only ever sees
//! integers, and `SET main_cents = main_cents + ?` stays an atomic increment.

use std::{fmt, str::FromStr};

use rust_decimal::Decimal;

/// The largest amount or balance stored: 999 999 999 999 999.99, fifteen
/// integer digits. The schema carries the same ceiling as a CHECK constraint.
pub const MAX_CENTS: i64 = 99_999_999_999_999_999;

/// The text of an amount as it is written in (see the `FromStr` impl), as
/// the API publishes it: at most 15 integer and 2 fraction digits.
pub const PATTERN: &str = r"^[0-9]{1,15}(\.[0-9]{1,2})?$";

/// A non-negative amount of money with two fraction digits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

/// Why a text or number is not a valid amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("must be a decimal number such as 10 or 10.50")]
    Malformed,
    #[error("must not be negative")]
    Negative,
    #[error("must have at most two fraction digits")]
    TooPrecise,
    #[error("must be at most 999999999999999.99")]
    TooLarge,
    /// Zero where something must be paid (an order's amount).
    #[error("must be at least 0.01")]
    Zero,
}

impl Money {
    pub const ZERO: Money = Money(0);
    pub const MAX: Money = Money(MAX_CENTS);

    /// An amount from minor units, as stored in the database.
    pub fn from_cents(cents: i64) -> Result<Self, MoneyError> {
        if cents < 0 {
            Err(MoneyError::Negative)
        } else if cents > MAX_CENTS {
            Err(MoneyError::TooLarge)
        } else {
            Ok(Money(cents))
        }
    }

    /// Minor units, for storage.
    pub fn cents(self) -> i64 {
        self.0
    }

    pub fn to_decimal(self) -> Decimal {
        Decimal::new(self.0, 2)
    }

    /// Exact conversion: a value with more than two significant fraction
    /// digits is refused rather than rounded.
    pub fn from_decimal(value: Decimal) -> Result<Self, MoneyError> {
        if value.is_sign_negative() && !value.is_zero() {
            return Err(MoneyError::Negative);
        }
        let value = value.normalize();
        if value.scale() > 2 {
            return Err(MoneyError::TooPrecise);
        }
        let cents = value
            .checked_mul(Decimal::ONE_HUNDRED)
            .ok_or(MoneyError::TooLarge)?;
        let cents: i64 = cents.try_into().map_err(|_| MoneyError::TooLarge)?;
        Self::from_cents(cents)
    }

    /// The amount when it is not zero: what an order may ask for.
    pub fn positive(self) -> Result<Money, MoneyError> {
        match self {
            Money::ZERO => Err(MoneyError::Zero),
            amount => Ok(amount),
        }
    }

    pub fn checked_add(self, other: Money) -> Option<Money> {
        self.0
            .checked_add(other.0)
            .and_then(|c| Money::from_cents(c).ok())
    }
}

/// A signed amount of minor units (a change, a difference) in the money
/// format: `-0.05`, `1250.50`. Unlike [`Money`], any `i64`.
pub fn signed_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let magnitude = cents.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 100, magnitude % 100)
}

/// Parses the strict decimal notation people and scripts write:
/// digits, optionally a point and one or two digits (`10`, `10.5`, `0.01`):
/// exactly the texts [`PATTERN`] matches. No sign, exponent, separators or
/// surrounding spaces.
impl FromStr for Money {
    type Err = MoneyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = text.strip_prefix('-')
            && !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return Err(MoneyError::Negative);
        }
        let (int, frac) = text
            .split_once('.')
            .map_or((text, None), |(int, frac)| (int, Some(frac)));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(int) || frac.is_some_and(|f| !digits(f)) {
            return Err(MoneyError::Malformed);
        }
        if frac.is_some_and(|f| f.len() > 2) {
            return Err(MoneyError::TooPrecise);
        }
        if int.len() > 15 {
            return Err(MoneyError::TooLarge);
        }
        let decimal = Decimal::from_str_exact(text).map_err(|_| MoneyError::TooLarge)?;
        Money::from_decimal(decimal)
    }
}

/// Always two fraction digits: `0.00`, `1250.50`.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{}.{:02}", self.0 / 100, self.0 % 100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cents_as_two_fraction_digits_and_round_trips() {
        for (cents, text) in [
            (0, "0.00"),
            (5, "0.05"),
            (10, "0.10"),
            (100, "1.00"),
            (125_050, "1250.50"),
            (MAX_CENTS, "999999999999999.99"),
        ] {
            let money = Money::from_cents(cents).unwrap();
            assert_eq!(money.to_string(), text);
            assert_eq!(text.parse::<Money>().unwrap(), money);
        }
        assert_eq!(format!("{:>8}", Money::from_cents(5).unwrap()), "    0.05");
    }

    #[test]
    fn signed_amounts_keep_their_sign() {
        assert_eq!(signed_cents(0), "0.00");
        assert_eq!(signed_cents(-5), "-0.05");
        assert_eq!(signed_cents(125_050), "1250.50");
        assert_eq!(signed_cents(-100), "-1.00");
        assert_eq!(signed_cents(i64::MIN), "-92233720368547758.08");
    }

    #[test]
    fn parses_and_renders_with_two_fraction_digits() {
        assert_eq!("10".parse::<Money>().unwrap().to_string(), "10.00");
        assert_eq!("10.5".parse::<Money>().unwrap().to_string(), "10.50");
        assert_eq!("0.01".parse::<Money>().unwrap().cents(), 1);
        assert_eq!(
            "123456789012345.67".parse::<Money>().unwrap().to_string(),
            "123456789012345.67"
        );
        assert_eq!(Money::MAX.to_string(), "999999999999999.99");
    }

    #[test]
    fn refuses_what_is_not_exact_money() {
        for (text, err) in [
            ("", MoneyError::Malformed),
            ("abc", MoneyError::Malformed),
            ("1e3", MoneyError::Malformed),
            (" 1", MoneyError::Malformed),
            ("1.", MoneyError::Malformed),
            (".5", MoneyError::Malformed),
            ("1,5", MoneyError::Malformed),
            ("NaN", MoneyError::Malformed),
            ("-1", MoneyError::Negative),
            ("1.234", MoneyError::TooPrecise),
            ("1000000000000000", MoneyError::TooLarge),
            ("99999999999999999999999999999999", MoneyError::TooLarge),
        ] {
            assert_eq!(text.parse::<Money>(), Err(err), "{text:?}");
        }
    }

    /// What parses is exactly what the published pattern matches.
    #[test]
    fn parses_what_the_pattern_says() {
        let pattern = regex::Regex::new(PATTERN).unwrap();
        for text in [
            "0",
            "1",
            "10.5",
            "10.50",
            "0.01",
            "999999999999999.99",
            "000000000000001",
            "0000000000000001",
            "1000000000000000",
            "1.234",
            "1.",
            ".5",
            "-1",
            "+1",
            "1e3",
            " 1",
            "",
        ] {
            assert_eq!(
                text.parse::<Money>().is_ok(),
                pattern.is_match(text),
                "{text:?}"
            );
        }
        assert_eq!(Money::ZERO.positive(), Err(MoneyError::Zero));
        assert_eq!(Money::MAX.positive(), Ok(Money::MAX));
    }

    #[test]
    fn decimal_conversion_is_exact() {
        let d = Decimal::from_str_exact("123456789012345.67").unwrap();
        assert_eq!(Money::from_decimal(d).unwrap().to_decimal(), d);
        assert_eq!(
            Money::from_decimal(Decimal::from_str_exact("1.230").unwrap())
                .unwrap()
                .cents(),
            123
        );
        assert_eq!(
            Money::from_decimal(Decimal::from_str_exact("1.001").unwrap()),
            Err(MoneyError::TooPrecise)
        );
    }

    #[test]
    fn adding_ten_cents_thirty_times_is_exactly_three() {
        let mut total = Money::ZERO;
        for _ in 0..30 {
            total = total.checked_add("0.10".parse().unwrap()).unwrap();
        }
        assert_eq!(total.to_string(), "3.00");
        assert_eq!(Money::MAX.checked_add(Money::from_cents(1).unwrap()), None);
    }
}
