//! Assembles the poem application and runs it.
//!
//! [`Application::build`] binds the API's listener and the administration
//! panel's (port 0 picks a free port, which is how the tests run many
//! servers side by side), [`Application::port`] and
//! [`Application::panel_addr`] tell which, and
//! [`Application::run_until_stopped`] serves both until the shutdown future
//! resolves, then drains in-flight requests within the grace period. Each
//! listener serves only its own routes: the panel's answers no `/v2`
//! request, the API's no panel page.

use std::{collections::HashMap, future::Future, net::SocketAddr, sync::Arc, time::Duration};

use poem::{
    Endpoint, EndpointExt, IntoEndpoint, IntoResponse, Request, Response, Route,
    endpoint::BoxEndpoint,
    get, handler,
    http::{Method, StatusCode},
    listener::{Acceptor, Listener, TcpAcceptor, TcpListener},
    web::Data,
};
use poem_openapi::OpenApi;
use sea_orm::DatabaseConnection;

use crate::{
    api::{
        self, docs,
        error::json_response,
        middleware::{DrainUnreadBody, RequestContext, RequestTimeout},
        security::{V2Authentication, is_v2_path},
    },
    config::Settings,
    panel::{self, PanelState},
    state::AppState,
};

/// The routes of the whole service, with the shared state attached.
///
/// From the outside in: request id, access log and metrics; the request
/// timeout; draining what an answer left of the request body
/// ([`DrainUnreadBody`]); shared data; the JSON catch-all for every error; v2
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
        operations,
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

/// Sends a `/v2` request for an operation's exact path and method to that
/// operation, other `/v2` paths to the v2 API's router (which answers
/// unknown ones with NOT_FOUND after authentication), and every other path
/// to the service's own routes.
struct V2OrOwn<V, O> {
    operations: V2Operations,
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
            match self.operations.find(&req) {
                Some(operation) => operation.call(req).await,
                None => self.v2.call(req).await,
            }
        } else {
            self.own.call(req).await.map(IntoResponse::into_response)
        }
    }
}

