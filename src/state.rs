//! What every request handler may reach: the store of the request path,
//! the sea-orm pool (readiness, token-use times), metrics and the limits.

use std::{sync::Arc, time::Duration};

use sea_orm::DatabaseConnection;

use crate::{
    config::Settings,
    metrics::Metrics,
    service::auth::UsageRecorder,
    store::{GroupSizes, Store, StoreError, database},
};

#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub store: Arc<dyn Store>,
    /// When tokens were last used (recorded at most once a minute).
    pub token_usage: Arc<UsageRecorder>,
    pub metrics: Arc<Metrics>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// How long a request body may take to arrive (408 after).
    pub body_timeout: Duration,
}

impl AppState {
    pub fn new(db: DatabaseConnection, settings: &Settings) -> Result<AppState, StoreError> {
        let metrics = Arc::new(Metrics::new());
        let sizes: Arc<dyn GroupSizes> = metrics.clone();
        Ok(AppState {
            store: database::open_store(&db, &settings.database_url, &settings.pool, sizes)?,
            db,
            token_usage: Arc::default(),
            metrics,
            max_body_bytes: settings.max_body_bytes,
            // Shorter than the request timeout, so that a slow client gets
            // its own 408 rather than the generic 503.
            body_timeout: settings.request_timeout * 4 / 5,
        })
    }
}

/// The store's group sizes, recorded in the metrics.
impl GroupSizes for Metrics {
    fn token_reads(&self, size: usize) {
        self.record_token_read_group(size);
    }

    fn completions(&self, size: usize) {
        self.record_completion_group(size);
    }

    fn inserts(&self, size: usize) {
        self.record_insert_group(size);
    }
}
