//! The webhook relay against receivers under the tests' control: signed
//! deliveries, the retry schedule, giving up, disabling, redirects, leases
//! between instances (down to a `serve` process killed mid-send), and the
//! destination checks at send time.
//!
//! Each receiver is a poem server on a free port of 127.0.0.1, which the
//! settings allow (`webhook_allow_networks`); the schedule is shortened by
//! its setting. What happened is asserted from the database's records and
//! the receiver's, never from how long something took.

mod common;

use std::{
    collections::HashMap,
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, SubsecRound, Utc};
use common::{Backend, TestApp};
use entity::{
    webhook_attempt::{self, AttemptOutcome},
    webhook_delivery::{self, DeliveryStatus},
    webhook_endpoint, webhook_event,
};
use masterpay::{
    config::{Settings, WebhookSettings},
    metrics::Metrics,
    relay::Relay,
    service::{
        AdminError,
        admin_audit::Actor,
        webhook_destination::{DestinationPolicy, Destinations, Lookup, Resolver},
        webhook_endpoints, webhook_redelivery,
        webhook_signature::{SigningKey, verify},
    },
    store::relay::{After, Attempt, Capacity, Claim, Recorded, Sent},
};
use poem::{
    EndpointExt, Request, Response, Route,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpListener},
};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    common::with_backend: [
        a_delivery_arrives_signed_with_its_id_and_exact_body,
        three_failures_then_success_follow_the_schedule,
        an_endpoint_that_always_fails_is_given_up_at_the_schedules_end,
        an_endpoint_answering_410_is_disabled_and_its_deliveries_fail,
        an_endpoint_failing_for_the_window_is_disabled,
        a_redirect_is_a_failure_and_is_not_followed,
        two_instances_deliver_2000_events_each_once,
        an_expired_lease_is_sent_again_and_a_live_one_is_left_alone,
        a_relay_whose_lease_was_taken_over_records_nothing,
        a_delivery_cut_by_a_killed_instance_arrives_again_with_the_same_id_and_bytes,
        a_name_that_resolves_elsewhere_at_send_time_is_refused,
        an_order_created_and_completed_through_the_api_reaches_its_endpoint,
        test_rotate_resend_and_replay_only_enqueue_and_the_relay_sends,
        the_commands_enqueue_rotate_and_refuse_in_one_line,
        a_served_relay_logs_no_secret_or_signature_even_at_trace,
    ],
);

/// The secret of the tests' endpoints (stored in clear: no sealing key).
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// How long a test waits for the relay to reach a state.
const PATIENCE: Duration = Duration::from_secs(120);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Relay settings for tests: receivers on 127.0.0.1 allowed, a quick poll,
/// `schedule` as the waits before retries.
fn webhooks(schedule: &[Duration]) -> WebhookSettings {
    WebhookSettings {
        allow_networks: vec!["127.0.0.0/8".parse().unwrap()],
        retry_schedule: schedule.to_vec(),
        poll_interval: ms(20),
        ..WebhookSettings::default()
    }
}

/// An app whose relay runs with `settings`.
async fn app_with(backend: Backend, settings: WebhookSettings) -> TestApp {
    TestApp::spawn_with(backend, move |s| s.webhooks = settings).await
}

/// What a receiver got.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// Held open, never answered.
    held: bool,
}

/// A receiver answering its `n`-th request (from 0) with `answer(n)`.
struct Receiver {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Receiver {
    async fn start(answer: impl Fn(usize) -> Response + Send + Sync + 'static) -> Receiver {
        Receiver::holding(move |n| Some(answer(n))).await
    }

