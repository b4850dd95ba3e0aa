//! Authentication and per-endpoint permissions.
//!
//! The chain (docs/api.md, "Authentication") is split in two, because part
//! of it must run before routing:
//!
//! 1. [`v2_authentication`], a middleware over every `/v2/...` path, checks
//!    EMPTY_TOKEN → INVALID_TOKEN → TOKEN_NOT_FOUND → TOKEN_DISABLED →
//!    EMPTY_ACCESS → PROJECT_NOT_FOUND (`service::auth`) and stores the
//!    [`Authenticated`] caller. Routing (NOT_FOUND for unknown v2 paths and
//!    wrong methods) happens only after it, so nobody can enumerate routes
//!    without a valid token.
//! 2. The bearer security schemes, one type per permission (six:
//!    [`BalanceToken`], [`OperationsToken`], [`CreateToken`], [`ReadToken`],
//!    [`CompleteToken`], [`CancelToken`]), all published as the single
//!    `ApplicationToken` scheme. Each endpoint names the permission it needs by the type of its
//!    auth argument; the checker answers ACCESS_DENIED when the token lacks
//!    it. Endpoint validation runs only after that.
//!
//! For a balance request the middleware reads the query as the endpoint
//! does, so that the asked account is read in the token's own statement
//! (one statement per request); the endpoint still validates the query
//! itself and uses that row only for exactly the account it validated.

use std::sync::Arc;

use poem::{
    Endpoint, Request, RequestBody, Result,
    http::{Method, header},
};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions, SecurityScheme,
    auth::{Bearer, BearerAuthorization},
    registry::Registry,
};

use super::{balance_query, error::ApiError};
use crate::{
    service::{
        auth::{self, Authenticated},
        balances,
        tokens::Permission,
    },
    state::AppState,
};

/// True for the paths API v2 owns.
pub fn is_v2_path(path: &str) -> bool {
    path == "/v2" || path.starts_with("/v2/")
}

/// The middleware of the first part of the chain, around `inner`; see the
/// module docs.
pub async fn v2_authentication<E: Endpoint>(inner: Arc<E>, mut req: Request) -> Result<E::Output> {
    if is_v2_path(req.uri().path()) {
        let authenticated = authenticate(&req).await?;
        req.extensions_mut().insert(authenticated);
    }
    inner.call(req).await
}

async fn authenticate(req: &Request) -> Result<Authenticated, ApiError> {
    let state = req.data::<AppState>().ok_or_else(ApiError::internal)?;
    // A header that is not valid UTF-8 cannot hold a valid token.
    let header = match req.headers().get(header::AUTHORIZATION) {
        None => None,
        Some(value) => Some(value.to_str().unwrap_or("\u{0}invalid")),
    };
    let token = auth::bearer_token(header).map_err(ApiError::from)?;
    let account = if req.method() == Method::GET {
        balance_query::requested_lookup(req.uri().path(), req.uri().query())
            .as_ref()
            .map(balances::account_key)
    } else {
        None
    };
    auth::authenticate(&state.store, &state.token_usage, token, account)
        .await
        .map_err(ApiError::from)
}

/// The second part: the caller the middleware authenticated (or, should the
/// scheme ever be mounted without it, a fresh authentication) must hold
/// `permission`.
async fn authorize(req: &Request, permission: Permission) -> Result<Authenticated> {
    let caller = match req.extensions().get::<Authenticated>() {
        Some(authenticated) => authenticated.clone(),
        None => authenticate(req).await?,
    };
    if caller.principal.may(permission) {
        Ok(caller)
    } else {
        Err(ApiError::access_denied().into())
    }
}

/// Application token: `Authorization: Bearer <64 letters and digits>`.
///
/// Tokens are issued by the operator with `masterpay token create --project ID
/// --name NAME --allow PERMISSIONS`, shown once, and stored only as a SHA-256
/// hash. Each token belongs to one project and carries per-endpoint
/// permissions: `master-account/balance` for GET /v2/master-account/balance,
/// `master-account/operations` for GET /v2/master-account/operations,
/// `payment/order/create` for POST /v2/payment/order/create,
/// `payment/order/read` for GET /v2/payment/order,
/// `payment/order/complete` for POST /v2/payment/order/complete,
/// `payment/order/cancel` for POST /v2/payment/order/cancel.
///
/// A missing or refused token is answered with 403 (EMPTY_TOKEN,
/// INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED, EMPTY_ACCESS,
/// ACCESS_DENIED) or 404 PROJECT_NOT_FOUND, never 401. In Swagger UI, click
/// Authorize and paste the token alone, without the word Bearer.
//
// (The doc comment above is the scheme's published description.) Only its
// registration in the document is used: what poem-openapi derives for a
// scheme reads state that only its router puts into a request, and the
// operations are called without that router (see `app`). The endpoints'
// schemes, one per permission, publish this one and authorize themselves.
#[derive(SecurityScheme)]
#[oai(
    rename = "ApplicationToken",
    ty = "bearer",
    bearer_format = "64 alphanumeric characters"
)]
pub struct ApplicationToken(pub Bearer);

/// Declares `$scheme`, the caller of an endpoint that needs `$permission`:
/// it publishes [`ApplicationToken`] and extracts that caller.
macro_rules! permission_scheme {
    ($scheme:ident, $permission:expr) => {
        #[doc = concat!("The caller of an endpoint that needs [`", stringify!($permission), "`].")]
        pub struct $scheme(pub Authenticated);

        impl<'a> ApiExtractor<'a> for $scheme {
            const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
            type ParamType = ();
            type ParamRawType = ();

            fn register(registry: &mut Registry) {
                ApplicationToken::register(registry);
            }

            fn security_schemes() -> Vec<&'static str> {
                ApplicationToken::security_schemes()
            }

            async fn from_request(
                req: &'a Request,
                _body: &mut RequestBody,
                _param_opts: ExtractParamOptions<()>,
            ) -> Result<Self> {
                // What a derived bearer scheme checks first.
                <Bearer as BearerAuthorization>::from_request(req)?;
                authorize(req, $permission).await.map($scheme)
            }
        }
    };
}

permission_scheme!(BalanceToken, Permission::Balance);
permission_scheme!(CompleteToken, Permission::Complete);
permission_scheme!(CreateToken, Permission::Create);
permission_scheme!(ReadToken, Permission::Read);
permission_scheme!(CancelToken, Permission::Cancel);
permission_scheme!(OperationsToken, Permission::Operations);
