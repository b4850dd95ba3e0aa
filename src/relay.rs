//! The webhook relay: sends the recorded events to their endpoints, at
//! least once, from every `serve` instance.
//!
//! Each instance runs one relay. It claims due deliveries with a lease
//! (see `store::relay`: on the database's clock, so that instances on
//! different hosts agree on when a lease ends) and sends each on a task of
//! its own, at most `webhook_relay_concurrency` deliveries in hand at once
//! (sending or recording) and `webhook_endpoint_concurrency` requests to
//! one endpoint, so that a slow endpoint holds only its own places and
//! never the others' or the API's. An endpoint's place is given back when
//! its answer is in, before the attempt is recorded: holding it through
//! the recording made the database's pace, not the endpoint's, bound the
//! sends to one endpoint (docs/performance.md). No lock is
//! held during a send: the lease is what keeps other instances off the
//! delivery, and it outlasts a send (`webhook_lease_ms` is at least twice
//! [`WEBHOOK_SEND_TIMEOUT`]). An instance that dies mid-send leaves its lease
//! to expire, and another sends the delivery again, with the same
//! `webhook-id` and the same body bytes: receivers drop duplicates by
//! `webhook-id`. After a send, the attempt and what follows it are recorded
//! under `lease_owner = this instance` (see `service::webhook_delivery` for
//! the rules); an instance whose lease was taken over records nothing.
//!
//! The relay looks for due deliveries every `webhook_poll_interval_ms`, and
//! at once when a send ends (a place is free). A send connects only to an
//! address the destination checks allow, resolved by the client's own
//! resolver ([`CheckedResolver`]), with no proxy and no redirect followed;
//! it is bounded by [`CONNECT_TIMEOUT`] to connect and
//! [`WEBHOOK_SEND_TIMEOUT`] in all, and reads at most [`MAX_ANSWER_BYTES`]
//! of the answer. On shutdown the relay claims nothing more and gives its
//! sends in flight the shutdown grace to end; those cut short are sent
//! again when their lease expires. Nothing here logs a secret, a signature,
//! or an endpoint's URL (it may carry the integrator's credentials).

use std::{
    collections::HashMap,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, SubsecRound, Utc};
use reqwest::{
    Client,
    header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT},
};
use tokio::task::JoinSet;

use crate::{
    config::{Settings, WEBHOOK_SEND_TIMEOUT, WebhookSecretKey, WebhookSettings},
    metrics::Metrics,
    service::{
        webhook_delivery::{self, GONE_REASON, Outcome},
        webhook_destination::{CheckedResolver, DestinationPolicy, Resolver, is_refused_address},
        webhook_secrets,
        webhook_signature::{
            ID_HEADER, SIGNATURE_HEADER, SigningKey, TIMESTAMP_HEADER, signature_header,
        },
    },
    store::{
        Store, StoreError,
        relay::{After, Attempt, Capacity, Claim, DueDelivery, Recorded, Sent},
    },
};

/// How long a send may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of an answer is read; the rest is not (the connection is then
/// dropped).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How much of an answer an attempt keeps, for operators.
pub const EXCERPT_BYTES: usize = 1024;
/// How many more times a recording is tried after a deadlock.
const RECORD_TRIES: usize = 3;
/// How often the backlog gauges are read from the database.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// One instance's relay (see the module docs).
pub struct Relay {
    store: Arc<dyn Store>,
    settings: WebhookSettings,
    secret_key: Option<WebhookSecretKey>,
    policy: DestinationPolicy,
    client: Client,
    metrics: Arc<Metrics>,
    /// This instance's `lease_owner`.
    owner: String,
}

impl Relay {
    /// The relay of `settings` on `store`, resolving names with `resolver`.
    pub fn new(
        store: Arc<dyn Store>,
        settings: &Settings,
        resolver: Resolver,
        metrics: Arc<Metrics>,
    ) -> Result<Relay, reqwest::Error> {
        let policy = DestinationPolicy::of(&settings.webhooks);
        let client = Client::builder()
            .dns_resolver(Arc::new(CheckedResolver {
                policy: policy.clone(),
                lookup: resolver,
            }))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(WEBHOOK_SEND_TIMEOUT)
            .pool_max_idle_per_host(settings.webhooks.endpoint_concurrency)
            .build()?;
        Ok(Relay {
            store,
            settings: settings.webhooks.clone(),
            secret_key: settings.webhook_secret_key.clone(),
            policy,
            client,
            metrics,
            owner: instance_name(),
        })
    }