    /// A receiver that holds its `n`-th request open, unanswered, when
    /// `answer(n)` is `None`. A held request waits until the receiver is
    /// dropped: its server's shutdown then drops the connection after its
    /// one-second bound, so that nothing held outlives the test.
    async fn holding(
        answer: impl Fn(usize) -> Option<Response> + Send + Sync + 'static,
    ) -> Receiver {
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let recorded = Arc::clone(&hits);
        let answer = Arc::new(answer);
        let route = Route::new().at(
            "/*path",
            poem::endpoint::make(move |mut req: Request| {
                let (recorded, answer) = (Arc::clone(&recorded), Arc::clone(&answer));
                async move {
                    let body = req.take_body().into_vec().await.unwrap_or_default();
                    let headers = req
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                        .collect();
                    let answered = {
                        let mut hits = recorded.lock().unwrap();
                        let answered = answer(hits.len());
                        hits.push(Hit {
                            path: req.uri().path().to_owned(),
                            headers,
                            body,
                            held: answered.is_none(),
                        });
                        answered
                    };
                    match answered {
                        Some(response) => response,
                        None => std::future::pending().await,
                    }
                }
            }),
        );
        let acceptor = TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .unwrap();
        let addr = *acceptor.local_addr()[0].as_socket_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(
            poem::Server::new_with_acceptor(acceptor).run_with_graceful_shutdown(
                route.map_to_response(),
                async {
                    let _ = stopped.await;
                },
                Some(Duration::from_secs(1)),
            ),
        );
        Receiver {
            addr,
            hits,
            _stop: stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

fn status(code: u16) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .body(format!("answer {code}"))
}

/// An enabled endpoint of the app's project at `url`.
async fn endpoint(app: &TestApp, url: &str) -> i64 {
    let now = Utc::now();
    webhook_endpoint::ActiveModel {
        project_id: Set(app.project_id),
        url: Set(url.to_owned()),
        description: Set(String::new()),
        event_types: Set(None),
        secret: Set(format!("plain:{SECRET}")),
        previous_secret: Set(None),
        previous_secret_until: Set(None),
        enabled: Set(true),
        disabled_reason: Set(None),
        failing_since: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&app.db)
    .await
    .unwrap()
    .id
}

/// An event recorded for `endpoint`, its delivery due at `due`: the
/// delivery's id, the event's webhook id and its body.
async fn event(
    app: &TestApp,
    endpoint: i64,
    n: usize,
    due: DateTime<Utc>,
) -> (i64, String, String) {
    let webhook_id = format!("msg_{:032x}", rand::random::<u128>());
    let payload = format!(
        r#"{{"type":"webhook.test","timestamp":"{}","data":{{"endpoint_id":{endpoint},"n":{n},"note":"é"}}}}"#,
        due.to_rfc3339()
    );
    let event = webhook_event::ActiveModel {
        webhook_id: Set(webhook_id.clone()),
        project_id: Set(app.project_id),
        event_type: Set(webhook_event::EventType::WebhookTest),
        order_id: Set(None),
        payload: Set(payload.clone()),
        created_at: Set(Utc::now()),
        ..Default::default()
    }
    .insert(&app.db)
    .await
    .unwrap();
    let delivery = webhook_delivery::ActiveModel {
        event_id: Set(event.id),
        endpoint_id: Set(endpoint),
        status: Set(DeliveryStatus::Pending),
        attempts: Set(0),
        next_attempt_at: Set(Some(due)),
        leased_until: Set(None),
        lease_owner: Set(None),
        last_attempt_at: Set(None),
        created_at: Set(Utc::now()),
        ..Default::default()
    }
    .insert(&app.db)
    .await
    .unwrap();
    (delivery.id, webhook_id, payload)
}

/// `n` events spread over `endpoints`, due now, inserted in batches: their
/// webhook ids.
async fn many_events(app: &TestApp, endpoints: &[i64], n: usize) -> Vec<String> {
    let now = Utc::now();
    let ids: Vec<String> = (0..n)
        .map(|_| format!("msg_{:032x}", rand::random::<u128>()))
        .collect();
    for (batch, chunk) in ids.chunks(250).enumerate() {
        webhook_event::Entity::insert_many(chunk.iter().enumerate().map(|(i, id)| {
            webhook_event::ActiveModel {
                webhook_id: Set(id.clone()),
                project_id: Set(app.project_id),
                event_type: Set(webhook_event::EventType::WebhookTest),
                order_id: Set(None),
                payload: Set(format!(
                    r#"{{"type":"webhook.test","n":{}}}"#,
                    batch * 250 + i
                )),
                created_at: Set(now),
                ..Default::default()
            }
        }))
        .exec(&app.db)
        .await
        .unwrap();
    }
    let events = webhook_event::Entity::find().all(&app.db).await.unwrap();
    assert_eq!(events.len(), n);
    for chunk in events.chunks(250) {
        webhook_delivery::Entity::insert_many(chunk.iter().map(|event| {
            webhook_delivery::ActiveModel {
                event_id: Set(event.id),
                endpoint_id: Set(endpoints[event.id as usize % endpoints.len()]),
                status: Set(DeliveryStatus::Pending),
                attempts: Set(0),
                next_attempt_at: Set(Some(now)),
                created_at: Set(now),
                ..Default::default()
            }
        }))
        .exec(&app.db)
        .await
        .unwrap();
    }
    ids
}

async fn delivery(app: &TestApp, id: i64) -> webhook_delivery::Model {
    webhook_delivery::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap()
}

async fn endpoint_row(app: &TestApp, id: i64) -> webhook_endpoint::Model {
    webhook_endpoint::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap()
}

async fn attempts(app: &TestApp, delivery: i64) -> Vec<webhook_attempt::Model> {
    webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::DeliveryId.eq(delivery))
        .order_by_asc(webhook_attempt::Column::Id)
        .all(&app.db)
        .await
        .unwrap()
}

/// Polls until the delivery is in `status` (within [`PATIENCE`]).
async fn settled(app: &TestApp, id: i64, status: DeliveryStatus) -> webhook_delivery::Model {
    poll(&format!("delivery {id} {status:?}"), || async {
        let row = delivery(app, id).await;
        (row.status == status).then_some(row)
    })
    .await
}

/// Polls `probe` every 20 ms until it answers, within [`PATIENCE`].
async fn poll<T, Fut: Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> Fut) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

fn between(value: chrono::Duration, low: Duration, high: Duration) -> bool {
    let value = value.to_std().unwrap_or_default();
    value >= low && value <= high
}

async fn a_delivery_arrives_signed_with_its_id_and_exact_body(backend: Backend) {
    let app = app_with(backend, webhooks(&[ms(50)])).await;
    let receiver = Receiver::start(|_| status(202)).await;
    let endpoint = endpoint(&app, &receiver.url("/hooks/masterpay?tenant=7")).await;
    let (id, webhook_id, payload) = event(&app, endpoint, 0, Utc::now()).await;
    let row = settled(&app, id, DeliveryStatus::Succeeded).await;
    assert_eq!(row.attempts, 1);
    assert_eq!(row.next_attempt_at, None);
    assert_eq!(row.lease_owner, None);
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.path, "/hooks/masterpay");
    assert_eq!(hit.body, payload.as_bytes(), "the exact body bytes");
    assert_eq!(hit.headers["content-type"], "application/json");
    assert_eq!(hit.headers["webhook-id"], webhook_id);
    let timestamp: i64 = hit.headers["webhook-timestamp"].parse().unwrap();
    let attempt = &attempts(&app, id).await[0];
    assert_eq!(timestamp, attempt.attempted_at.timestamp());
    let key = SigningKey::from_secret(SECRET).unwrap();
    let signature = &hit.headers["webhook-signature"];
    assert!(signature.starts_with("v1,") && !signature.contains(' '));
    assert!(verify(&key, signature, &webhook_id, timestamp, &hit.body));
    assert_eq!(attempt.outcome, AttemptOutcome::Succeeded);
    assert_eq!(attempt.response_status, Some(202));
    assert_eq!(attempt.response_excerpt, "answer 202");
    assert_eq!(attempt.next_attempt_at, None);
    let metrics = app
        .client
        .get(format!("{}/metrics", app.metrics_base.as_deref().unwrap()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"masterpay_webhook_attempts_total{outcome="succeeded"} 1"#),
        "{metrics}"
    );
}

async fn three_failures_then_success_follow_the_schedule(backend: Backend) {
    let schedule = [ms(100), ms(200), ms(300), ms(400)];
    let app = app_with(backend, webhooks(&schedule)).await;
    let receiver = Receiver::start(|n| {
        if n < 3 {
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body("x".repeat(5000))
        } else {
            status(200)
        }
    })
    .await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let (id, webhook_id, payload) = event(&app, endpoint, 0, Utc::now()).await;
    let row = settled(&app, id, DeliveryStatus::Succeeded).await;
    assert_eq!(row.attempts, 4);
    let tries = attempts(&app, id).await;
    assert_eq!(tries.len(), 4);
    for (k, attempt) in tries.iter().take(3).enumerate() {
        assert_eq!(attempt.outcome, AttemptOutcome::HttpError);
        assert_eq!(attempt.response_status, Some(503));
        assert_eq!(attempt.response_excerpt.len(), 1024, "1 KiB kept");
        // Scheduled the k-th wait after the attempt ended, plus at most a
        // tenth of it (jitter); the database keeps microseconds.
        let next = attempt.next_attempt_at.expect("a retry is scheduled");
        let took = ms(attempt.duration_ms as u64);
        let gap = schedule[k];
        assert!(
            between(
                next - attempt.attempted_at,
                took + gap,
                took + gap + gap / 10 + ms(2)
            ),
            "attempt {k}: {attempt:?}"
        );
        // The next attempt did not come before it was due.
        assert!(tries[k + 1].attempted_at >= next, "{:?}", tries[k + 1]);
    }
    assert_eq!(tries[3].outcome, AttemptOutcome::Succeeded);
    assert_eq!(tries[3].next_attempt_at, None);
    let hits = receiver.hits();
    assert_eq!(hits.len(), 4);
    assert!(
        hits.iter()
            .all(|hit| hit.headers["webhook-id"] == webhook_id && hit.body == payload.as_bytes()),
        "every attempt sends the same id and bytes"
    );
    // The run of failures ended with the success.
    let endpoint = endpoint_row(&app, endpoint).await;
    assert_eq!(endpoint.failing_since, None);
    assert!(endpoint.enabled);
}

async fn an_endpoint_that_always_fails_is_given_up_at_the_schedules_end(backend: Backend) {
    let app = app_with(backend, webhooks(&[ms(50), ms(50)])).await;
    let receiver = Receiver::start(|_| status(500)).await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let (id, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    let row = settled(&app, id, DeliveryStatus::Failed).await;
    assert_eq!(row.attempts, 3, "one attempt, then one per wait");
    assert_eq!(row.next_attempt_at, None);
    let tries = attempts(&app, id).await;
    assert_eq!(tries.len(), 3);
    assert!(tries.iter().all(|t| t.outcome == AttemptOutcome::HttpError));
    assert!(tries[..2].iter().all(|t| t.next_attempt_at.is_some()));
    assert_eq!(tries[2].next_attempt_at, None);
    assert_eq!(receiver.hits().len(), 3);
    let endpoint = endpoint_row(&app, endpoint).await;
    assert!(endpoint.enabled, "a failed delivery alone disables nothing");
    assert_eq!(endpoint.failing_since, Some(tries[0].attempted_at));
}

async fn an_endpoint_answering_410_is_disabled_and_its_deliveries_fail(backend: Backend) {
    let app = app_with(backend, webhooks(&[ms(50)])).await;
    let receiver = Receiver::start(|_| status(410)).await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let (later, _, _) = event(&app, endpoint, 1, Utc::now() + chrono::Duration::hours(1)).await;
    let (now, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    settled(&app, now, DeliveryStatus::Failed).await;
    let tries = attempts(&app, now).await;
    assert_eq!(tries.len(), 1);
    assert_eq!(tries[0].outcome, AttemptOutcome::Gone);
    assert_eq!(tries[0].response_status, Some(410));
    assert_eq!(tries[0].next_attempt_at, None);
    let row = endpoint_row(&app, endpoint).await;
    assert!(!row.enabled);
    assert_eq!(row.disabled_reason.as_deref(), Some("answered 410"));
    let later = delivery(&app, later).await;
    assert_eq!(later.status, DeliveryStatus::Failed);
    assert_eq!((later.attempts, later.next_attempt_at), (0, None));
    assert_eq!(receiver.hits().len(), 1);
}

async fn an_endpoint_failing_for_the_window_is_disabled(backend: Backend) {
    let window = ms(400);
    let settings = WebhookSettings {
        disable_after: window,
        ..webhooks(&[ms(100); 50])
    };
    let app = app_with(backend, settings).await;
    let receiver = Receiver::start(|_| status(502)).await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let (id, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    let row = settled(&app, id, DeliveryStatus::Failed).await;
    let endpoint = endpoint_row(&app, endpoint).await;
    assert!(!endpoint.enabled);
    assert_eq!(
        endpoint.disabled_reason.as_deref(),
        Some("failing for 400ms")
    );
    let tries = attempts(&app, id).await;
    assert_eq!(row.attempts as usize, tries.len());
    let first = tries[0].attempted_at;
    assert_eq!(endpoint.failing_since, Some(first));
    let (last, before) = (&tries[tries.len() - 1], &tries[tries.len() - 2]);
    // Disabled by the first attempt at least a window after the first
    // failure, and not before.
    assert!((last.attempted_at - first).to_std().unwrap() >= window);
    assert!((before.attempted_at - first).to_std().unwrap() < window);
    assert_eq!(last.next_attempt_at, None);
    assert!(tries.len() < 50, "disabled before the schedule ran out");
}

async fn a_redirect_is_a_failure_and_is_not_followed(backend: Backend) {
    let app = app_with(backend, webhooks(&[])).await;
    let target = Receiver::start(|_| status(200)).await;
    let location = target.url("/elsewhere");
    let redirecting = Receiver::start(move |_| {
        Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header("location", location.as_str())
            .body("")
    })
    .await;
    let endpoint = endpoint(&app, &redirecting.url("/")).await;
    let (id, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    settled(&app, id, DeliveryStatus::Failed).await;
    let tries = attempts(&app, id).await;
    assert_eq!(tries.len(), 1);
    assert_eq!(tries[0].outcome, AttemptOutcome::Redirect);
    assert_eq!(tries[0].response_status, Some(307));
    assert_eq!(redirecting.hits().len(), 1);
    assert!(target.hits().is_empty(), "the redirect was followed");
}

/// The settings and a metrics registry of a relay started by a test.
fn relay_settings(schedule: &[Duration]) -> Settings {
    Settings {
        webhooks: webhooks(schedule),
        ..Settings::default()
    }
}

/// Runs a relay of its own on the app's database until the returned sender
/// fires (or is dropped).
fn spawn_relay(
    app: &TestApp,
    settings: &Settings,
    resolver: Resolver,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let relay = Relay::new(app.store(), settings, resolver, Arc::new(Metrics::new())).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(relay.run(
        async {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    (stop, run)
}

/// An app whose own relay sends nothing.
async fn app_without_relay(backend: Backend) -> TestApp {
    let settings = WebhookSettings {
        relay_concurrency: 0,
        ..webhooks(&[])
    };
    app_with(backend, settings).await
}

async fn two_instances_deliver_2000_events_each_once(backend: Backend) {
    let app = app_without_relay(backend).await;
    let receiver = Receiver::start(|_| status(200)).await;
    let mut endpoints = Vec::new();
    for path in ["/a", "/b", "/c", "/d"] {
        endpoints.push(endpoint(&app, &receiver.url(path)).await);
    }
    let ids = many_events(&app, &endpoints, 2000).await;
    let settings = relay_settings(&[ms(50)]);
    let first = spawn_relay(&app, &settings, Resolver::default());
    let second = spawn_relay(&app, &settings, Resolver::default());
    poll("2000 deliveries succeeded", || async {
        let done = app
            .count("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'succeeded'")
            .await;
        (done == 2000).then_some(())
    })
    .await;
    for (stop, run) in [first, second] {
        let _ = stop.send(());
        run.await.unwrap();
    }
    let hits = receiver.hits();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for hit in &hits {
        *by_id.entry(hit.headers["webhook-id"].clone()).or_default() += 1;
    }
    assert_eq!(by_id.len(), 2000);
    assert!(ids.iter().all(|id| by_id.get(id) == Some(&1)), "each once");
    assert_eq!(hits.len(), 2000);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM webhook_attempts").await,
        2000
    );
    // Both instances sent.
    let owners = app
        .count("SELECT COUNT(*) FROM webhook_deliveries WHERE lease_owner IS NOT NULL")
        .await;
    assert_eq!(owners, 0, "every lease released");
}

async fn an_expired_lease_is_sent_again_and_a_live_one_is_left_alone(backend: Backend) {
    let app = app_without_relay(backend).await;
    let receiver = Receiver::start(|_| status(200)).await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let past = Utc::now() - chrono::Duration::minutes(2);
    let (expired, expired_id, expired_body) = event(&app, endpoint, 0, past).await;
    let (live, live_id, _) = event(&app, endpoint, 1, past).await;
    // A dead instance claimed the first (its lease ran out a minute ago);
    // a live one holds the second for ten more minutes.
    for (id, owner, until) in [
        (
            expired,
            "dead-instance",
            Utc::now() - chrono::Duration::minutes(1),
        ),
        (
            live,
            "live-instance",
            Utc::now() + chrono::Duration::minutes(10),
        ),
    ] {
        webhook_delivery::ActiveModel {
            id: Set(id),
            lease_owner: Set(Some(owner.to_owned())),
            leased_until: Set(Some(until)),
            ..Default::default()
        }
        .update(&app.db)
        .await
        .unwrap();
    }
    let (stop, run) = spawn_relay(&app, &relay_settings(&[]), Resolver::default());
    settled(&app, expired, DeliveryStatus::Succeeded).await;
    let _ = stop.send(());
    run.await.unwrap();
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].headers["webhook-id"], expired_id);
    assert_eq!(hits[0].body, expired_body.as_bytes());
    assert!(hits.iter().all(|hit| hit.headers["webhook-id"] != live_id));
    let live = delivery(&app, live).await;
    assert_eq!(live.status, DeliveryStatus::Pending);
    assert_eq!(live.lease_owner.as_deref(), Some("live-instance"));
    assert_eq!(live.attempts, 0);
}

async fn a_relay_whose_lease_was_taken_over_records_nothing(backend: Backend) {
    let app = app_without_relay(backend).await;
    let endpoint = endpoint(&app, "http://127.0.0.1:9/").await;
    let (id, _, _) = event(&app, endpoint, 0, Utc::now() - chrono::Duration::seconds(1)).await;
    let store = app.store();
    let claim = Claim {
        owner: "slow-instance".into(),
        lease: Duration::from_secs(60),
        capacity: Capacity {
            free: 4,
            per_endpoint: 4,
            in_flight: HashMap::new(),
        },
    };
    let claimed = store.relay().claim(&claim).await.unwrap();
    assert_eq!(claimed.deliveries.len(), 1);
    assert_eq!(claimed.deliveries[0].id, id);
    // Claimed again at once: the lease holds.
    assert!(
        store
            .relay()
            .claim(&claim)
            .await
            .unwrap()
            .deliveries
            .is_empty()
    );
    let row = delivery(&app, id).await;
    assert_eq!(row.lease_owner.as_deref(), Some("slow-instance"));
    let until = row.leased_until.unwrap();
    assert!(between(
        until - claimed.now,
        Duration::from_secs(60),
        Duration::from_secs(60)
    ));
    // Its lease expired and another instance took the delivery over.
    webhook_delivery::ActiveModel {
        id: Set(id),
        lease_owner: Set(Some("other-instance".into())),
        ..Default::default()
    }
    .update(&app.db)
    .await
    .unwrap();
    let attempt = Attempt {
        owner: "slow-instance".into(),
        delivery_id: id,
        endpoint_id: endpoint,
        failing_since: None,
        sent: Some(Sent {
            attempted_at: claimed.now.trunc_subsecs(6),
            duration_ms: 10,
            response_status: Some(200),
            outcome: "succeeded",
            excerpt: "ok".into(),
        }),
        after: After::Succeeded,
    };
    assert_eq!(
        store.relay().record(&attempt).await.unwrap(),
        Recorded::LeaseLost
    );
    let row = delivery(&app, id).await;
    assert_eq!(row.status, DeliveryStatus::Pending);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.lease_owner.as_deref(), Some("other-instance"));
    assert!(attempts(&app, id).await.is_empty());
    // The owner records.
    let attempt = Attempt {
        owner: "other-instance".into(),
        ..attempt
    };
    assert_eq!(
        store.relay().record(&attempt).await.unwrap(),
        Recorded::Done { disabled: None }
    );
    let row = delivery(&app, id).await;
    assert_eq!((row.status, row.attempts), (DeliveryStatus::Succeeded, 1));
    let attempted_at = claimed.now.trunc_subsecs(6);
    assert_eq!(row.last_attempt_at, Some(attempted_at));
    assert_eq!(
        (row.lease_owner, row.leased_until, row.next_attempt_at),
        (None, None, None)
    );
    let recorded = attempts(&app, id).await;
    assert_eq!(recorded.len(), 1);
    let recorded = &recorded[0];
    assert_eq!(recorded.attempted_at, attempted_at);
    assert_eq!(
        (
            recorded.duration_ms,
            recorded.response_status,
            &recorded.outcome
        ),
        (10, Some(200), &AttemptOutcome::Succeeded)
    );
    assert_eq!(
        (recorded.response_excerpt.as_str(), recorded.next_attempt_at),
        ("ok", None)
    );
}

async fn a_delivery_cut_by_a_killed_instance_arrives_again_with_the_same_id_and_bytes(
    backend: Backend,
) {
    let app = app_without_relay(backend).await;
    // Holds every request while `hold` is on: what A sends never ends.
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let holding = Arc::clone(&hold);
    let receiver = Receiver::holding(move |_| {
        (!holding.load(std::sync::atomic::Ordering::SeqCst)).then(|| status(200))
    })
    .await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for cents in 101..=106 {
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let order = app.order(user, None, &amount, "cstm:paygate").await;
        let completed = app.complete_order(&token, &order, "cstm:paygate").await;
        assert_eq!(completed.status, 200, "{completed:?}");
    }
    let events = webhook_event::Entity::find().all(&app.db).await.unwrap();
    assert_eq!(events.len(), 12, "created and completed, per order");
    // The shortest lease the settings allow, and the relay on: only A runs
    // until it is killed.
    let relay = [
        ("MASTERPAY_LOG", "warn"),
        ("MASTERPAY_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"),
        ("MASTERPAY_WEBHOOK_POLL_INTERVAL_MS", "50"),
        ("MASTERPAY_WEBHOOK_LEASE_MS", "30000"),
    ];
    let mut a = common::ServerProcess::start(&app.database.url, &relay).await;
    let a_owner = format!("{}-", a.child.id());
    poll("a request from A held", || async {
        receiver.hits().iter().any(|hit| hit.held).then_some(())
    })
    .await;
    a.kill_hard();
    let held: Vec<String> = receiver
        .hits()
        .into_iter()
        .filter(|hit| hit.held)
        .map(|hit| hit.headers["webhook-id"].clone())
        .collect();
    // What A had in flight is leased to it, and stays so until the lease
    // expires: nothing else sends it meanwhile.
    let leased_to_a: Vec<String> = webhook_delivery::Entity::find()
        .find_also_related(webhook_event::Entity)
        .all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .filter(|(d, _)| {
            d.lease_owner
                .as_ref()
                .is_some_and(|o| o.starts_with(&a_owner))
        })
        .map(|(_, event)| event.unwrap().webhook_id)
        .collect();
    assert!(
        held.iter().all(|id| leased_to_a.contains(id)),
        "held {held:?}, leased to A {leased_to_a:?}"
    );

    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    let _b = common::ServerProcess::start(&app.database.url, &relay).await;
    poll("every delivery succeeded", || async {
        let done = app
            .count("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'succeeded'")
            .await;
        (done == 12).then_some(())
    })
    .await;

    let hits = receiver.hits();
    let key = SigningKey::from_secret(SECRET).unwrap();
    let mut copies_seen = 0;
    for event in &events {
        let copies: Vec<&Hit> = hits
            .iter()
            .filter(|hit| hit.headers["webhook-id"] == event.webhook_id)
            .collect();
        copies_seen += copies.len();
        let answered: Vec<&Hit> = copies.iter().copied().filter(|hit| !hit.held).collect();
        assert!(!answered.is_empty(), "{} never answered", event.webhook_id);
        if held.contains(&event.webhook_id) {
            assert!(copies.len() >= 2, "{} sent once", event.webhook_id);
        }
        for copy in &copies {
            assert_eq!(copy.body, event.payload.as_bytes(), "the recorded bytes");
            let timestamp = copy.headers["webhook-timestamp"].parse().unwrap();
            let signature = &copy.headers["webhook-signature"];
            assert!(verify(
                &key,
                signature,
                &event.webhook_id,
                timestamp,
                &copy.body
            ));
        }
        // One attempt, recorded by B for a copy it had answered: A, killed
        // mid-send, recorded nothing.
        let delivery = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EventId.eq(event.id))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(delivery.endpoint_id, endpoint);
        assert_eq!((delivery.attempts, delivery.lease_owner), (1, None));
        let tries = attempts(&app, delivery.id).await;
        assert_eq!(tries.len(), 1, "{tries:?}");
        assert_eq!(tries[0].outcome, AttemptOutcome::Succeeded);
        assert_eq!(tries[0].response_status, Some(200));
        let sent_at = tries[0].attempted_at.timestamp().to_string();
        assert!(
            answered
                .iter()
                .any(|hit| hit.headers["webhook-timestamp"] == sent_at),
            "the attempt recorded is of an answered copy"
        );
    }
    assert_eq!(copies_seen, hits.len(), "every request is of an event");
}

async fn an_order_created_and_completed_through_the_api_reaches_its_endpoint(backend: Backend) {
    let settings = webhooks(&[ms(50)]);
    let destinations = Destinations {
        policy: DestinationPolicy::of(&settings),
        lookup: Resolver::default(),
    };
    let app = app_with(backend, settings).await;
    let receiver = Receiver::start(|_| status(200)).await;
    let (endpoint, secret) = webhook_endpoints::create(
        &app.db,
        None,
        &destinations,
        &Actor::CommandLine,
        app.project_id,
        &receiver.url("/masterpay"),
        None,
        None,
    )
    .await
    .unwrap();
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "10.25", "cstm:paygate").await;
    let completed = app.complete_order(&token, &order, "cstm:paygate").await;
    assert_eq!(completed.status, 200, "{completed:?}");
    let hits = poll("two events received", || async {
        let hits = receiver.hits();
        (hits.len() >= 2).then_some(hits)
    })
    .await;
    let key = SigningKey::from_secret(secret.expose()).unwrap();
    let mut types = Vec::new();
    for hit in &hits {
        let id = &hit.headers["webhook-id"];
        let timestamp = hit.headers["webhook-timestamp"].parse().unwrap();
        assert!(verify(
            &key,
            &hit.headers["webhook-signature"],
            id,
            timestamp,
            &hit.body
        ));
        let stored = webhook_event::Entity::find()
            .filter(webhook_event::Column::WebhookId.eq(id.as_str()))
            .one(&app.db)
            .await
            .unwrap()
            .expect("a recorded event");
        assert_eq!(hit.body, stored.payload.as_bytes(), "the recorded bytes");
        let body: serde_json::Value = serde_json::from_slice(&hit.body).unwrap();
        assert_eq!(body["data"]["order_id"], order.as_str());
        types.push(body["type"].as_str().unwrap().to_owned());
    }
    types.sort();
    assert_eq!(types, ["order.completed", "order.created"]);
    poll("both deliveries succeeded", || async {
        let done = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint.id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Succeeded))
            .all(&app.db)
            .await
            .unwrap();
        (done.len() == 2).then_some(())
    })
    .await;
    assert_eq!(receiver.hits().len(), 2);
}

