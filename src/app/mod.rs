//! Assembles the poem application and runs it.
//!
//! [`Application::build`] binds the API's listener, the administration
//! panel's and the Prometheus metrics' (port 0 picks a free port, which is
//! how the tests run many servers side by side), [`Application::port`],
//! [`Application::panel_addr`] and [`Application::metrics_addr`] tell which,
//! and [`Application::run_until_stopped`] serves them, with the webhook
//! relay and the webhook retention task beside them, until the shutdown
//! future resolves, then drains in-flight requests within the grace period.
//! Each listener serves only its own routes: the panel's answers no `/v2`
//! request, the API's no panel page and no metrics. The metrics have no
//! authentication, so they stay off the API's listener, which faces the
//! callers; the metrics' listens on loopback unless told otherwise.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use poem::{
    EndpointExt, IntoEndpoint, Response, Route, get, handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpAcceptor, TcpListener},
    web::Data,
};
use sea_orm::DatabaseConnection;

use crate::{
    api::{
        self, docs,
        error::json_response,
        middleware::{self, drain_unread_body, request_context},
        security::v2_authentication,
    },
    config::Settings,
    panel::{self, PanelState},
    relay::Relay,
    service::{
        webhook_destination::{DestinationPolicy, Destinations, Resolver},
        webhook_events,
    },
    state::AppState,
    store::{Readiness, Store, database},
};

mod router_bypass;

use router_bypass::{V2Operations, V2OrOwn};

/// The routes of the whole service, with the shared state attached.
///
/// From the outside in: request id, access log and metrics; the request
/// timeout; draining what an answer left of the request body
/// ([`drain_unread_body`]); shared data; the JSON catch-all for every error; v2
/// authentication (before routing, see `api::security`); then the v2
/// operations themselves for their exact paths and methods (see
/// [`V2Operations`]), the v2 API's router for other `/v2` paths, and the
/// service's own routes for the rest.
pub fn routes(state: AppState, request_timeout: Duration) -> impl poem::Endpoint {
    routes_with(state, request_timeout, V2Operations::new())
}

/// [`routes`] with the v2 operations called without poem-openapi's router
/// (all of them, or none to compare with the router's answers in tests).
fn routes_with(
    state: AppState,
    request_timeout: Duration,
    operations: V2Operations,
) -> impl poem::Endpoint {
    let v2 = api::v2_service();
    let yaml = api::openapi_yaml();
    let json = api::openapi_json();
    let metrics = state.metrics.clone();
    let (max_body_bytes, body_timeout) = (state.max_body_bytes, state.body_timeout);
    let own = Route::new()
        .at("/healthz", get(healthz))
        .at("/readyz", get(readyz))
        .at(
            "/openapi.json",
            get(spec_document(json, "application/json")),
        )
        .at(
            "/openapi.yaml",
            get(spec_document(yaml, "application/yaml")),
        )
        .at("/docs", get(docs::docs_redirect))
        .at("/docs/", get(docs::docs_index))
        .at("/docs/*tail", get(docs::docs_file));
    V2OrOwn {
        operations,
        v2: v2.into_endpoint().map_to_response(),
        own,
    }
    .around(v2_authentication)
    .catch_all_error(api::error_to_json)
    .data(state)
    .data(docs::swagger_config())
    .around(move |inner, req| drain_unread_body(inner, req, max_body_bytes, body_timeout))
    .around(move |inner, req| middleware::request_timeout(inner, req, request_timeout))
    .around(move |inner, req| request_context(inner, req, metrics.clone()))
}

/// A fixed document served as is.
fn spec_document(body: String, content_type: &'static str) -> impl poem::Endpoint {
    let body = Arc::new(body);
    poem::endpoint::make_sync(move |_| {
        Response::builder()
            .header(poem::http::header::CONTENT_TYPE, content_type)
            .body(body.as_str().to_owned())
    })
}

/// Liveness: the process answers.
#[handler]
fn healthz() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// The metrics' listener: `/metrics` alone, answered without counting it.
fn metrics_routes(state: AppState) -> impl poem::Endpoint {
    Route::new().at("/metrics", get(metrics_text)).data(state)
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

/// Readiness: the database answers and accepts writes (the store's check,
/// kept for a second; see `store::readiness`).
#[handler]
async fn readyz(state: Data<&AppState>) -> Response {
    match state.store.readiness().await {
        Readiness::Ready => json_response(StatusCode::OK, &serde_json::json!({"status": "ready"})),
        Readiness::NotReady(reason) => {
            tracing::warn!(reason, "readiness check: not ready");
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({"status": "not_ready", "reason": reason}),
            )
        }
    }
}

/// A bound, ready-to-run server: the API's listener and, unless they are
/// off, the administration panel's and the metrics'.
pub struct Application {
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
    panel: Option<(TcpAcceptor, SocketAddr)>,
    metrics: Option<(TcpAcceptor, SocketAddr)>,
    state: AppState,
    settings: Settings,
    /// How the webhook relay resolves endpoints' names.
    webhook_resolver: Resolver,
    /// The store the webhook relay claims and records on.
    relay_store: Arc<dyn Store>,
}

