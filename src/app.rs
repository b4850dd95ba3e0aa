//! Assembles the poem application and runs it.
//!
//! [`Application::build`] binds the listener (port 0 picks a free port, which
//! is how the tests run many servers side by side), [`Application::port`]
//! tells which, and [`Application::run_until_stopped`] serves until the
//! shutdown future resolves, then drains in-flight requests within the grace
//! period.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use poem::{
    Endpoint, EndpointExt, IntoEndpoint, IntoResponse, Request, Response, Route, get, handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpAcceptor, TcpListener},
    web::Data,
};
use sea_orm::DatabaseConnection;

use crate::{
    api::{
        self, docs,
        error::json_response,
        middleware::{DrainUnreadBody, RequestContext, RequestTimeout},
        security::{V2Authentication, is_v2_path},
    },
    config::Settings,
    state::AppState,
};

/// The routes of the whole service, with the shared state attached.
///
/// From the outside in: request id, access log and metrics; the request
/// timeout; draining what an answer left of the request body
/// ([`DrainUnreadBody`]); shared data; the JSON catch-all for every error; v2
/// authentication (before routing, see `api::security`); then `/v2` paths to
/// the v2 API's router and every other path to the service's own routes.
pub fn routes(state: AppState, request_timeout: Duration) -> impl poem::Endpoint {
    let v2 = api::v2_service();
    let yaml = v2.spec_yaml();
    let json = v2.spec();
    let metrics = state.metrics.clone();
    let drain = DrainUnreadBody {
        max_body_bytes: state.max_body_bytes,
        body_timeout: state.body_timeout,
    };
    let own = Route::new()
        .at("/healthz", get(healthz))
        .at("/readyz", get(readyz))
        .at("/metrics", get(metrics_text))
        .at(
            "/openapi.json",
            get(SpecDocument::endpoint(json, "application/json")),
        )
        .at(
            "/openapi.yaml",
            get(SpecDocument::endpoint(yaml, "application/yaml")),
        )
        .at("/docs", get(docs::docs_redirect))
        .at("/docs/", get(docs::docs_index))
        .at("/docs/*tail", get(docs::docs_file));
    V2OrOwn {
        v2: v2.into_endpoint().map_to_response(),
        own,
    }
    .with(V2Authentication)
    .catch_all_error(api::error_to_json)
    .data(state)
    .data(docs::swagger_config())
    .with(drain)
    .with(RequestTimeout(request_timeout))
    .with(RequestContext { metrics })
}

/// Sends `/v2` paths, known or not, to the v2 API's router (which answers
/// unknown ones with NOT_FOUND after authentication) and every other path
/// to the service's own routes.
struct V2OrOwn<V, O> {
    v2: V,
    own: O,
}

impl<V, O> Endpoint for V2OrOwn<V, O>
where
    V: Endpoint<Output = Response>,
    O: Endpoint,
{
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        if is_v2_path(req.uri().path()) {
            self.v2.call(req).await
        } else {
            self.own.call(req).await.map(IntoResponse::into_response)
        }
    }
}

/// A fixed document served as is.
struct SpecDocument;

impl SpecDocument {
    fn endpoint(body: String, content_type: &'static str) -> impl poem::Endpoint {
        let body = Arc::new(body);
        poem::endpoint::make_sync(move |_| {
            Response::builder()
                .header(poem::http::header::CONTENT_TYPE, content_type)
                .body(body.as_str().to_owned())
        })
    }
}

/// Liveness: the process answers.
#[handler]
fn healthz() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// Prometheus metrics.
#[handler]
fn metrics_text(state: Data<&AppState>) -> Response {
    Response::builder()
        .header(
            poem::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )
        .body(state.metrics.render(&state.db))
}

/// Readiness: the database answers.
#[handler]
async fn readyz(state: Data<&AppState>) -> Response {
    match state.db.ping().await {
        Ok(()) => json_response(StatusCode::OK, &serde_json::json!({"status": "ready"})),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check: database unreachable");
            api::error::ApiError::service_unavailable().to_response()
        }
    }
    .into_response()
}

/// A bound, ready-to-run server.
pub struct Application {
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
    state: AppState,
    settings: Settings,
}

impl Application {
    /// Binds the listener of `settings` and keeps `db` for the handlers.
    pub async fn build(settings: &Settings, db: DatabaseConnection) -> std::io::Result<Self> {
        let state = AppState::new(db, settings).map_err(std::io::Error::other)?;
        let acceptor = TcpListener::bind(settings.listen.as_str())
            .into_acceptor()
            .await?;
        let local_addr = acceptor
            .local_addr()
            .into_iter()
            .find_map(|addr| addr.as_socket_addr().copied())
            .ok_or_else(|| std::io::Error::other("listener has no socket address"))?;
        Ok(Application {
            acceptor,
            local_addr,
            state,
            settings: settings.clone(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives
    /// in-flight requests up to the grace period to finish.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        poem::Server::new_with_acceptor(self.acceptor)
            .idle_timeout(self.settings.idle_timeout)
            .run_with_graceful_shutdown(
                routes(self.state, self.settings.request_timeout),
                shutdown,
                Some(self.settings.shutdown_grace),
            )
            .await
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
///
/// The handlers are registered by this call, not when the future is first
/// polled: poem polls it beside its accept loop, which may accept and serve
/// a first request before it does, and a SIGTERM in that gap met the
/// default action (the process killed, nothing drained). Call it before the
/// server starts (inside the runtime).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::terminate())
            .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
    };
    async move {
        #[cfg(unix)]
        match signals {
            Ok((mut term, mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = interrupt.recv() => {},
                }
            }
            // No signal handlers (should not happen on unix): Ctrl-C only.
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown signal received; draining in-flight requests");
    }
}