    /// This instance's `lease_owner`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Sends until `stop` resolves, then gives the sends in flight up to
    /// `grace` to end. With a concurrency of 0, waits for `stop` alone.
    pub async fn run(self, stop: impl Future<Output = ()>, grace: Duration) {
        let relay = Arc::new(self);
        let concurrency = relay.settings.relay_concurrency;
        // Sends in flight, each ending with the attempt to record; and the
        // recordings.
        let mut sends: JoinSet<Option<Attempt>> = JoinSet::new();
        let mut recordings: JoinSet<()> = JoinSet::new();
        // The endpoint of each send, and the sends in flight by endpoint.
        let mut endpoints: HashMap<tokio::task::Id, i64> = HashMap::new();
        let mut in_flight: HashMap<i64, usize> = HashMap::new();
        let mut backlog_read: Option<Instant> = None;
        tokio::pin!(stop);
        if concurrency == 0 {
            stop.await;
            return;
        }
        loop {
            while recordings.try_join_next().is_some() {}
            while sends.len() + recordings.len() < concurrency {
                let capacity = Capacity {
                    free: concurrency - sends.len() - recordings.len(),
                    per_endpoint: relay.settings.endpoint_concurrency,
                    in_flight: in_flight.clone(),
                };
                let free = capacity.free;
                let claim = Claim {
                    owner: relay.owner.clone(),
                    lease: relay.settings.lease,
                    capacity,
                };
                let claimed = match relay.store.relay().claim(&claim).await {
                    Ok(claimed) => claimed,
                    Err(err) => {
                        tracing::warn!(error = %err, "webhook relay: claiming due deliveries failed");
                        break;
                    }
                };
                let (count, claimed_at) = (claimed.deliveries.len(), Instant::now());
                for delivery in claimed.deliveries {
                    *in_flight.entry(delivery.endpoint_id).or_default() += 1;
                    let endpoint = delivery.endpoint_id;
                    let (relay, db_now) = (Arc::clone(&relay), claimed.now);
                    let send = sends
                        .spawn(async move { relay.deliver(delivery, db_now, claimed_at).await });
                    endpoints.insert(send.id(), endpoint);
                }
                if count < free {
                    break;
                }
            }
            if backlog_read.is_none_or(|at| at.elapsed() >= BACKLOG_EVERY) {
                backlog_read = Some(Instant::now());
                relay.read_backlog().await;
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(relay.settings.poll_interval) => {}
                Some(done) = sends.join_next_with_id(), if !sends.is_empty() => {
                    let mut done = Some(done);
                    while let Some(send) = done {
                        let (id, attempt) = match send {
                            Ok((id, attempt)) => (id, attempt),
                            Err(err) => (err.id(), None),
                        };
                        if let Some(endpoint) = endpoints.remove(&id) {
                            release(&mut in_flight, endpoint);
                        }
                        if let Some(attempt) = attempt {
                            recordings.spawn(Arc::clone(&relay).record(attempt));
                        }
                        done = sends.try_join_next_with_id();
                    }
                }
            }
        }
        let drained = tokio::time::timeout(grace, async {
            while let Some(send) = sends.join_next().await {
                if let Ok(Some(attempt)) = send {
                    recordings.spawn(Arc::clone(&relay).record(attempt));
                }
            }
            while recordings.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                sends = sends.len() + recordings.len(),
                "webhook relay: sends cut short by shutdown; they are sent again when their lease expires"
            );
            sends.abort_all();
            recordings.abort_all();
        }
    }

    /// Reads the pending deliveries into the gauges.
    async fn read_backlog(&self) {
        match self.store.relay().backlog().await {
            Ok(backlog) => {
                let overdue = backlog
                    .oldest_due
                    .and_then(|due| (backlog.now - due).to_std().ok())
                    .unwrap_or_default();
                self.metrics.set_webhook_backlog(backlog.pending, overdue);
            }
            Err(err) => tracing::warn!(error = %err, "webhook relay: reading the backlog failed"),
        }
    }