/// Binds `address` (port 0 picks a free port) and tells which address it got.
async fn bind(address: &str) -> std::io::Result<(TcpAcceptor, SocketAddr)> {
    let acceptor = TcpListener::bind(address).into_acceptor().await?;
    let local_addr = acceptor
        .local_addr()
        .into_iter()
        .find_map(|addr| addr.as_socket_addr().copied())
        .ok_or_else(|| std::io::Error::other("listener has no socket address"))?;
    Ok((acceptor, local_addr))
}

impl Application {
    /// Binds the listener of `settings` and keeps `db` for the handlers.
    pub async fn build(settings: &Settings, db: DatabaseConnection) -> std::io::Result<Self> {
        let state = AppState::new(db, settings).map_err(std::io::Error::other)?;
        let relay_store = if settings.webhooks.relay_concurrency == 0 {
            Arc::clone(&state.store)
        } else {
            database::relay_store(
                &state.store,
                &state.db,
                &settings.database_url,
                &settings.pool,
                settings.webhooks.db_connections,
                state.metrics.clone(),
            )
            .await
            .map_err(std::io::Error::other)?
        };
        let (acceptor, local_addr) = bind(&settings.listen).await.map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot listen on {}: {err}", settings.listen),
            )
        })?;
        let panel = match &settings.admin_listen {
            Some(address) => Some(bind(address).await.map_err(|err| {
                std::io::Error::new(
                    err.kind(),
                    format!("cannot listen on {address} (admin_listen; `off` turns the panel off): {err}"),
                )
            })?),
            None => None,
        };
        let metrics = match &settings.metrics_listen {
            Some(address) => Some(bind(address).await.map_err(|err| {
                std::io::Error::new(
                    err.kind(),
                    format!("cannot listen on {address} (metrics_listen; `off` turns the metrics' listener off): {err}"),
                )
            })?),
            None => None,
        };
        Ok(Application {
            acceptor,
            local_addr,
            panel,
            metrics,
            state,
            settings: settings.clone(),
            webhook_resolver: Resolver::default(),
            relay_store,
        })
    }

    /// Resolves the names of webhook endpoints with `resolver` instead of
    /// the system's (tests point names where they want).
    pub fn set_webhook_resolver(&mut self, resolver: Resolver) {
        self.webhook_resolver = resolver;
    }

    /// Where the administration panel listens, unless it is off.
    pub fn panel_addr(&self) -> Option<SocketAddr> {
        self.panel.as_ref().map(|(_, addr)| *addr)
    }

    /// Where the Prometheus metrics are served, unless their listener is
    /// off.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, addr)| *addr)
    }

    /// The store the application's requests go through.
    pub fn store(&self) -> &dyn crate::store::Store {
        &*self.state.store
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    /// Serves until `shutdown` resolves, then stops accepting on every
    /// listener and gives in-flight requests up to the grace period to
    /// finish. The webhook relay runs beside them, and its sends in flight
    /// get the same grace.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        // Ends with the process; a batch cut short is whole or undone.
        let retention = tokio::spawn(webhook_events::retain(
            self.state.db.clone(),
            self.settings.webhook_retention_days,
        ));
        let grace = Some(self.settings.shutdown_grace);
        let webhook_destinations = Destinations {
            policy: DestinationPolicy::of(&self.settings.webhooks),
            lookup: self.webhook_resolver.clone(),
        };
        let relay = Relay::new(
            self.relay_store,
            &self.settings,
            self.webhook_resolver,
            Arc::clone(&self.state.metrics),
        )
        .map_err(std::io::Error::other)?
        .run(until_stopped(), self.settings.shutdown_grace);
        let panel = self.panel.map(|(acceptor, _)| {
            let routes = panel::routes(PanelState {
                db: self.state.db.clone(),
                cookie_secure: self.settings.admin_cookie_secure,
                trusted_proxies: self.settings.admin_trusted_proxies.clone(),
                metrics: Arc::clone(&self.state.metrics),
                store: Arc::clone(&self.state.store),
                webhook_secret_key: self.settings.webhook_secret_key.clone(),
                webhook_retention_days: self.settings.webhook_retention_days,
                webhook_destinations,
            });
            poem::Server::new_with_acceptor(acceptor)
                .idle_timeout(self.settings.idle_timeout)
                .run_with_graceful_shutdown(routes, until_stopped(), grace)
        });
        let metrics = self.metrics.map(|(acceptor, _)| {
            poem::Server::new_with_acceptor(acceptor)
                .idle_timeout(self.settings.idle_timeout)
                .run_with_graceful_shutdown(
                    metrics_routes(self.state.clone()),
                    until_stopped(),
                    grace,
                )
        });
        let api = poem::Server::new_with_acceptor(self.acceptor)
            .idle_timeout(self.settings.idle_timeout)
            .run_with_graceful_shutdown(
                routes(self.state, self.settings.request_timeout),
                until_stopped(),
                grace,
            );
        let servers = async move {
            tokio::try_join!(api, unless_off(panel), unless_off(metrics)).map(|_| ())
        };
        let (served, ()) = tokio::join!(servers, relay);
        retention.abort();
        served
    }
}

/// Runs the server `server` unless its listener is off.
async fn unless_off(
    server: Option<impl Future<Output = std::io::Result<()>>>,
) -> std::io::Result<()> {
    match server {
        Some(server) => server.await,
        None => Ok(()),
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
