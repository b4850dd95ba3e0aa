//! Prometheus metrics, served as text at `/metrics` on a listener of their
//! own (`metrics_listen`), not the API's.
//!
//! Labels are bounded: `endpoint` is a route template (never a raw path, so a
//! scanner cannot blow up the series count), `status` the numeric code,
//! `outcome` one of the completion or panel sign-in outcomes. Pool gauges are read from the
//! connection pool at scrape time.

use std::{
    sync::{Mutex, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry},
};
use sea_orm::DatabaseConnection;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub event: &'static str,
}

/// What happened to an order, besides its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderEvent {
    /// Created.
    Created,
    /// A creation repeated with its idempotency key: answered as the
    /// first, nothing created.
    IdempotentReplay,
    /// Cancelled while pending.
    Cancelled,
}

impl OrderEvent {
    fn label(self) -> &'static str {
        match self {
            OrderEvent::Created => "created",
            OrderEvent::IdempotentReplay => "idempotent_replay",
            OrderEvent::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub state: &'static str,
}

/// Every metric of the service.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram>,
    completions: Family<OutcomeLabels, Counter>,
    order_events: Family<EventLabels, Counter>,
    panel_sign_ins: Family<OutcomeLabels, Counter>,
    pool: Family<PoolLabels, Gauge>,
    pool_max: Gauge,
    completion_group_sizes: Histogram,
    token_read_group_sizes: Histogram,
    insert_group_sizes: Histogram,
    webhook_pending: Gauge,
    webhook_oldest_pending: Gauge<f64, AtomicU64>,
    webhook_attempts: Family<OutcomeLabels, Counter>,
    webhook_attempt_duration: Histogram,
    webhook_endpoints_disabled: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("masterpay");
        let r = &mut registry;
        // Fields in the order of the exposition.
        Metrics {
            order_events: registered(
                r,
                "order_events",
                "Orders created, creations replayed by idempotency key, and orders cancelled, through the API",
                Family::default(),
            ),
            panel_sign_ins: registered(
                r,
                "panel_sign_ins",
                "Sign-in attempts to the administration panel by outcome (signed_in, refused, rate_limited, link_used, link_refused)",
                Family::default(),
            ),
            requests: registered(
                r,
                "http_requests",
                "HTTP requests answered, by endpoint, method and status",
                Family::default(),
            ),
            latency: registered(
                r,
                "http_request_duration_seconds",
                "Time to answer an HTTP request, by endpoint, method and status",
                Family::new_with_constructor(|| {
                    Histogram::new([
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0,
                    ])
                }),
            ),
            completions: registered(
                r,
                "order_completions",
                "Order completion attempts by outcome",
                Family::default(),
            ),
            pool: registered(
                r,
                "db_pool_connections",
                "Database pool connections by state (idle, in_use)",
                Family::default(),
            ),
            pool_max: registered(
                r,
                "db_pool_max_connections",
                "Configured size of the database pool",
                Gauge::default(),
            ),
            completion_group_sizes: registered(
                r,
                "order_completion_batch_size",
                "Order completions written per database transaction (PostgreSQL groups; 1 when alone)",
                group_size_histogram(),
            ),
            token_read_group_sizes: registered(
                r,
                "token_read_batch_size",
                "Token reads (of balance and completion requests) per database statement (PostgreSQL; 1 when alone)",
                group_size_histogram(),
            ),
            insert_group_sizes: registered(
                r,
                "order_insert_batch_size",
                "Order creations inserted per database statement (PostgreSQL groups; 1 when alone)",
                group_size_histogram(),
            ),
            webhook_pending: registered(
                r,
                "webhook_deliveries_pending",
                "Webhook deliveries not yet succeeded or failed (all instances; read by each relay every few seconds)",
                Gauge::default(),
            ),
            webhook_oldest_pending: registered(
                r,
                "webhook_oldest_pending_seconds",
                "How long the most overdue pending webhook delivery has been due (0 when none is)",
                Gauge::default(),
            ),
            webhook_attempts: registered(
                r,
                "webhook_attempts",
                "Webhook send attempts of this instance by outcome (succeeded, http_error, timeout, connect_error, redirect, refused_address, gone)",
                Family::default(),
            ),
            webhook_attempt_duration: registered(
                r,
                "webhook_attempt_duration_seconds",
                "Time of one webhook send attempt, to the end of the answer",
                Histogram::new([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0]),
            ),
            webhook_endpoints_disabled: registered(
                r,
                "webhook_endpoints_disabled",
                "Webhook endpoints this instance disabled, by reason (gone: answered 410; failing: failed for the whole disable window)",
                Family::default(),
            ),
            registry: Mutex::new(registry),
        }
    }

    /// A webhook send attempt and what it took.
    pub fn record_webhook_attempt(&self, outcome: &'static str, elapsed: Duration) {
        self.webhook_attempts
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.webhook_attempt_duration.observe(elapsed.as_secs_f64());
    }

    /// An endpoint the relay disabled (`gone` or `failing`).
    pub fn record_webhook_endpoint_disabled(&self, reason: &'static str) {
        self.webhook_endpoints_disabled
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The pending deliveries, and how long the most overdue one has been
    /// due.
    pub fn set_webhook_backlog(&self, pending: i64, oldest_overdue: Duration) {
        self.webhook_pending.set(pending);
        self.webhook_oldest_pending
            .set(oldest_overdue.as_secs_f64());
    }

    /// Token reads that went to the database in one statement.
    pub fn record_token_read_group(&self, size: usize) {
        self.token_read_group_sizes.observe(size as f64);
    }

    /// Order inserts that went to the database in one statement.
    pub fn record_insert_group(&self, size: usize) {
        self.insert_group_sizes.observe(size as f64);
    }

    /// Completions that went to the database in one transaction.
    pub fn record_completion_group(&self, size: usize) {
        self.completion_group_sizes.observe(size as f64);
    }

    pub fn record_request(&self, labels: RequestLabels, elapsed: Duration) {
        self.latency
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.requests.get_or_create(&labels).inc();
    }

    pub fn record_completion(&self, outcome: &'static str) {
        self.completions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    pub fn record_order_event(&self, event: OrderEvent) {
        self.order_events
            .get_or_create(&EventLabels {
                event: event.label(),
            })
            .inc();
    }

    /// A sign-in attempt to the panel; a rising `refused` or
    /// `rate_limited` is someone guessing passwords.
    pub fn record_panel_sign_in(&self, outcome: &'static str) {
        self.panel_sign_ins
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The text exposition, with the pool gauges read now.
    pub fn render(&self, db: &DatabaseConnection) -> String {
        let (size, idle, max) = pool_stats(db);
        self.pool_max.set(i64::from(max));
        self.pool
            .get_or_create(&PoolLabels { state: "idle" })
            .set(i64::from(idle));
        self.pool
            .get_or_create(&PoolLabels { state: "in_use" })
            .set(i64::from(size.saturating_sub(idle)));
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = encode(&mut out, &registry);
        out
    }
}

/// Buckets of a group-size histogram: groups hold 1 to 32 requests.
fn group_size_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
}

/// `metric`, registered in `registry` as `name` with `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// (open connections, idle connections, configured maximum) of the pool.
fn pool_stats(db: &DatabaseConnection) -> (u32, u32, u32) {
    macro_rules! stats {
        ($pool:expr) => {{
            let pool = $pool;
            let max = pool.options().get_max_connections();
            (pool.size(), pool.num_idle() as u32, max)
        }};
    }
    match db.get_database_backend() {
        sea_orm::DbBackend::Postgres => stats!(db.get_postgres_connection_pool()),
        sea_orm::DbBackend::MySql => stats!(db.get_mysql_connection_pool()),
        _ => stats!(db.get_sqlite_connection_pool()),
    }
}

/// The route template a path belongs to, for the `endpoint` label.
pub fn endpoint_label(path: &str) -> &'static str {
    match path {
        "/v2/master-account/balance" => "/v2/master-account/balance",
        "/v2/payment/order/complete" => "/v2/payment/order/complete",
        "/v2/payment/order/create" => "/v2/payment/order/create",
        "/v2/payment/order" => "/v2/payment/order",
        "/v2/payment/order/cancel" => "/v2/payment/order/cancel",
        "/v2/master-account/operations" => "/v2/master-account/operations",
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/openapi.json" => "/openapi.json",
        "/openapi.yaml" => "/openapi.yaml",
        p if p == "/docs" || p.starts_with("/docs/") => "/docs",
        p if p == "/v2" || p.starts_with("/v2/") => "/v2/other",
        _ => "other",
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