    /// Sends `delivery` (claimed at `db_now`, database time, which was
    /// `claimed_at` here); the attempt to record, unless it was left leased.
    async fn deliver(
        &self,
        delivery: DueDelivery,
        db_now: DateTime<Utc>,
        claimed_at: Instant,
    ) -> Option<Attempt> {
        let (sent, after) = if delivery.enabled {
            let started = Instant::now();
            // To the microsecond, as every backend stores it: the
            // `webhook-timestamp` sent is the second the record shows.
            let attempted_at = (db_now + (started - claimed_at)).trunc_subsecs(6);
            let keys = match self.signing_keys(&delivery, attempted_at) {
                Ok(keys) => keys,
                Err(err) => {
                    // Left leased: sent again when the lease expires, once
                    // the key is put right.
                    tracing::error!(
                        delivery = delivery.id,
                        endpoint = delivery.endpoint_id,
                        error = %err,
                        "webhook relay: the endpoint's secret does not open; not sent"
                    );
                    return None;
                }
            };
            let answer = self.send(&delivery, &keys, attempted_at).await;
            let elapsed = started.elapsed();
            self.metrics
                .record_webhook_attempt(answer.outcome.as_str(), elapsed);
            let ended_at = attempted_at + elapsed;
            let after = webhook_delivery::after(
                &self.settings,
                answer.outcome,
                usize::try_from(delivery.attempts).unwrap_or(0) + 1,
                attempted_at,
                ended_at,
                answer.retry_after,
            );
            tracing::debug!(
                delivery = delivery.id,
                endpoint = delivery.endpoint_id,
                outcome = answer.outcome.as_str(),
                status = answer.status,
                ms = elapsed.as_millis() as u64,
                "webhook attempt"
            );
            let sent = Sent {
                attempted_at,
                duration_ms: i32::try_from(elapsed.as_millis()).unwrap_or(i32::MAX),
                response_status: answer.status.map(i32::from),
                outcome: answer.outcome.as_str(),
                excerpt: answer.excerpt,
            };
            (Some(sent), after)
        } else {
            // Disabled since the event was recorded: it fails unsent.
            let reason = "disabled".to_owned();
            (None, After::Disable { reason })
        };
        Some(Attempt {
            owner: self.owner.clone(),
            delivery_id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            failing_since: delivery.failing_since,
            sent,
            after,
        })
    }

    /// Records `attempt` and tells what came of it.
    async fn record(self: Arc<Self>, attempt: Attempt) {
        match self.record_attempt(&attempt).await {
            Ok(Recorded::Done {
                disabled: Some(reason),
            }) => {
                let label = if reason == GONE_REASON {
                    "gone"
                } else {
                    "failing"
                };
                self.metrics.record_webhook_endpoint_disabled(label);
                tracing::warn!(
                    endpoint = attempt.endpoint_id,
                    reason = %reason,
                    "webhook endpoint disabled; its pending deliveries failed"
                );
            }
            Ok(Recorded::Done { disabled: None }) => {}
            Ok(Recorded::LeaseLost) => tracing::info!(
                delivery = attempt.delivery_id,
                "webhook relay: the lease was taken over during the send; the attempt is not recorded"
            ),
            Err(err) => tracing::warn!(
                delivery = attempt.delivery_id,
                error = %err,
                "webhook relay: recording an attempt failed; the delivery is sent again when its lease expires"
            ),
        }
    }

    /// Records `attempt`, again when the database gave up on a lock
    /// (a deadlock with another instance's claim or recording): unrecorded,
    /// the delivery would be sent again when its lease expires.
    async fn record_attempt(&self, attempt: &Attempt) -> Result<Recorded, StoreError> {
        let mut tries = 0;
        loop {
            match self.store.relay().record(attempt).await {
                Err(StoreError::Contended(_)) if tries < RECORD_TRIES => tries += 1,
                recorded => return recorded,
            }
        }
    }

    /// The keys that sign `delivery`: the endpoint's secret, and the
    /// previous one while its rotation overlaps.
    fn signing_keys(
        &self,
        delivery: &DueDelivery,
        at: DateTime<Utc>,
    ) -> Result<Vec<SigningKey>, String> {
        let key_of = |stored: &str| {
            let secret = webhook_secrets::open(stored, self.secret_key.as_ref())
                .map_err(|err| err.to_string())?;
            SigningKey::from_secret(secret.expose()).map_err(|err| err.to_string())
        };
        let mut keys = vec![key_of(&delivery.secret)?];
        if let (Some(previous), Some(until)) =
            (&delivery.previous_secret, delivery.previous_secret_until)
            && at < until
        {
            keys.push(key_of(previous)?);
        }
        Ok(keys)
    }

