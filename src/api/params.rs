//! Query parameters that never fail to parse, read from the request itself.
//!
//! poem-openapi rejects a request at the first parameter that does not parse,
//! with its own plain-text error. The contract wants every offending field
//! reported at once in the JSON error body (docs/api.md), so each parameter
//! is taken as the raw strings the query holds ([`RawParam`]) and read by
//! the endpoint's validation step (`api::validation`). The schema published
//! for it is still the precise one (type, minimum, pattern, enum, example),
//! given by a [`ParamSpec`].
//!
//! [`QueryParam`] publishes a parameter as poem-openapi's `Query` does, but
//! reads it from the request's own query string, not from the pairs
//! poem-openapi's router puts into a request: the operations are called
//! without that router (see `app`). [`HeaderParam`] does the same for a
//! header; both are a [`Param`], read where its [`ParamIn`] says.

use std::{borrow::Cow, marker::PhantomData, ops::Deref};

use poem::{Request, RequestBody, Result};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaParamIn, MetaSchema, MetaSchemaRef, Registry},
    types::Type,
};

/// What the OpenAPI document says about a parameter.
pub trait ParamSpec: Send + Sync + 'static {
    const NAME: &'static str;
    const REQUIRED: bool;
    fn schema() -> MetaSchema;
}

/// Declares `$spec`, the [`ParamSpec`] of a parameter published with the
/// schema `$schema`.
macro_rules! param_spec {
    ($spec:ident, required = $required:literal, $schema:expr) => {
        pub struct $spec;

        impl $crate::api::params::ParamSpec for $spec {
            const NAME: &'static str = stringify!($spec);
            const REQUIRED: bool = $required;
            fn schema() -> poem_openapi::registry::MetaSchema {
                $schema
            }
        }
    };
}
pub(crate) use param_spec;

/// All values a parameter was given, unparsed, and its name.
pub struct RawParam<S> {
    name: &'static str,
    values: Vec<String>,
    _spec: PhantomData<S>,
}

impl<S> RawParam<S> {
    pub fn new<A: AsRef<str>>(name: &'static str, values: impl IntoIterator<Item = A>) -> Self {
        RawParam {
            name,
            values: values.into_iter().map(|v| v.as_ref().to_owned()).collect(),
            _spec: PhantomData,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The single value of the parameter: `Ok(None)` when absent, what is
    /// wrong with it when it was repeated.
    pub fn single(&self) -> Result<Option<&str>, &'static str> {
        match self.values.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ => Err("must be given only once"),
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

/// Where a parameter is read from, and how.
pub trait ParamIn: Send + Sync + 'static {
    const IN: MetaParamIn;
    /// Every value the request gives the parameter `name`.
    fn values<'a>(request: &'a Request, name: &str) -> Vec<Cow<'a, str>>;
}

/// The query string: every value it gives the name, percent-decoded, `+` as
/// a space, as poem-openapi's router splits it.
pub struct InQuery;

impl ParamIn for InQuery {
    const IN: MetaParamIn = MetaParamIn::Query;

    fn values<'a>(request: &'a Request, name: &str) -> Vec<Cow<'a, str>> {
        let query = request.uri().query().unwrap_or_default();
        form_urlencoded::parse(query.as_bytes())
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value)
            .collect()
    }
}

/// The headers: every line of the header. A value that is not visible
/// ASCII is kept as U+FFFD, so that the endpoint refuses it as it refuses
/// any other malformed value.
pub struct InHeader;

impl ParamIn for InHeader {
    const IN: MetaParamIn = MetaParamIn::Header;

    fn values<'a>(request: &'a Request, name: &str) -> Vec<Cow<'a, str>> {
        request
            .headers()
            .get_all(name)
            .iter()
            .map(|value| Cow::Borrowed(value.to_str().unwrap_or("\u{fffd}")))
            .collect()
    }
}

/// A parameter, published as poem-openapi's `Query<T>` or `Header<T>`
/// publishes it, with every value the request itself gives it (see the
/// module docs).
pub struct Param<T, L>(pub T, PhantomData<L>);

/// A query parameter.
pub type QueryParam<T> = Param<T, InQuery>;

/// A header parameter.
pub type HeaderParam<T> = Param<T, InHeader>;

impl<T, L> Deref for Param<T, L> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'a, S: ParamSpec, L: ParamIn> ApiExtractor<'a> for Param<RawParam<S>, L> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::Parameter];
    const PARAM_IS_REQUIRED: bool = S::REQUIRED;

    type ParamType = RawParam<S>;
    type ParamRawType = RawParam<S>;

    fn register(registry: &mut Registry) {
        RawParam::<S>::register(registry);
    }

    fn param_in() -> Option<MetaParamIn> {
        Some(L::IN)
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        Some(RawParam::<S>::schema_ref())
    }

    fn param_raw_type(&self) -> Option<&Self::ParamRawType> {
        self.0.as_raw_value()
    }

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        param_opts: ExtractParamOptions<RawParam<S>>,
    ) -> Result<Self> {
        let values = L::values(request, param_opts.name);
        Ok(Param(RawParam::new(param_opts.name, values), PhantomData))
    }
}
