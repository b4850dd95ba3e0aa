//! Authentication and per-endpoint permissions.
//!
//! The seed's chain (section 5, ordered by DESIGN.md section 2) is split in
//! two, because part of it must run before routing:
//!
//! 1. [`V2Authentication`], a middleware over every `/v2/...` path, checks
//!    EMPTY_TOKEN → INVALID_TOKEN → TOKEN_NOT_FOUND → TOKEN_DISABLED →
//!    EMPTY_ACCESS → PROJECT_NOT_FOUND and stores the [`Principal`]. Routing
//!    (NOT_FOUND for unknown v2 paths and wrong methods) happens only after
//!    it, so nobody can enumerate routes without a valid token.
//! 2. The bearer security schemes, one type per permission ([`BalanceToken`],
//!    [`CompleteToken`]), both published as the single `ApplicationToken`
//!    scheme. Each endpoint names the permission it needs by the type of its
//!    auth argument; the checker answers ACCESS_DENIED when the token lacks
//!    it. Endpoint validation runs only after that.
//!
//! Each request reads the token afresh (on SQLite possibly from a cache that
//! is valid only while the database is unchanged, see
//! `db::Reader::one_cached`), so a change made with the command line holds
//! from the very next request.
//!
//! The middleware also hands the endpoint the reader it authenticated with
//! ([`Authenticated`]). For a GET, which only reads, that reader holds one
//! read transaction for the whole request on SQLite (`db::Reader::with_snapshot`):
//! the token and the balance are read from one state of the database. Where
//! every read goes to the database (PostgreSQL, MySQL), a balance request's
//! lookup is read in the token's own statement instead, and handed over with
//! it ([`Authenticated::prefetched`]); the endpoint answers from it only
//! after its own checks, and only for exactly the lookup it validated.

use poem::{
    Endpoint, Middleware, Request, Result,
    http::{Method, header},
};
use poem_openapi::{SecurityScheme, auth::Bearer};

use super::{balance, error::ApiError};
use crate::{
    app::AppState,
    db::Reader,
    service::{
        balances::Prefetched,
        tokens::{self, Permission, Principal},
    },
};

/// What the middleware learned about an authenticated v2 request: who is
/// calling, and the reader it authenticated with, for the endpoint's own
/// reads (see the module docs). One request extension, not two: each insert
/// into a request's extension map costs a hash-map insert and its drop.
#[derive(Clone)]
pub struct Authenticated {
    pub principal: Principal,
    pub reader: Reader,
    /// The balance a balance request's query asks for, read in the token's
    /// statement where reads go to the database (see
    /// `tokens::authenticate`); `None` elsewhere.
    pub prefetched: Option<Prefetched>,
}

/// The middleware of step 1; see the module docs.
pub struct V2Authentication;

impl<E: Endpoint> Middleware<E> for V2Authentication {
    type Output = V2AuthenticationEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        V2AuthenticationEndpoint { inner }
    }
}

pub struct V2AuthenticationEndpoint<E> {
    inner: E,
}

/// True for the paths API v2 owns.
pub fn is_v2_path(path: &str) -> bool {
    path == "/v2" || path.starts_with("/v2/")
}

impl<E: Endpoint> Endpoint for V2AuthenticationEndpoint<E> {
    type Output = E::Output;

    async fn call(&self, mut req: Request) -> Result<Self::Output> {
        if is_v2_path(req.uri().path()) {
            let authenticated = authenticate(&req).await?;
            req.extensions_mut().insert(authenticated);
        }
        self.inner.call(req).await
    }
}

async fn authenticate(req: &Request) -> Result<Authenticated, ApiError> {
    let state = req.data::<AppState>().ok_or_else(ApiError::internal)?;
    // A header that is not valid UTF-8 cannot hold a valid token.
    let header = match req.headers().get(header::AUTHORIZATION) {
        None => None,
        Some(value) => Some(value.to_str().unwrap_or("\u{0}invalid")),
    };
    let token = tokens::bearer_token(header).map_err(ApiError::from)?;
    // A GET only reads; any other method may write and must not hold a
    // read transaction while it does.
    let reader = if req.method() == Method::GET {
        state.reader.with_snapshot().await
    } else {
        state.reader.clone()
    };
    // Where the token is read from the database on every request, a balance
    // request's lookup rides along in the same statement. The query is read
    // here as the endpoint reads it; the endpoint still checks everything
    // itself and uses the row only for exactly the lookup it validated.
    let lookup = if !reader.is_inline() && req.method() == Method::GET {
        balance::requested_lookup(req.uri().path(), req.uri().query())
    } else {
        None
    };
    let (principal, prefetched) = tokens::authenticate(
        &reader,
        &state.token_usage,
        Some(&state.token_reads),
        token,
        lookup,
    )
    .await
    .map_err(ApiError::from)?;
    Ok(Authenticated {
        principal,
        reader,
        prefetched,
    })
}

/// Step 2: the principal of step 1 (or, should the scheme ever be mounted
/// without the middleware, a fresh authentication) must hold `permission`.
async fn authorize(req: &Request, permission: Permission) -> Result<Principal> {
    let principal = match req.extensions().get::<Authenticated>() {
        Some(authenticated) => authenticated.principal,
        None => authenticate(req).await?.principal,
    };
    if principal.may(permission) {
        Ok(principal)
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
/// `payment/order/complete` for POST /v2/payment/order/complete.
///
/// A missing or refused token is answered with 403 (EMPTY_TOKEN,
/// INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED, EMPTY_ACCESS,
/// ACCESS_DENIED) or 404 PROJECT_NOT_FOUND, never 401. In Swagger UI, click
/// Authorize and paste the token alone, without the word Bearer.
#[derive(SecurityScheme)]
#[oai(
    rename = "ApplicationToken",
    ty = "bearer",
    bearer_format = "64 alphanumeric characters",
    checker = "check_balance"
)]
pub struct BalanceToken(pub Principal);

async fn check_balance(req: &Request, _bearer: Bearer) -> Result<Principal> {
    authorize(req, Permission::Balance).await
}

/// Application token: `Authorization: Bearer <64 letters and digits>`.
///
/// Tokens are issued by the operator with `masterpay token create --project ID
/// --name NAME --allow PERMISSIONS`, shown once, and stored only as a SHA-256
/// hash. Each token belongs to one project and carries per-endpoint
/// permissions: `master-account/balance` for GET /v2/master-account/balance,
/// `payment/order/complete` for POST /v2/payment/order/complete.
///
/// A missing or refused token is answered with 403 (EMPTY_TOKEN,
/// INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED, EMPTY_ACCESS,
/// ACCESS_DENIED) or 404 PROJECT_NOT_FOUND, never 401. In Swagger UI, click
/// Authorize and paste the token alone, without the word Bearer.
#[derive(SecurityScheme)]
#[oai(
    rename = "ApplicationToken",
    ty = "bearer",
    bearer_format = "64 alphanumeric characters",
    checker = "check_complete"
)]
pub struct CompleteToken(pub Principal);

async fn check_complete(req: &Request, _bearer: Bearer) -> Result<Principal> {
    authorize(req, Permission::Complete).await
}