    /// One attempt: the signed POST and what answered.
    async fn send(
        &self,
        delivery: &DueDelivery,
        keys: &[SigningKey],
        attempted_at: DateTime<Utc>,
    ) -> Answer {
        // The URL's form and literal address are checked here; a name's
        // addresses by the client's resolver, as it connects.
        let url = match self.policy.check_form(&delivery.url) {
            Ok(url) => url,
            Err(refusal) => return Answer::refused(refusal.to_string()),
        };
        let timestamp = attempted_at.timestamp();
        let body = delivery.payload.as_bytes();
        let signature = signature_header(keys, &delivery.webhook_id, timestamp, body);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        for (name, value) in [
            (ID_HEADER, delivery.webhook_id.clone()),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, signature),
        ] {
            match HeaderValue::from_str(&value) {
                Ok(value) => {
                    headers.insert(name, value);
                }
                Err(_) => return Answer::refused(format!("{name} is not a header value")),
            }
        }
        let response = self
            .client
            .post(url)
            .headers(headers)
            .body(delivery.payload.clone())
            .send()
            .await;
        let mut response = match response {
            Ok(response) => response,
            Err(err) => return Answer::failed(&err),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| webhook_delivery::parse_retry_after(value, Utc::now()));
        let mut read = Vec::new();
        while read.len() < MAX_ANSWER_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_ANSWER_BYTES - read.len();
                    read.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break,
                // A status came: it is the outcome, whatever the body did.
                Err(_) => break,
            }
        }
        Answer {
            outcome: Outcome::of_status(status.as_u16()),
            status: Some(status.as_u16()),
            retry_after,
            excerpt: excerpt(&String::from_utf8_lossy(&read)),
        }
    }
}

/// What an endpoint's client sees as `User-Agent`.
const USER_AGENT_VALUE: &str = concat!("masterpay-webhooks/", env!("CARGO_PKG_VERSION"));

/// What one attempt came to.
struct Answer {
    outcome: Outcome,
    status: Option<u16>,
    retry_after: Option<Duration>,
    excerpt: String,
}

impl Answer {
    /// Nothing sent: the destination is not allowed.
    fn refused(why: String) -> Answer {
        Answer {
            outcome: Outcome::RefusedAddress,
            status: None,
            retry_after: None,
            excerpt: excerpt(&why),
        }
    }

    /// No answer: what went wrong, without the URL.
    fn failed(err: &reqwest::Error) -> Answer {
        let outcome = if is_refused_address(err) {
            Outcome::RefusedAddress
        } else if err.is_timeout() {
            Outcome::Timeout
        } else {
            Outcome::ConnectError
        };
        let mut why = String::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(err) = next {
            if !why.is_empty() {
                why.push_str(": ");
            }
            match err.downcast_ref::<reqwest::Error>() {
                Some(reqwest) => why.push_str(&reqwest_text(reqwest)),
                None => why.push_str(&err.to_string()),
            }
            next = err.source();
        }
        Answer {
            outcome,
            status: None,
            retry_after: None,
            excerpt: excerpt(&why),
        }
    }
}

/// A client error's own message, without the URL it names.
fn reqwest_text(err: &reqwest::Error) -> String {
    let text = err.to_string();
    match text.find(" for url (") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// At most [`EXCERPT_BYTES`] of `text`, cut at a character boundary.
fn excerpt(text: &str) -> String {
    text[..text.floor_char_boundary(EXCERPT_BYTES)].to_owned()
}

/// A send to `endpoint` ended: its place is free.
fn release(in_flight: &mut HashMap<i64, usize>, endpoint: i64) {
    if let Some(count) = in_flight.get_mut(&endpoint) {
        *count -= 1;
        if *count == 0 {
            in_flight.remove(&endpoint);
        }
    }
}

/// This instance's name as a lease owner: its process id and a random
/// part (a restarted process may get its old id back).
fn instance_name() -> String {
    format!("{}-{:016x}", std::process::id(), rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_cut_at_character_boundaries() {
        let text = "é".repeat(EXCERPT_BYTES);
        let cut = excerpt(&text);
        assert_eq!(cut.len(), EXCERPT_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(excerpt("short"), "short");
    }
}
