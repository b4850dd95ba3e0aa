//! The administration panel: HTML pages served on a listener of their own
//! (`admin_listen`), over the same `service` functions the command line
//! calls, so the panel and the command line share every operation.
//!
//! Plain HTML forms, POST-redirect-GET, no build step: pages are written
//! with `maud` (escaped by construction), styled by one stylesheet, with
//! one small script for the copy button and confirmations; all three come
//! from the binary. Each page module adds its routes (full paths) and
//! holds their handlers, and imports no other page: the guards (session,
//! CSRF, origin) are `session`'s, the frame and answers `page`'s, the
//! markup pages share `components`', what forms and filters send `form`'s.
//! Every answer carries a Content-Security-Policy allowing only the panel's
//! own files, `Cache-Control: no-store`, and no referrer (a sign-in link's
//! secret is in its path).

mod account;
mod admins;
mod audit_log;
mod components;
mod csv_export;
mod events;
mod form;
mod ledger;
mod orders;
mod overview;
mod page;
mod projects;
mod session;
mod sign_in;
mod tokens;
mod users;
mod webhooks;

/// What the pages use most, imported whole by each.
mod prelude {
    pub(super) use super::{
        Answer, PanelError, PanelState,
        components::{self as c, Blank, Column, FieldAttrs, Listing},
        form::{DeleteForm, FieldErrors, NameForm, PageForms, PageQuery, Search, Toggle},
        page,
        session::{PostForm, SignedIn},
    };
    pub(super) use crate::service::keyset::{Keyset, Listed};
    pub(super) use maud::{Markup, html};
    pub(super) use poem::{Route, get, handler, post, web::Path};
    pub(super) use serde::{Deserialize, Serialize};
}

use std::{sync::Arc, time::Instant};

use poem::{
    Endpoint, EndpointExt, IntoResponse, Request, Response, Route, get,
    http::{StatusCode, header},
    middleware::{CookieJarManager, SetHeader},
    post,
};
use sea_orm::{DatabaseConnection, DbErr};

/// What the panel's handlers share.
#[derive(Clone)]
pub struct PanelState {
    pub db: DatabaseConnection,
    /// Whether cookies are Secure (the panel is behind TLS).
    pub cookie_secure: bool,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The service's metrics (sign-in outcomes).
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// The store an operator's completion goes through, as the API's does.
    pub store: std::sync::Arc<dyn crate::store::Store>,
    /// The key new webhook secrets are sealed with (`None`: kept in clear).
    pub webhook_secret_key: Option<crate::config::WebhookSecretKey>,
    /// `webhook_retention_days`, which the ledger audit's events check
    /// reads.
    pub webhook_retention_days: u32,
    /// Where webhook endpoints may lead, checked when one is set.
    pub webhook_destinations: crate::service::webhook_destination::Destinations,
}

impl PanelState {
    fn of(req: &Request) -> Result<&PanelState, PanelError> {
        req.data::<PanelState>()
            .ok_or(PanelError::Internal("panel state missing"))
    }
}

/// What a handler answers: a page, a redirect or a download, or why not.
pub type Answer = Result<Response, PanelError>;