/// The v2 operations with a fixed path, by path and method: the very
/// endpoints poem-openapi generates from the annotated structs (parameter
/// parsing, security scheme, response), taken with its public
/// `OpenApi::add_routes` and called without its router around them. That
/// router (radix tree, method table, the query string split through serde,
/// boxed futures moved from layer to layer) is work /healthz does not pay,
/// and SQLite's balance target, set against /healthz, needs it gone
/// (docs/performance.md). The operations'
/// extractors read everything from the request itself (`api::params`,
/// `api::security`), so the router adds nothing they need. A request whose
/// path or method is not listed (HEAD, unknown paths, wrong methods) goes
/// through the router, so every answer is the one poem-openapi would give
/// (`tests::v2_answers_are_the_routers` compares them).
struct V2Operations(Vec<(String, Method, BoxEndpoint<'static>)>);

impl V2Operations {
    fn new() -> V2Operations {
        let mut table = HashMap::new();
        api::v2_operations().add_routes(&mut table);
        V2Operations(
            table
                .into_iter()
                .filter(|(path, _)| !path.contains([':', '*', '<']))
                .flat_map(|(path, methods)| {
                    methods
                        .into_iter()
                        .map(move |(method, endpoint)| (path.clone(), method, endpoint))
                })
                .collect(),
        )
    }

    fn find(&self, req: &Request) -> Option<&BoxEndpoint<'static>> {
        let path = req.uri().path();
        self.0
            .iter()
            .find(|(p, m, _)| p == path && m == req.method())
            .map(|(_, _, endpoint)| endpoint)
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

/// A bound, ready-to-run server: the API's listener and, unless it is off,
/// the administration panel's.
pub struct Application {
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
    panel: Option<(TcpAcceptor, SocketAddr)>,
    state: AppState,
    settings: Settings,
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
        Ok(Application {
            acceptor,
            local_addr,
            panel,
            state,
            settings: settings.clone(),
        })
    }

    /// Where the administration panel listens, unless it is off.
    pub fn panel_addr(&self) -> Option<SocketAddr> {
        self.panel.as_ref().map(|(_, addr)| *addr)
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

    /// Serves until `shutdown` resolves, then stops accepting on both
    /// listeners and gives in-flight requests up to the grace period to
    /// finish.
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
        let grace = Some(self.settings.shutdown_grace);
        let panel = self.panel.map(|(acceptor, _)| {
            let routes = panel::routes(PanelState {
                db: self.state.db.clone(),
                cookie_secure: self.settings.admin_cookie_secure,
                trusted_proxies: self.settings.admin_trusted_proxies.clone(),
                metrics: Arc::clone(&self.state.metrics),
                store: Arc::clone(&self.state.store),
            });
            poem::Server::new_with_acceptor(acceptor)
                .idle_timeout(self.settings.idle_timeout)
                .run_with_graceful_shutdown(routes, until_stopped(), grace)
        });
        let api = poem::Server::new_with_acceptor(self.acceptor)
            .idle_timeout(self.settings.idle_timeout)
            .run_with_graceful_shutdown(
                routes(self.state, self.settings.request_timeout),
                until_stopped(),
                grace,
            );
        match panel {
            Some(panel) => tokio::try_join!(api, panel).map(|_| ()),
            None => api.await,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of the contract takes the direct way; anything else
    /// (HEAD, another method, another path) the router's.
    #[test]
    fn v2_operations_are_dispatched_directly() {
        let operations = V2Operations::new();
        let listed = |method: Method, uri: &str| {
            operations
                .find(&Request::builder().method(method).uri_str(uri).finish())
                .is_some()
        };
        assert_eq!(operations.0.len(), 6);
        assert!(listed(Method::GET, "/v2/master-account/balance?user_id=1"));
        assert!(listed(Method::GET, "/v2/master-account/operations"));
        assert!(listed(Method::POST, "/v2/payment/order/create"));
        assert!(listed(Method::GET, "/v2/payment/order?order_id=x"));
        assert!(listed(Method::POST, "/v2/payment/order/complete"));
        assert!(listed(Method::POST, "/v2/payment/order/cancel"));
        assert!(!listed(Method::GET, "/v2/payment/order/"));
        assert!(!listed(Method::HEAD, "/v2/master-account/balance"));
        assert!(!listed(Method::POST, "/v2/master-account/balance"));
        assert!(!listed(Method::GET, "/v2/master-account/balance/"));
        assert!(!listed(Method::GET, "/v2/master-account"));
    }

    /// Through the direct way or through poem-openapi's router, every v2
    /// request gets the same answer: status, headers (but the request id)
    /// and body; on a real SQLite database, with tokens of every kind.
    #[tokio::test]
    async fn v2_answers_are_the_routers() {
        use crate::{
            money::Money,
            service::{
                admin_audit::Actor,
                balances, orders, projects, servers,
                tokens::{self, Permission},
                users,
            },
            store::database,
        };
        use poem::http::header;

        let dir = tempfile::tempdir().expect("temporary directory");
        let settings = Settings {
            database_url: format!("sqlite://{}", dir.path().join("app.db").display()),
            ..Settings::default()
        };
        let db = database::connect(&settings.database_url, &settings.pool)
            .await
            .expect("connect");
        database::migrate(&db).await.expect("migrate");
        let project = projects::create(&db, &Actor::CommandLine, "shop")
            .await
            .unwrap()
            .id;
        let user = users::create(&db, &Actor::CommandLine, project, "a+b@example.com")
            .await
            .unwrap()
            .id;
        let server = servers::create(&db, &Actor::CommandLine, project, "s1")
            .await
            .unwrap()
            .id;
        let cents = |c| Some(Money::from_cents(c).unwrap());
        balances::set(
            &db,
            &Actor::CommandLine,
            user,
            None,
            cents(1_000),
            cents(100),
            "test",
        )
        .await
        .unwrap();
        balances::set(
            &db,
            &Actor::CommandLine,
            user,
            Some(server),
            cents(2_000),
            None,
            "test",
        )
        .await
        .unwrap();
        let mut bearers = vec![None, Some(format!("Bearer {}", "x".repeat(64)))];
        for allow in [
            &Permission::ALL[..],
            &[Permission::Balance, Permission::Complete],
            &[Permission::Balance],
            &[Permission::Complete],
        ] {
            let (_, value) = tokens::create(&db, &Actor::CommandLine, project, "t", None, allow)
                .await
                .unwrap();
            bearers.push(Some(format!("Bearer {}", value.expose())));
        }
        // Completed once beforehand: every later completion of it is 409.
        let done = orders::OrderRequest {
            project_id: project,
            who: users::UserRef {
                user_id: Some(user),
                email: None,
            },
            server_id: 0,
            amount: Money::from_cents(500).unwrap(),
            payment_system: "cstm:paygate".into(),
            order_id: Some("Order:ABCDEFGH".into()),
        };
        let state = AppState::new(db.clone(), &settings).expect("state");
        orders::create(&db, &*state.store, &done, None)
            .await
            .unwrap();
        // Created beforehand with a key: a repeat replays it, both ways alike.
        let keyed = orders::OrderRequest {
            order_id: None,
            ..done.clone()
        };
        orders::create(&db, &*state.store, &keyed, Some("key-1"))
            .await
            .unwrap();
        let once = orders::Completion {
            project_id: project,
            order_id: "Order:ABCDEFGH".into(),
            payment_system: "cstm:paygate".into(),
            payment_id: None,
            audit: None,
        };
        orders::complete(&db, &*state.store, &once).await.unwrap();
        let timeout = settings.request_timeout;
        let direct = routes_with(state.clone(), timeout, V2Operations::new());
        assert_eq!(V2Operations::new().0.len(), 6);
        let router = routes_with(state, timeout, V2Operations(Vec::new()));

        let completion = |order: &str| {
            format!(r#"{{"payment_system":"cstm:paygate","order_id":"{order}","payment_id":"p1"}}"#)
        };
        // Method, URI, Content-Type, body, Idempotency-Key.
        type Sent<'a> = (Method, String, Option<&'a str>, String, Option<&'a str>);
        let mut requests: Vec<Sent> = Vec::new();
        for query in [
            String::new(),
            format!("server_id=0&user_id={user}"),
            format!("server_id={server}&user_id={user}"),
            "server_id=0&email=a%2Bb%40example.com".into(),
            "server_id=0&email=a+b@example.com".into(),
            format!("server_id=0&user_id=+{user}+&&=&x"),
            format!("server_id=0&user_id={user}&user_id=999"),
            "server_id=%FF&user_id=%".into(),
            "%73erver_id=0&user_id=1".into(),
            "server_id=0&user_id=999999".into(),
        ] {
            for method in [Method::GET, Method::HEAD, Method::POST] {
                let uri = format!("/v2/master-account/balance?{query}");
                requests.push((method, uri, None, String::new(), None));
            }
        }
        for query in [
            format!("user_id={user}"),
            format!("user_id={user}&server_id={server}&limit=1"),
            "email=a%2Bb%40example.com&limit=0&cursor=zz".into(),
            "user_id=999999".into(),
        ] {
            let uri = format!("/v2/master-account/operations?{query}");
            requests.push((Method::GET, uri, None, String::new(), None));
        }
        for query in [
            "order_id=Order:ABCDEFGH",
            "order_id=Order:MISSING1",
            "order_id=x",
            "",
        ] {
            let uri = format!("/v2/payment/order?{query}");
            requests.push((Method::GET, uri, None, String::new(), None));
        }
        let creation = format!(
            r#"{{"user_id":{user},"server_id":0,"amount":"5","payment_system":"cstm:paygate"}}"#
        );
        for (body, key) in [
            (creation.clone(), Some("key-1")),
            (creation.replace(r#""5""#, r#""6""#), Some("key-1")),
            (creation.replace("0,", "999999,"), None),
            (r#"{"amount":1e3,"extra":true}"#.into(), Some("two words")),
        ] {
            let uri = "/v2/payment/order/create".to_owned();
            requests.push((Method::POST, uri, Some("application/json"), body, key));
        }
        for body in [
            r#"{"order_id":"Order:ABCDEFGH","payment_system":"cstm:paygate"}"#,
            r#"{"order_id":"Order:MISSING1","payment_system":"cstm:paygate"}"#,
            r#"{"order_id":"x"}"#,
        ] {
            let uri = "/v2/payment/order/cancel".to_owned();
            requests.push((
                Method::POST,
                uri,
                Some("application/json"),
                body.into(),
                None,
            ));
        }
        for (content_type, body) in [
            (Some("application/json"), completion("Order:ABCDEFGH")),
            (Some("application/json"), completion("Order:MISSING1")),
            (Some("application/json"), r#"{"payment_system":1}"#.into()),
            (Some("application/json"), "not json".into()),
            (Some("text/plain"), completion("Order:ABCDEFGH")),
            (None, "{}".into()),
        ] {
            for method in [Method::POST, Method::GET] {
                let uri = "/v2/payment/order/complete?a=%FF".to_owned();
                requests.push((method, uri, content_type, body.clone(), None));
            }
        }
        let answer = |response: Response| async move {
            let status = response.status();
            let mut headers: Vec<String> = response
                .headers()
                .iter()
                .filter(|(name, _)| **name != crate::api::middleware::REQUEST_ID)
                .map(|(name, value)| format!("{name}: {value:?}"))
                .collect();
            headers.sort();
            let body = response.into_body().into_bytes().await.expect("body");
            (status, headers, body)
        };
        let (mut completed, mut replayed) = (0, 0);
        for bearer in &bearers {
            for (method, uri, content_type, body, key) in &requests {
                let request = || {
                    let mut builder = Request::builder().method(method.clone()).uri_str(uri);
                    if let Some(bearer) = bearer {
                        builder = builder.header(header::AUTHORIZATION, bearer);
                    }
                    if let Some(key) = key {
                        builder = builder.header("idempotency-key", *key);
                    }
                    if let Some(content_type) = content_type {
                        builder = builder.header(header::CONTENT_TYPE, *content_type);
                    }
                    builder.body(body.clone())
                };
                let direct = answer(direct.get_response(request()).await).await;
                let router = answer(router.get_response(request()).await).await;
                assert_eq!(direct, router, "{method} {uri} {bearer:?} {body}");
                completed += usize::from(direct.0 == StatusCode::CONFLICT);
                replayed += usize::from(direct.0 == StatusCode::CREATED);
            }
        }
        // The 409s came from the service's rules, not from an early refusal,
        // and the replays (the only creations that answer alike twice) ran.
        assert!(completed > 0);
        assert!(replayed > 0);
    }
}
