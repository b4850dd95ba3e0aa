//! Query parameters that never fail to parse.
//!
//! poem-openapi rejects a request at the first parameter that does not parse,
//! with its own plain-text error. The contract wants every offending field
//! reported at once in the seed's JSON, so each parameter is taken as the raw
//! strings the query holds ([`RawParam`]) and validated by the endpoint. The
//! schema published for it is still the precise one (type, minimum, pattern,
//! enum, example), given by a [`ParamSpec`].

use std::{borrow::Cow, marker::PhantomData};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseFromParameter, ParseResult, Type},
};

/// What the OpenAPI document says about a parameter.
pub trait ParamSpec: Send + Sync + 'static {
    const NAME: &'static str;
    const REQUIRED: bool;
    fn schema() -> MetaSchema;
}

/// All values a query parameter was given, unparsed.
pub struct RawParam<S> {
    values: Vec<String>,
    _spec: PhantomData<S>,
}

impl<S> RawParam<S> {
    /// The single value of the parameter: `Ok(None)` when absent, an error
    /// sentence when it was repeated.
    pub fn single(&self, field: &str) -> Result<Option<&str>, String> {
        match self.values.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ => Err(format!("{field} must be given only once")),
        }
    }
}

impl<S: ParamSpec> Type for RawParam<S> {
    const IS_REQUIRED: bool = S::REQUIRED;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed(S::NAME)
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(S::schema()))
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

impl<S: ParamSpec> ParseFromParameter for RawParam<S> {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(RawParam {
            values: vec![value.to_owned()],
            _spec: PhantomData,
        })
    }

    fn parse_from_parameters<I: IntoIterator<Item = A>, A: AsRef<str>>(
        iter: I,
    ) -> ParseResult<Self> {
        Ok(RawParam {
            values: iter.into_iter().map(|v| v.as_ref().to_owned()).collect(),
            _spec: PhantomData,
        })
    }
}
