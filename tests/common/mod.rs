//! Test harness: every test gets a fresh database of its own and a real
//! server on a free port, on each backend.
//!
//! SQLite always runs. PostgreSQL and MariaDB/MySQL need a server, named by
//! `MASTERPAY_TEST_POSTGRES_URL` / `MASTERPAY_TEST_MYSQL_URL` (`.ci/env.sh`
//! names the local ones); each test creates its own database there and drops
//! it afterwards. Without its URL a backend's tests are reported as ignored
//! (build.rs decides; under CI they run and fail instead).
//! [`on_every_backend!`] turns one test function into one test per backend,
//! so a failure names its backend.

#![allow(dead_code)]

use std::{future::Future, time::Duration};

use masterpay::{
    app::Application,
    config::{PoolSettings, Settings},
    money::Money,
    service::{
        admin_audit::Actor,
        balances, orders, projects, servers,
        tokens::{self, Permission},
        users,
    },
    store::database,
};
use reqwest::Url;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    pub fn env_var(self) -> Option<&'static str> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some("MASTERPAY_TEST_POSTGRES_URL"),
            Backend::MySql => Some("MASTERPAY_TEST_MYSQL_URL"),
        }
    }
}

/// A database created for one test, dropped when this value is dropped.
pub struct TestDatabase {
    pub backend: Backend,
    pub url: String,
    admin_url: Option<String>,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

fn random_suffix() -> String {
    use rand::{Rng, distr::Alphanumeric};
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(12)
        .map(char::from)
        .collect::<String>()
        .to_lowercase()
}

impl TestDatabase {
    /// A fresh, empty database. Panics when the backend's URL is not set:
    /// such tests are built ignored, so this happens only under CI or with
    /// `--ignored`, where a test that did not run must not pass.
    pub async fn create(backend: Backend) -> TestDatabase {
        let Some(var) = backend.env_var() else {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("test.db").display());
            return TestDatabase {
                backend,
                url,
                admin_url: None,
                name: String::new(),
                _dir: Some(dir),
            };
        };
        let admin_url = std::env::var(var)
            .ok()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "{var} is not set: this test needs a {backend:?} server \
                     (`. .ci/env.sh` names the local one)"
                )
            });
        let name = format!("mp_test_{}", random_suffix());
        let admin = Database::connect(admin_url.as_str())
            .await
            .unwrap_or_else(|e| panic!("{var}={admin_url} is unreachable: {e}"));
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        admin.close().await.ok();
        let mut url = Url::parse(&admin_url).expect("valid database URL");
        url.set_path(&format!("/{name}"));
        TestDatabase {
            backend,
            url: url.to_string(),
            admin_url: Some(admin_url),
            name,
            _dir: None,
        }
    }
}

impl TestDatabase {
    /// The database at `url`, on a server of the test's own that goes away
    /// with it: nothing to drop.
    pub fn on_own_server(backend: Backend, url: String) -> TestDatabase {
        TestDatabase {
            backend,
            url,
            admin_url: None,
            name: String::new(),
            _dir: None,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(admin_url) = self.admin_url.clone() else {
            return;
        };
        let (backend, name) = (self.backend, self.name.clone());
        // Drop runs inside the test's runtime, which it blocks until the
        // database is gone; use a runtime of our own. The test's pooled
        // connections may still be open then (on a one-thread runtime the
        // task returning a connection to its pool cannot run while this
        // waits), one of them in a transaction whose locks a plain DROP
        // would wait for: the drop ends them first.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok(admin) = Database::connect(admin_url.as_str()).await else {
                    return;
                };
                if backend == Backend::Postgres {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = admin.execute_unprepared(&sql).await;
                } else {
                    let sessions = format!(
                        "SELECT id FROM information_schema.processlist WHERE db = '{name}'"
                    );
                    let listed = admin
                        .query_all_raw(Statement::from_string(
                            admin.get_database_backend(),
                            sessions,
                        ))
                        .await;
                    for row in listed.unwrap_or_default() {
                        if let Ok(id) = row.try_get_by_index::<i64>(0) {
                            let _ = admin.execute_unprepared(&format!("KILL {id}")).await;
                        }
                    }
                    let sql = format!("DROP DATABASE IF EXISTS {name}");
                    let _ = admin.execute_unprepared(&sql).await;
                }
                let _ = admin.close().await;
            });
        })
        .join();
    }
}