async fn test_rotate_resend_and_replay_only_enqueue_and_the_relay_sends(backend: Backend) {
    let app = app_with(backend, webhooks(&[])).await;
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fails = Arc::clone(&failing);
    let receiver = Receiver::start(move |_| {
        if fails.load(std::sync::atomic::Ordering::SeqCst) {
            status(500)
        } else {
            status(200)
        }
    })
    .await;
    let destinations = Destinations {
        policy: DestinationPolicy::of(&webhooks(&[])),
        lookup: Resolver::default(),
    };
    let actor = &Actor::CommandLine;
    let (endpoint, old_secret) = webhook_endpoints::create(
        &app.db,
        None,
        &destinations,
        actor,
        app.project_id,
        &receiver.url("/"),
        None,
        None,
    )
    .await
    .unwrap();
    let old = SigningKey::from_secret(old_secret.expose()).unwrap();
    let received = |n: usize| {
        let receiver = &receiver;
        poll("the receiver's hits", move || async move {
            let hits = receiver.hits();
            (hits.len() >= n).then_some(hits)
        })
    };

    // A test event: to this endpoint, signed with its secret.
    let event = webhook_redelivery::test_endpoint(&app.db, actor, endpoint.id)
        .await
        .unwrap();
    let hits = received(1).await;
    let body: serde_json::Value = serde_json::from_slice(&hits[0].body).unwrap();
    assert_eq!(body["type"], "webhook.test");
    assert_eq!(body["data"]["endpoint_id"], endpoint.id);
    assert_eq!(hits[0].headers["webhook-id"], event.webhook_id);

    // Rotated with an overlap: both secrets sign, either verifies.
    let (_, new_secret) = webhook_redelivery::rotate_secret(
        &app.db,
        None,
        actor,
        endpoint.id,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let new = SigningKey::from_secret(new_secret.expose()).unwrap();
    // Sent again: the same id and bytes.
    let sent_to = webhook_redelivery::resend(&app.db, actor, event.id, None)
        .await
        .unwrap();
    assert_eq!(sent_to, [endpoint.id]);
    let hits = received(2).await;
    let again = &hits[1];
    assert_eq!(again.headers["webhook-id"], event.webhook_id);
    assert_eq!(again.body, hits[0].body);
    let signature = &again.headers["webhook-signature"];
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    let timestamp = again.headers["webhook-timestamp"].parse().unwrap();
    for key in [&old, &new] {
        assert!(verify(
            key,
            signature,
            &event.webhook_id,
            timestamp,
            &again.body
        ));
    }
    // Without an overlap, only the new secret signs.
    webhook_redelivery::rotate_secret(&app.db, None, actor, endpoint.id, Duration::ZERO)
        .await
        .unwrap();
    let too_long = webhook_redelivery::rotate_secret(
        &app.db,
        None,
        actor,
        endpoint.id,
        Duration::from_secs(8 * 86_400),
    )
    .await;
    assert!(matches!(too_long, Err(AdminError::Invalid("overlap", _))));

    // A failed delivery is sent again by a replay of its window, once.
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let failed = webhook_redelivery::test_endpoint(&app.db, actor, endpoint.id)
        .await
        .unwrap();
    poll("the test event failed", || async {
        let rows = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EventId.eq(failed.id))
            .all(&app.db)
            .await
            .unwrap();
        rows.iter()
            .all(|d| d.status == DeliveryStatus::Failed)
            .then_some(())
    })
    .await;
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let since = Utc::now() - chrono::Duration::hours(1);
    let replayed = webhook_redelivery::replay(&app.db, actor, endpoint.id, since, None)
        .await
        .unwrap();
    assert_eq!(replayed, 1, "only the failed event");
    let hits = received(4).await;
    assert_eq!(hits[3].headers["webhook-id"], failed.webhook_id);
    poll("the replayed delivery succeeded", || async {
        let rows = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EventId.eq(failed.id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Succeeded))
            .all(&app.db)
            .await
            .unwrap();
        (rows.len() == 1).then_some(())
    })
    .await;
    // Delivered now: a second replay has nothing to send.
    let again = webhook_redelivery::replay(&app.db, actor, endpoint.id, since, None)
        .await
        .unwrap();
    assert_eq!(again, 0);
    let wide = webhook_redelivery::replay(
        &app.db,
        actor,
        endpoint.id,
        Utc::now() - chrono::Duration::days(15),
        None,
    )
    .await;
    assert!(matches!(wide, Err(AdminError::Invalid("since", _))));
    // A disabled endpoint is sent nothing.
    webhook_endpoints::set_enabled(&app.db, actor, endpoint.id, false)
        .await
        .unwrap();
    let disabled = webhook_redelivery::test_endpoint(&app.db, actor, endpoint.id).await;
    assert!(matches!(disabled, Err(AdminError::Invalid("endpoint", _))));
    assert_eq!(receiver.hits().len(), 4);
    let audited = app
        .count(
            "SELECT COUNT(*) FROM admin_audit_log WHERE action IN ('webhook_endpoint.test', \
             'webhook_endpoint.rotate_secret', 'webhook_event.resend', 'webhook_endpoint.replay')",
        )
        .await;
    assert_eq!(audited, 7);
}

