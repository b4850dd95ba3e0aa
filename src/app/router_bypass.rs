//! v2 operations called without poem-openapi's router, when a request's
//! path and method are exactly an operation's: a performance mechanism that
//! SQLite's balance target needs (docs/performance.md). Everything else goes
//! through the router, and the test below holds both ways to the same
//! answers.

use std::collections::HashMap;

use poem::{Endpoint, IntoResponse, Request, Response, endpoint::BoxEndpoint, http::Method};
use poem_openapi::OpenApi;

use crate::api::{self, security::is_v2_path};

/// Sends a `/v2` request for an operation's exact path and method to that
/// operation, other `/v2` paths to the v2 API's router (which answers
/// unknown ones with NOT_FOUND after authentication), and every other path
/// to the service's own routes.
pub(super) struct V2OrOwn<V, O> {
    pub(super) operations: V2Operations,
    pub(super) v2: V,
    pub(super) own: O,
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
pub(super) struct V2Operations(pub(super) Vec<(String, Method, BoxEndpoint<'static>)>);

impl V2Operations {
    pub(super) fn new() -> V2Operations {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{app::routes_with, config::Settings, state::AppState};
    use poem::http::StatusCode;

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
        let email = "a+b@example.com".parse().unwrap();
        let user = users::create(&db, &Actor::CommandLine, project, &email)
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
            let (_, value) =
                tokens::create(&db, &Actor::CommandLine, project, "t", None, allow, None)
                    .await
                    .unwrap();
            bearers.push(Some(format!("Bearer {}", value.expose())));
        }
        // Completed once beforehand: every later completion of it is 409.
        let done = orders::OrderRequest {
            project_id: project,
            who: users::UserRef::Id(user),
            server_id: 0,
            amount: Money::from_cents(500).unwrap(),
            payment_system: "cstm:paygate".parse().unwrap(),
            order_id: Some("Order:ABCDEFGH".parse().unwrap()),
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
        orders::create(&db, &*state.store, &keyed, Some(&"key-1".parse().unwrap()))
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