/// Pool settings for tests: small pools so that parallel tests stay well
/// inside the servers' connection limits.
pub fn test_pool() -> PoolSettings {
    PoolSettings {
        max_connections: 10,
        acquire_timeout: Duration::from_secs(10),
        statement_timeout: Duration::from_secs(30),
    }
}

/// A running server on a fresh database, with one active project.
pub struct TestApp {
    pub backend: Backend,
    pub base: String,
    /// The administration panel's address, when the settings turned it on.
    pub panel_base: Option<String>,
    /// The metrics' address (on a free port unless the settings turned it
    /// off).
    pub metrics_base: Option<String>,
    pub db: DatabaseConnection,
    pub client: reqwest::Client,
    pub project_id: i64,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    // Last, so that the database is dropped after the server stopped.
    pub database: TestDatabase,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, |_| {}).await
    }

    /// Like [`TestApp::spawn`], with settings adjusted by `adjust`.
    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        Self::spawn_on(TestDatabase::create(backend).await, adjust).await
    }

    /// Like [`TestApp::spawn_with`], on `database`.
    pub async fn spawn_on(database: TestDatabase, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let backend = database.backend;
        let db = database::connect(&database.url, &test_pool())
            .await
            .expect("connect test database");
        database::migrate(&db).await.expect("migrate test database");
        let settings = Settings {
            database_url: database.url.clone(),
            listen: "127.0.0.1:0".into(),
            admin_listen: None,
            metrics_listen: Some("127.0.0.1:0".into()),
            pool: test_pool(),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            ..Settings::default()
        };
        let mut settings = settings;
        adjust(&mut settings);
        let app = Application::build(&settings, db.clone())
            .await
            .expect("bind test server");
        let base = format!("http://127.0.0.1:{}", app.port());
        let panel_base = app.panel_addr().map(|addr| format!("http://{addr}"));
        let metrics_base = app.metrics_addr().map(|addr| format!("http://{addr}"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        let project = projects::create(&db, &Actor::CommandLine, "Test project")
            .await
            .expect("project");
        TestApp {
            backend,
            base,
            panel_base,
            metrics_base,
            db,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("client"),
            project_id: project.id,
            shutdown: Some(tx),
            server: Some(server),
            database,
        }
    }

    pub fn backend_kind(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    /// A store of the test database, as the service's own.
    pub fn store(&self) -> std::sync::Arc<dyn masterpay::store::Store> {
        database::open_store(
            &self.db,
            &self.database.url,
            &test_pool(),
            std::sync::Arc::new(masterpay::store::Uncounted),
        )
        .expect("store")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    // ---- seeding through the service layer (the same code the CLI runs) ----

    pub async fn user(&self, email: &str) -> i64 {
        let email = email.parse().expect("an e-mail address");
        users::create(&self.db, &Actor::CommandLine, self.project_id, &email)
            .await
            .expect("user")
            .id
    }

    pub async fn user_in(&self, project_id: i64, email: &str) -> i64 {
        let email = email.parse().expect("an e-mail address");
        users::create(&self.db, &Actor::CommandLine, project_id, &email)
            .await
            .expect("user")
            .id
    }

    pub async fn server(&self, name: &str) -> i64 {
        servers::create(&self.db, &Actor::CommandLine, self.project_id, name)
            .await
            .expect("server")
            .id
    }

    pub async fn project(&self, name: &str) -> i64 {
        projects::create(&self.db, &Actor::CommandLine, name)
            .await
            .expect("project")
            .id
    }

    pub async fn set_balance(&self, user: i64, server: Option<i64>, main: &str, bonus: &str) {
        balances::set(
            &self.db,
            &Actor::CommandLine,
            user,
            server,
            Some(main.parse().unwrap()),
            Some(bonus.parse().unwrap()),
            "set by the test",
        )
        .await
        .expect("balance set");
    }

    pub async fn main_balance(&self, user: i64, server: i64) -> Money {
        balances::get(&self.db, user, server)
            .await
            .expect("balance")
            .main
    }

    /// A token of the test project with `permissions`; returns (id, value).
    pub async fn token(&self, permissions: &[Permission]) -> (i64, String) {
        self.token_in(self.project_id, permissions).await
    }

    pub async fn token_in(&self, project_id: i64, permissions: &[Permission]) -> (i64, String) {
        let (info, value) = tokens::create(
            &self.db,
            &Actor::CommandLine,
            project_id,
            "test",
            None,
            permissions,
            None,
        )
        .await
        .expect("token");
        (info.token.id, value.expose().to_owned())
    }

    /// A token with every permission.
    pub async fn full_token(&self) -> String {
        self.token(&Permission::ALL).await.1
    }

    /// A pending order; returns its order id.
    pub async fn order(
        &self,
        user: i64,
        server: Option<i64>,
        amount: &str,
        payment_system: &str,
    ) -> String {
        self.order_in(self.project_id, user, server, amount, payment_system)
            .await
    }

    pub async fn order_in(
        &self,
        project_id: i64,
        user: i64,
        server: Option<i64>,
        amount: &str,
        payment_system: &str,
    ) -> String {
        let request = orders::OrderRequest {
            project_id,
            who: masterpay::service::users::UserRef::Id(user),
            server_id: server.unwrap_or(0),
            amount: amount.parse().unwrap(),
            payment_system: payment_system.parse().unwrap(),
            order_id: None,
        };
        orders::create(&self.db, &*self.store(), &request, None)
            .await
            .expect("order")
            .order
            .order_id
            .into()
    }

    // ---- one typed helper per endpoint ----

    /// GET /v2/master-account/balance with a raw query string.
    pub async fn get_balance(&self, token: Option<&str>, query: &str) -> Reply {
        let mut req = self
            .client
            .get(self.url(&format!("/v2/master-account/balance?{query}")));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::from(req.send().await.expect("request")).await
    }

    /// POST /v2/payment/order/complete with a JSON body.
    pub async fn complete(&self, token: Option<&str>, body: &Value) -> Reply {
        let mut req = self
            .client
            .post(self.url("/v2/payment/order/complete"))
            .json(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::from(req.send().await.expect("request")).await
    }

    /// Completes `order_id` with `payment_system`.
    pub async fn complete_order(&self, token: &str, order_id: &str, payment_system: &str) -> Reply {
        self.complete(
            Some(token),
            &serde_json::json!({"payment_system": payment_system, "order_id": order_id}),
        )
        .await
    }

    /// Any request, for the framework-level cases.
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        Reply::from(req.send().await.expect("request")).await
    }

    /// Runs SQL on the test database (used to inject failures).
    pub async fn exec(&self, sql: &str) {
        self.db
            .execute_unprepared(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// One number from a query, such as `SELECT COUNT(*) ...`.
    pub async fn count(&self, sql: &str) -> i64 {
        let row = self
            .db
            .query_one_raw(sea_orm::Statement::from_string(self.backend_kind(), sql))
            .await
            .expect("query")
            .expect("one row");
        row.try_get_by_index::<i64>(0).expect("integer")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A response: status, content type and parsed JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub async fn from(res: reqwest::Response) -> Reply {
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = res.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            body,
            text,
        }
    }

    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    /// Asserts the error body's shape with `status` and `code`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "unexpected reply: {} {}",
            self.status,
            self.text
        );
        assert_eq!(self.body["success"], Value::Bool(false), "{}", self.text);
        assert!(
            self.content_type.starts_with("application/json"),
            "content type {:?}",
            self.content_type
        );
    }

    /// Asserts VALIDATION_ERROR naming exactly `fields`.
    #[track_caller]
    pub fn assert_validation(&self, fields: &[&str]) {
        self.assert_error(400, "VALIDATION_ERROR");
        let message = self.body["message"].as_object().expect("message object");
        let mut keys: Vec<&str> = message.keys().map(String::as_str).collect();
        keys.sort();
        let mut want = fields.to_vec();
        want.sort();
        assert_eq!(keys, want, "{}", self.text);
        assert!(
            message
                .values()
                .all(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        );
    }
}

/// Runs `test` on a fresh app of `backend`.
pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: Future<Output = ()>,
{
    test(TestApp::spawn(backend).await).await
}

/// Runs `test` on a fresh app of `backend` whose relay sends nothing, for
/// tests that read deliveries and attempts as the changes recorded them.
pub async fn run_without_relay<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: Future<Output = ()>,
{
    test(TestApp::spawn_with(backend, |s| s.webhooks.relay_concurrency = 0).await).await
}

/// Runs `test` with `backend` alone, for a test that starts its own app.
pub async fn with_backend<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    test(backend).await
}

/// One test per backend for each listed test function, in the modules
/// `sqlite`, `postgres` and `mysql`, so that a failure names its backend.
///
/// `on_every_backend!(a, b)` runs each `async fn(TestApp)` with [`run`] on
/// four worker threads. The general form gives each group of tests its test
/// attribute and its harness, an `async fn(Backend, test)` that builds the
/// test's argument from the backend and runs it (such as [`run`] or
/// [`with_backend`]), named as from the invoking module:
///
/// ```ignore
/// on_every_backend!(
///     #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
///     with_panel: [a, b],
///     #[tokio::test]
///     common::run: [c],
/// );
/// ```
///
/// A PostgreSQL or MariaDB test is ignored when build.rs found no URL for
/// its server.
#[macro_export]
macro_rules! on_every_backend {
    (@backend $module:ident, $backend:ident, #[$ignore:meta],
     $([#[$test:meta] $harness:path: $($name:ident)*])*) => {
        mod $module {
            // The harnesses are named as from the invoking module.
            #[allow(unused_imports)]
            use super::*;
            $($(
                #[$test]
                #[$ignore]
                async fn $name() {
                    $harness($crate::common::Backend::$backend, super::$name).await
                }
            )*)*
        }
    };
    ($(#[$test:meta] $harness:path: [$($name:ident),* $(,)?]),+ $(,)?) => {
        // `any()` never holds: SQLite always runs.
        $crate::on_every_backend!(@backend sqlite, Sqlite, #[cfg_attr(any(), ignore)],
            $([#[$test] $harness: $($name)*])+);
        $crate::on_every_backend!(@backend postgres, Postgres,
            #[cfg_attr(no_postgres_url, ignore = "MASTERPAY_TEST_POSTGRES_URL is not set")],
            $([#[$test] $harness: $($name)*])+);
        $crate::on_every_backend!(@backend mysql, MySql,
            #[cfg_attr(no_mysql_url, ignore = "MASTERPAY_TEST_MYSQL_URL is not set")],
            $([#[$test] $harness: $($name)*])+);
    };
    ($($name:ident),* $(,)?) => {
        $crate::on_every_backend!(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            $crate::common::run: [$($name),*]
        );
    };
}

/// [`on_every_backend!`] for what only a database server has (a network
/// between the service and it, row locks): the tests run on PostgreSQL and
/// MariaDB, and SQLite has none of them rather than a test that passes
/// without running. Their modules are `postgres_server` and `mysql_server`,
/// beside the `postgres` and `mysql` of [`on_every_backend!`].
#[macro_export]
macro_rules! on_server_backends {
    ($($name:ident),* $(,)?) => {
        $crate::on_every_backend!(@backend postgres_server, Postgres,
            #[cfg_attr(no_postgres_url, ignore = "MASTERPAY_TEST_POSTGRES_URL is not set")],
            [#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
             $crate::common::run: $($name)*]);
        $crate::on_every_backend!(@backend mysql_server, MySql,
            #[cfg_attr(no_mysql_url, ignore = "MASTERPAY_TEST_MYSQL_URL is not set")],
            [#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
             $crate::common::run: $($name)*]);
    };
}

/// A `masterpay serve` process of the real binary.
pub struct ServerProcess {
    pub child: std::process::Child,
    pub base: String,
    pub log_path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A free TCP port on 127.0.0.1 (bound, then released for the child).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .unwrap()
        .port()
}

impl ServerProcess {
    /// Starts `masterpay serve` on `database_url` with extra environment, and
    /// waits until /readyz answers 200.
    pub async fn start(database_url: &str, env: &[(&str, &str)]) -> ServerProcess {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let port = free_port();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_masterpay"));
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("MASTERPAY_DATABASE_URL", database_url)
            .env_remove("MASTERPAY_CONFIG")
            .env_remove("MASTERPAY_LISTEN")
            // Many servers run side by side: the panel and the metrics only
            // where asked for.
            .env("MASTERPAY_ADMIN_LISTEN", "off")
            .env("MASTERPAY_METRICS_LISTEN", "off")
            .stdout(std::process::Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn masterpay serve");
        let mut server = ServerProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log_path,
            _dir: dir,
        };
        server.wait_ready().await;
        server
    }

    /// Polls /readyz until it answers 200 (bounded by attempts, not time).
    /// A server that exited (its port taken meanwhile, a bad setting) fails
    /// at once with its log.
    pub async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("server exited with {status}: {}", self.log());
            }
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server never became ready: {}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGKILL: no chance to finish anything.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("wait")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of a database server that a test can cut and
/// restore, to make the database unreachable on demand.
pub struct TcpProxy {
    pub port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: String) -> TcpProxy {
        use std::sync::{
            Arc, Mutex,
            atomic::{AtomicBool, Ordering},
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accept = tokio::spawn({
            let up = up.clone();
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        break;
                    };
                    // Checked and registered under the lock `cut` takes, so
                    // that no connection accepted as it cuts survives it.
                    let mut open = connections.lock().unwrap();
                    if !up.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let target = target.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    open.push(task.abort_handle());
                }
            }
        });
        TcpProxy {
            port,
            up,
            connections,
            accept,
        }
    }

    /// Closes every proxied connection and refuses new ones.
    pub fn cut(&self) {
        let mut open = self.connections.lock().unwrap();
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for c in open.drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// The group sizes a store reports, in the order it ran them.
#[derive(Default)]
pub struct RecordedGroups {
    pub token_reads: std::sync::Mutex<Vec<usize>>,
    pub completions: std::sync::Mutex<Vec<usize>>,
    pub inserts: std::sync::Mutex<Vec<usize>>,
}

impl masterpay::store::GroupSizes for RecordedGroups {
    fn token_reads(&self, size: usize) {
        self.token_reads.lock().unwrap().push(size);
    }

    fn completions(&self, size: usize) {
        self.completions.lock().unwrap().push(size);
    }

    fn inserts(&self, size: usize) {
        self.inserts.lock().unwrap().push(size);
    }
}

impl TestApp {
    /// A store of the test database that records its group sizes.
    pub fn recorded_store(
        &self,
    ) -> (
        std::sync::Arc<dyn masterpay::store::Store>,
        std::sync::Arc<RecordedGroups>,
    ) {
        let groups = std::sync::Arc::new(RecordedGroups::default());
        let store =
            database::open_store(&self.db, &self.database.url, &test_pool(), groups.clone())
                .expect("store");
        (store, groups)
    }
}

/// A reply with the response's headers, for the answers whose headers
/// matter (`Idempotent-Replayed`).
#[derive(Debug, Clone)]
pub struct HeadedReply {
    pub reply: Reply,
    pub headers: reqwest::header::HeaderMap,
}

impl HeadedReply {
    pub async fn from(res: reqwest::Response) -> HeadedReply {
        let headers = res.headers().clone();
        HeadedReply {
            reply: Reply::from(res).await,
            headers,
        }
    }

    /// The value of the header `name`, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl std::ops::Deref for HeadedReply {
    type Target = Reply;

    fn deref(&self) -> &Reply {
        &self.reply
    }
}

impl TestApp {
    // ---- the order's life and the operation history ----

    /// POST /v2/payment/order/create with a JSON body and, when given, an
    /// `Idempotency-Key`.
    pub async fn create_order(
        &self,
        token: Option<&str>,
        idempotency_key: Option<&str>,
        body: &Value,
    ) -> HeadedReply {
        self.create_order_at(&self.base, token, idempotency_key, body)
            .await
    }

    /// [`TestApp::create_order`] sent to the instance at `base` (another
    /// server on the same database).
    pub async fn create_order_at(
        &self,
        base: &str,
        token: Option<&str>,
        idempotency_key: Option<&str>,
        body: &Value,
    ) -> HeadedReply {
        let mut req = self
            .client
            .post(format!("{base}/v2/payment/order/create"))
            .json(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(key) = idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        HeadedReply::from(req.send().await.expect("request")).await
    }

    /// GET /v2/payment/order with a raw query string.
    pub async fn read_order(&self, token: Option<&str>, query: &str) -> Reply {
        let mut req = self
            .client
            .get(self.url(&format!("/v2/payment/order?{query}")));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::from(req.send().await.expect("request")).await
    }

    /// POST /v2/payment/order/cancel with a JSON body.
    pub async fn cancel(&self, token: Option<&str>, body: &Value) -> Reply {
        let mut req = self
            .client
            .post(self.url("/v2/payment/order/cancel"))
            .json(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::from(req.send().await.expect("request")).await
    }

    /// Cancels `order_id` with `payment_system`.
    pub async fn cancel_order(&self, token: &str, order_id: &str, payment_system: &str) -> Reply {
        self.cancel(
            Some(token),
            &serde_json::json!({"order_id": order_id, "payment_system": payment_system}),
        )
        .await
    }

    /// GET /v2/master-account/operations with a raw query string.
    pub async fn get_operations(&self, token: Option<&str>, query: &str) -> Reply {
        let mut req = self
            .client
            .get(self.url(&format!("/v2/master-account/operations?{query}")));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        Reply::from(req.send().await.expect("request")).await
    }
}

impl TestApp {
    /// A server of the project `project_id`; returns its id.
    pub async fn server_in(&self, project_id: i64, name: &str) -> i64 {
        servers::create(&self.db, &Actor::CommandLine, project_id, name)
            .await
            .expect("server")
            .id
    }
}

/// A store opened as the application opens it (`database::open_store` on a
/// migrated database), with one active project and no server in front: the
/// argument of a test of the `Store` operations themselves.
pub struct StoreTest {
    pub backend: Backend,
    pub db: DatabaseConnection,
    pub store: std::sync::Arc<dyn masterpay::store::Store>,
    pub project_id: i64,
    // Last, so that the database is dropped after the store.
    pub database: TestDatabase,
}

impl StoreTest {
    /// A fresh store of `backend`.
    pub async fn open(backend: Backend) -> StoreTest {
        let database = TestDatabase::create(backend).await;
        let db = database::connect(&database.url, &test_pool())
            .await
            .expect("connect test database");
        database::migrate(&db).await.expect("migrate test database");
        let store = database::open_store(
            &db,
            &database.url,
            &test_pool(),
            std::sync::Arc::new(masterpay::store::Uncounted),
        )
        .expect("store");
        let project_id = projects::create(&db, &Actor::CommandLine, "Test project")
            .await
            .expect("project")
            .id;
        StoreTest {
            backend,
            db,
            store,
            project_id,
            database,
        }
    }
}

/// Runs `test` on a fresh store of `backend` ([`StoreTest`]): [`run`]'s
/// counterpart for the store's own tests (tests/store.rs).
pub async fn run_store<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(StoreTest) -> Fut,
    Fut: Future<Output = ()>,
{
    test(StoreTest::open(backend).await).await;
}