/// `masterpay ARGS` on the app's database; its exit status and output.
fn masterpay(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", &app.database.url)
        .env("MASTERPAY_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
        .env_remove("MASTERPAY_LOG")
        .env_remove("MASTERPAY_CONFIG")
        .env_remove("MASTERPAY_WEBHOOK_SECRET_KEY")
        .output()
        .expect("run masterpay");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

async fn the_commands_enqueue_rotate_and_refuse_in_one_line(backend: Backend) {
    let app = app_without_relay(backend).await;
    let project = app.project_id.to_string();
    let (ok, out, err) = masterpay(
        &app,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "http://127.0.0.1:9/in",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let made: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = made["id"].as_i64().unwrap().to_string();
    let (ok, out, err) = masterpay(&app, &["webhook", "endpoint", "test", &id, "--json"]);
    assert!(ok, "{err}");
    let test: serde_json::Value = serde_json::from_str(&out).unwrap();
    let event = test["event_id"].as_i64().unwrap();
    assert!(test["webhook_id"].as_str().unwrap().starts_with("msg_"));
    let pending = app
        .count(&format!(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = {event} AND status = 'pending'"
        ))
        .await;
    assert_eq!(pending, 1, "queued for the relay, not sent");
    let (ok, out, err) = masterpay(
        &app,
        &[
            "webhook",
            "endpoint",
            "rotate-secret",
            &id,
            "--overlap",
            "2h",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let rotated: serde_json::Value = serde_json::from_str(&out).unwrap();
    let secret = rotated["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_") && secret != made["secret"].as_str().unwrap());
    let until: DateTime<Utc> = rotated["previous_secret_until"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(between(
        until - Utc::now(),
        Duration::from_secs(7000),
        Duration::from_secs(7200)
    ));
    let (ok, out, err) = masterpay(&app, &["webhook", "resend", &event.to_string()]);
    assert!(ok, "{err}");
    assert!(out.contains("queued"), "{out}");
    for (args, message) in [
        (
            vec!["webhook", "resend", "999999"],
            "webhook event 999999 does not exist",
        ),
        (
            vec![
                "webhook",
                "replay",
                "--endpoint",
                &id,
                "--since",
                "2026-01-01T00:00:00Z",
                "--until",
                "2026-02-01T00:00:00Z",
            ],
            "the window is at most 14 days",
        ),
    ] {
        let (ok, out, err) = masterpay(&app, &args);
        assert!(!ok && out.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(message), "{err}");
    }
    let (ok, _, err) = masterpay(
        &app,
        &[
            "webhook",
            "replay",
            "--endpoint",
            &id,
            "--since",
            "yesterday",
        ],
    );
    assert!(!ok && err.contains("RFC 3339"), "{err}");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'")
            .await,
        2,
        "the refusals queued nothing"
    );
}

async fn a_served_relay_logs_no_secret_or_signature_even_at_trace(backend: Backend) {
    let app = app_without_relay(backend).await;
    let receiver = Receiver::start(|_| status(200)).await;
    let endpoint = endpoint(&app, &receiver.url("/")).await;
    let (id, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    let mut server = common::ServerProcess::start(
        &app.database.url,
        &[
            ("MASTERPAY_LOG", "trace"),
            ("MASTERPAY_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"),
            ("MASTERPAY_WEBHOOK_POLL_INTERVAL_MS", "50"),
        ],
    )
    .await;
    settled(&app, id, DeliveryStatus::Succeeded).await;
    assert_eq!(server.terminate().code(), Some(0));
    let log = server.log();
    assert!(
        log.contains("webhook attempt"),
        "attempts are logged at debug"
    );
    let hits = receiver.hits();
    let signature = hits[0].headers["webhook-signature"].clone();
    let key = SECRET.trim_start_matches("whsec_");
    for secret in [SECRET, key, signature.as_str(), &signature[3..]] {
        assert!(!log.contains(secret), "{secret} is in the log");
    }
}

/// A resolver whose answer the test changes.
struct Switchable(Mutex<Vec<IpAddr>>);

impl Lookup for Switchable {
    fn lookup<'a>(
        &'a self,
        _: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(std::future::ready(Ok(self.0.lock().unwrap().clone())))
    }
}

async fn a_name_that_resolves_elsewhere_at_send_time_is_refused(backend: Backend) {
    let app = app_without_relay(backend).await;
    let receiver = Receiver::start(|_| status(200)).await;
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    let metadata: IpAddr = "169.254.169.254".parse().unwrap();
    let lookup = Arc::new(Switchable(Mutex::new(vec![loopback])));
    let settings = relay_settings(&[ms(50); 20]);
    let destinations = Destinations {
        policy: DestinationPolicy::of(&settings.webhooks),
        lookup: Resolver(lookup.clone()),
    };
    let create = |url: String| {
        let (db, destinations) = (app.db.clone(), destinations.clone());
        let project = app.project_id;
        async move {
            webhook_endpoints::create(
                &db,
                None,
                &destinations,
                &Actor::CommandLine,
                project,
                &url,
                None,
                None,
            )
            .await
        }
    };
    // A name only this resolver knows: the client can reach it through no
    // other lookup.
    let url = format!("http://hooks.masterpay.test:{}/", receiver.addr.port());
    // Accepted when the endpoint is made: it resolves to an allowed address.
    let (made, secret) = create(url.clone()).await.unwrap();
    let endpoint = made.id;
    // Then it moves to the cloud's metadata service, where no endpoint is
    // accepted.
    *lookup.0.lock().unwrap() = vec![metadata];
    match create(url.clone()).await {
        Err(AdminError::Invalid("url", why)) => assert_eq!(
            why,
            "169.254.169.254 is not a public address (webhook_allow_networks can allow it)"
        ),
        other => panic!("{other:?}"),
    }
    for literal in [
        "http://169.254.169.254/",
        "http://0xa9fea9fe/",
        "http://[::ffff:10.0.0.1]/",
    ] {
        let refused = create(literal.to_owned()).await;
        assert!(
            matches!(refused, Err(AdminError::Invalid("url", _))),
            "{literal}"
        );
    }
    let (id, _, _) = event(&app, endpoint, 0, Utc::now()).await;
    let (stop, run) = spawn_relay(&app, &settings, Resolver(lookup.clone()));
    let first = poll("a first attempt", || async {
        attempts(&app, id).await.into_iter().next()
    })
    .await;
    assert_eq!(first.outcome, AttemptOutcome::RefusedAddress);
    assert_eq!(first.response_status, None);
    assert!(
        first
            .response_excerpt
            .contains("169.254.169.254 is not a public address"),
        "{first:?}"
    );
    assert!(receiver.hits().is_empty());
    // Back on an allowed address, the next attempt connects to it.
    *lookup.0.lock().unwrap() = vec![loopback];
    settled(&app, id, DeliveryStatus::Succeeded).await;
    let _ = stop.send(());
    run.await.unwrap();
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1);
    // Signed with the secret the endpoint was made with (sealed in the
    // database, shown once).
    let key = SigningKey::from_secret(secret.expose()).unwrap();
    let timestamp = hits[0].headers["webhook-timestamp"].parse().unwrap();
    let signature = &hits[0].headers["webhook-signature"];
    assert!(verify(
        &key,
        signature,
        &hits[0].headers["webhook-id"],
        timestamp,
        &hits[0].body
    ));
}