/// Why a panel request failed; each becomes a page of its own.
#[derive(Debug, thiserror::Error)]
pub enum PanelError {
    /// Off to the sign-in page, which then goes on to the page `next`
    /// (a page's path and query) when there is one.
    #[error("sign in first")]
    SignInRequired { next: Option<String> },
    #[error("{0}")]
    Forbidden(&'static str),
    /// A request no page of the panel sends.
    #[error("{0}")]
    BadRequest(String),
    #[error("{0} not found")]
    NotFound(String),
    /// A change the rules refused where no form field is to blame.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Internal(&'static str),
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl From<crate::service::AdminError> for PanelError {
    fn from(err: crate::service::AdminError) -> PanelError {
        use crate::service::AdminError;
        match err {
            AdminError::NotFound(what, id) => PanelError::NotFound(format!("{what} {id}")),
            AdminError::Db(err) => PanelError::Db(err),
            AdminError::Invalid(_, message) | AdminError::Conflict(_, message) => {
                PanelError::Refused(message)
            }
        }
    }
}

impl IntoResponse for PanelError {
    fn into_response(self) -> Response {
        let (status, title, text) = match &self {
            PanelError::SignInRequired { next } => {
                let to = match next {
                    Some(next) => format!(
                        "/sign-in?{}",
                        form_urlencoded::Serializer::new(String::new())
                            .append_pair("next", next)
                            .finish()
                    ),
                    None => "/sign-in".to_owned(),
                };
                return page::redirect(&to);
            }
            PanelError::Forbidden(text) => (StatusCode::FORBIDDEN, "Refused", (*text).to_owned()),
            PanelError::BadRequest(text) => (
                StatusCode::BAD_REQUEST,
                "Bad request",
                format!("{text} Nothing was changed."),
            ),
            PanelError::Refused(message) => (
                StatusCode::CONFLICT,
                "Refused",
                format!("{message}. Nothing was changed."),
            ),
            PanelError::NotFound(what) => (
                StatusCode::NOT_FOUND,
                "Not found",
                format!("{what} does not exist."),
            ),
            PanelError::Internal(_) | PanelError::Db(_) | PanelError::Store(_) => {
                tracing::error!(error = %self, "panel request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The request failed and changed nothing. Try again; the server log has the details."
                        .to_owned(),
                )
            }
        };
        page::bare(status, title, &text)
    }
}

impl From<PanelError> for poem::Error {
    fn from(err: PanelError) -> poem::Error {
        poem::Error::from_response(err.into_response())
    }
}

/// The Content-Security-Policy of every answer: the panel's own files only,
/// no inline script or style, no framing, forms posting only to the panel.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The panel's routes, with its state and security headers.
pub fn routes(state: PanelState) -> impl Endpoint {
    tokio::task::spawn_blocking(crate::service::admins::prepare_unknown_name_check);
    let pages = [
        account::routes,
        admins::routes,
        projects::routes,
        tokens::routes,
        users::routes,
        orders::routes,
        ledger::routes,
        audit_log::routes,
        webhooks::routes,
        events::routes,
    ]
    .into_iter()
    .fold(Route::new(), |route, add| add(route));
    pages
        .at("/", get(overview::show))
        .at("/sign-in", get(sign_in::show).post(sign_in::submit))
        .at("/sign-in/link/:secret", get(sign_in::link_form))
        .at("/sign-in/link", post(sign_in::link_submit))
        .at("/sign-out", post(sign_in::sign_out))
        .at("/assets/panel.css", get(page::stylesheet))
        .at("/assets/panel.js", get(page::script))
        .catch_error(|_: poem::error::NotFoundError| async { no_such_page() })
        // An id that is not a number (`/tokens/abc`) names nothing either.
        .catch_error(|_: poem::error::ParsePathError| async { no_such_page() })
        .data(state)
        // Errors (a redirect to the sign-in page, a refused form) become
        // answers here, so that they too get the headers below.
        .catch_all_error(|err: poem::Error| async move { err.into_response() })
        // Cookies set or deleted by a request's handlers (session, flash)
        // become its answer's `Set-Cookie`, errors' answers included.
        .with(CookieJarManager::new())
        .around(access_log)
        .with(
            SetHeader::new()
                .overriding(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY)
                .overriding(header::CACHE_CONTROL, "no-store")
                .overriding(header::REFERRER_POLICY, "no-referrer")
                .overriding(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
                .overriding(header::X_FRAME_OPTIONS, "DENY"),
        )
}

fn no_such_page() -> Response {
    PanelError::NotFound("This page".to_owned()).into_response()
}

/// One log line per panel request: method, path (a sign-in link's secret
/// left out), status and duration; never a cookie or a form value.
async fn access_log<E: Endpoint>(next: Arc<E>, req: Request) -> poem::Result<Response> {
    let method = req.method().clone();
    let path = match req.uri().path() {
        link if link.starts_with("/sign-in/link/") => "/sign-in/link/[redacted]".to_owned(),
        path => path.to_owned(),
    };
    let started = Instant::now();
    let response = match next.call(req).await {
        Ok(output) => output.into_response(),
        Err(err) => err.into_response(),
    };
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "panel request"
    );
    Ok(response)
}
