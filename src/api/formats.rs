//! The domain's types as the API publishes and reads them.
//!
//! Each type's schema is its pattern and limits (`crate::domain`,
//! `crate::money`), so the document states exactly the rule the parser
//! applies. [`FieldValue`] is the one way the API reads a value out of JSON
//! or a parameter; poem-openapi's `ParseFromJSON` and `ParseFromParameter`
//! (which request bodies' derives need) read through it too. A value that
//! does not read is refused with its type's sentence, which the validation
//! step puts after the field's name (`api::validation`).

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{Example, ParseError, ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::{
    domain::{Email, IdempotencyKey, OrderId, PaymentSystem, TextFormat},
    money::{self, Money},
};

/// A value of a field as the API reads it, from a parameter's text or a
/// JSON string; `Err` says what it must be (`must be ...`).
pub trait FieldValue: Sized {
    /// What it must be, said of a JSON value that is no string.
    const NOT_TEXT: &'static str;

    fn from_text(text: &str) -> Result<Self, String>;

    fn from_json(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(text) => Self::from_text(text),
            _ => Err(Self::NOT_TEXT.to_owned()),
        }
    }
}

/// The time the documented examples show.
pub fn example_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T10:15:30.123456Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// The schema of a text format: a string, its pattern and its limits.
pub fn text_schema<T: TextFormat>() -> MetaSchema {
    MetaSchema {
        pattern: T::PATTERN.map(str::to_owned),
        min_length: T::MIN_LEN,
        max_length: Some(T::MAX_LEN),
        ..MetaSchema::new("string")
    }
}

/// The poem-openapi traits of a type read by [`FieldValue`], published with
/// `$schema` and shown with `$example`.
macro_rules! api_type {
    ($ty:ty, schema = $schema:expr, example = $example:literal) => {
        impl Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> Cow<'static, str> {
                "string".into()
            }

            fn schema_ref() -> MetaSchemaRef {
                MetaSchemaRef::Inline(Box::new($schema))
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(std::iter::once(self))
            }
        }

        impl ParseFromJSON for $ty {
            fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
                let value = value.unwrap_or_default();
                <$ty as FieldValue>::from_json(&value).map_err(ParseError::custom)
            }
        }

        impl ParseFromParameter for $ty {
            fn parse_from_parameter(text: &str) -> ParseResult<Self> {
                <$ty as FieldValue>::from_text(text).map_err(ParseError::custom)
            }
        }

        impl ToJSON for $ty {
            fn to_json(&self) -> Option<Value> {
                Some(Value::String(self.to_string()))
            }
        }

        impl Example for $ty {
            fn example() -> Self {
                $example.parse().expect("the example is valid")
            }
        }
    };
}

/// A text format reads as its `FromStr` says.
macro_rules! text_format {
    ($ty:ty, example = $example:literal) => {
        impl FieldValue for $ty {
            const NOT_TEXT: &'static str = <$ty>::INVALID.rule();

            fn from_text(text: &str) -> Result<Self, String> {
                text.parse()
                    .map_err(|err: crate::domain::Invalid| err.to_string())
            }
        }

        api_type!($ty, schema = text_schema::<$ty>(), example = $example);
    };
}

text_format!(OrderId, example = "Order:AbC123xYz");
text_format!(PaymentSystem, example = "cstm:paygate");
text_format!(Email, example = "alice1@example.com");
text_format!(
    IdempotencyKey,
    example = "3f9c2a7e-5b1d-4c8e-9a60-2d4b8f1e7c35"
);

/// An amount is a JSON string, never a number: a number would pass through
/// a float in most clients.
impl FieldValue for Money {
    const NOT_TEXT: &'static str = "must be a decimal string such as \"10.50\", never a number";

    fn from_text(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|err: money::MoneyError| err.to_string())
    }
}

/// A free text taken as it is given (a cursor).
impl FieldValue for String {
    const NOT_TEXT: &'static str = "must be a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }
}

api_type!(
    Money,
    schema = MetaSchema {
        pattern: Some(money::PATTERN.to_owned()),
        ..MetaSchema::new("string")
    },
    example = "10.25"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_valid_and_values_read_alike_from_json_and_parameters() {
        assert_eq!(OrderId::example(), "Order:AbC123xYz");
        assert_eq!(PaymentSystem::example(), "cstm:paygate");
        assert_eq!(Email::example(), "alice1@example.com");
        assert_eq!(IdempotencyKey::example().len(), 36);
        assert_eq!(Money::example().to_string(), "10.25");
        assert_eq!(
            OrderId::from_json(&Value::from("Order:abc")),
            Err("must be Order: followed by 8 to 11 letters or digits".to_owned())
        );
        assert_eq!(
            OrderId::from_json(&Value::from(12345678)),
            OrderId::from_text("Order:abc")
        );
        assert_eq!(
            Money::from_json(&Value::from(10)),
            Err("must be a decimal string such as \"10.50\", never a number".to_owned())
        );
        assert_eq!(
            Money::from_json(&Value::from("1.234")),
            Err("must have at most two fraction digits".to_owned())
        );
    }
}
