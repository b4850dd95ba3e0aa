//! Runtime settings: flags > environment > TOML file > defaults.
//!
//! Each key is declared once, in [`SettingsArgs`]: its flag (on `serve`), its
//! `MASTERPAY_*` variable and its key in the file named by `--config` /
//! `MASTERPAY_CONFIG` come from the same field, so that they cannot drift
//! apart. Every command reads the environment and the file, not only
//! `serve`: `admin login-link` must name the panel address `serve` listens
//! on. Every default is safe for the panel's 3-second webhook caller: a
//! request waits at most 1.5 s for a database connection and is answered
//! within 2.5 s whatever happens.

use std::{net::IpAddr, path::Path, time::Duration};

use clap::{Args, FromArgMatches};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Default database: an SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://masterpay.db";
/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default listen address of the administration panel: this host only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8081";
/// Default listen address of the Prometheus metrics: this host only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9090";
/// The `admin_listen` or `metrics_listen` value that turns its listener
/// off.
pub const LISTEN_OFF: &str = "off";
/// Default largest request body, the 64 KiB openapi/v2.yaml publishes: a
/// completion body is a few hundred bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// Pool and timeout settings of the database connections.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// How long a request waits for a pooled connection (or a new one) before
    /// it fails; keeps answers fast while the database is unreachable.
    pub acquire_timeout: Duration,
    /// Upper bound for one statement (PostgreSQL `statement_timeout`,
    /// MariaDB `max_statement_time`, SQLite's wait for the write lock).
    pub statement_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            acquire_timeout: Duration::from_millis(1500),
            statement_timeout: Duration::from_secs(2),
        }
    }
}

/// Everything the service needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    pub listen: String,
    /// The administration panel's own listener; `None` when it is off.
    pub admin_listen: Option<String>,
    /// Whether the panel's cookies carry `Secure` (the panel behind TLS);
    /// required to listen on anything but a loopback address.
    pub admin_cookie_secure: bool,
    /// Proxies whose `X-Forwarded-For` names the panel's clients (the
    /// address sign-in limits count and the audit log keeps).
    pub admin_trusted_proxies: Vec<IpAddr>,
    /// The Prometheus metrics' own listener (`/metrics`, without
    /// authentication); `None` when it is off.
    pub metrics_listen: Option<String>,
    pub pool: PoolSettings,
    /// Upper bound for answering one request (503 SERVICE_UNAVAILABLE after).
    pub request_timeout: Duration,
    /// A connection with no traffic for this long is closed (slow clients).
    pub idle_timeout: Duration,
    /// Largest request body; larger ones get 413 PAYLOAD_TOO_LARGE.
    pub max_body_bytes: usize,
    /// How long in-flight requests may run after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// The key webhook secrets are sealed with at rest; `None`: they are
    /// stored in clear.
    pub webhook_secret_key: Option<WebhookSecretKey>,
    /// Where outgoing webhooks may go and how the relay sends them.
    pub webhooks: WebhookSettings,
    /// How long finished deliveries, their attempts and delivered events
    /// are kept (`service::webhook_events::purge`); never below
    /// [`MIN_WEBHOOK_RETENTION_DAYS`].
    pub webhook_retention_days: u32,
}

/// The shortest `webhook_retention_days`: events stay at least as long as
/// they may be sent again.
pub const MIN_WEBHOOK_RETENTION_DAYS: u32 = 14;

/// The 32-byte key that seals webhook secrets at rest (see
/// `service::webhook_secrets`). Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecretKey([u8; 32]);

impl WebhookSecretKey {
    pub fn new(bytes: [u8; 32]) -> WebhookSecretKey {
        WebhookSecretKey(bytes)
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for WebhookSecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecretKey([redacted])")
    }
}

impl std::str::FromStr for WebhookSecretKey {
    type Err = String;

    /// 32 bytes in standard base64 (`openssl rand -base64 32`).
    fn from_str(text: &str) -> Result<WebhookSecretKey, String> {
        use base64::{Engine, engine::general_purpose::STANDARD};
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| "webhook_secret_key is not base64".to_owned())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| {
            format!(
                "webhook_secret_key must be 32 bytes in base64, not {}",
                bytes.len()
            )
        })?;
        Ok(WebhookSecretKey(bytes))
    }
}

/// The outgoing webhooks' relay and destinations (see `relay` and
/// `service::webhook_destination`).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Networks that endpoints may reach although they are not public.
    pub allow_networks: Vec<IpNet>,
    /// Whether endpoints must be `https://`.
    pub https_only: bool,
    /// The waits before each retry of a failed delivery; a delivery is
    /// tried once more than it has waits, then it fails.
    pub retry_schedule: Vec<Duration>,
    /// How long a relay instance holds the deliveries it claimed: at least
    /// twice a send's bound, so that a send ends long before another
    /// instance may take its delivery over.
    pub lease: Duration,
    /// An endpoint failing for this long (every attempt since its first
    /// failure failed) is disabled.
    pub disable_after: Duration,
    /// The longest wait a `Retry-After` answer can ask for.
    pub retry_after_max: Duration,
    /// Deliveries in hand at once per instance (being sent or recorded);
    /// 0: this instance sends none.
    pub relay_concurrency: usize,
    /// Requests in flight at once to one endpoint, per instance.
    pub endpoint_concurrency: usize,
    /// How often the relay looks for due deliveries.
    pub poll_interval: Duration,
    /// The relay's own database connections, per instance (PostgreSQL and
    /// MariaDB; on SQLite it shares the one writer).
    pub db_connections: u32,
}

/// The bound of one send (connect, request, answer): see `relay`.
pub const WEBHOOK_SEND_TIMEOUT: Duration = Duration::from_secs(15);

impl Default for WebhookSettings {
    fn default() -> Self {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        WebhookSettings {
            allow_networks: Vec::new(),
            https_only: false,
            retry_schedule: vec![
                Duration::from_secs(5),
                minutes(5),
                minutes(30),
                minutes(2 * 60),
                minutes(5 * 60),
                minutes(10 * 60),
                minutes(14 * 60),
                minutes(20 * 60),
                minutes(24 * 60),
            ],
            lease: Duration::from_secs(60),
            disable_after: minutes(5 * 24 * 60),
            retry_after_max: minutes(24 * 60),
            relay_concurrency: 64,
            endpoint_concurrency: 16,
            poll_interval: Duration::from_millis(100),
            db_connections: 16,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            listen: DEFAULT_LISTEN.to_owned(),
            admin_listen: Some(DEFAULT_ADMIN_LISTEN.to_owned()),
            admin_cookie_secure: false,
            admin_trusted_proxies: Vec::new(),
            metrics_listen: Some(DEFAULT_METRICS_LISTEN.to_owned()),
            pool: PoolSettings::default(),
            request_timeout: Duration::from_millis(2500),
            idle_timeout: Duration::from_secs(30),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            shutdown_grace: Duration::from_secs(10),
            webhook_secret_key: None,
            webhooks: WebhookSettings::default(),
            webhook_retention_days: 30,
        }
    }
}

/// The settings one source gives, each key `None` unless it gives it: flags
/// with their environment variables, or the variables alone (clap), or the
/// TOML file (serde; the keys are the long flags with underscores, and an
/// unknown one is refused so that a misspelt key is not silently ignored).
#[derive(Debug, Clone, Default, Args, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsArgs {
    /// A global flag (`--database-url`), read by the command line itself.
    #[arg(skip)]
    pub database_url: Option<String>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "MASTERPAY_LISTEN")]
    pub listen: Option<String>,
    /// Address of the administration panel, or `off` [default: 127.0.0.1:8081].
    #[arg(long, env = "MASTERPAY_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Mark the panel's cookies Secure (the panel is served behind TLS);
    /// required for a non-loopback admin_listen [default: false].
    #[arg(long, env = "MASTERPAY_ADMIN_COOKIE_SECURE", num_args = 0..=1, default_missing_value = "true")]
    pub admin_cookie_secure: Option<bool>,
    /// Addresses of the reverse proxies in front of the panel, comma
    /// separated; their X-Forwarded-For names the client [default: none].
    #[arg(long, env = "MASTERPAY_ADMIN_TRUSTED_PROXIES", value_delimiter = ',')]
    pub admin_trusted_proxies: Option<Vec<String>>,
    /// Address of the Prometheus metrics (`/metrics`), or `off` [default: 127.0.0.1:9090].
    #[arg(long, env = "MASTERPAY_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Largest number of database connections per instance [default: 16].
    #[arg(long, env = "MASTERPAY_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
    /// How long a request waits for a database connection, in ms [default: 1500].
    #[arg(long, env = "MASTERPAY_DB_ACQUIRE_TIMEOUT_MS")]
    pub db_acquire_timeout_ms: Option<u64>,
    /// Statement timeout (PostgreSQL, MariaDB), in ms [default: 2000].
    #[arg(long, env = "MASTERPAY_DB_STATEMENT_TIMEOUT_MS")]
    pub db_statement_timeout_ms: Option<u64>,
    /// Upper bound for answering one request, in ms [default: 2500].
    #[arg(long, env = "MASTERPAY_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// Close connections idle for this long, in ms [default: 30000].
    #[arg(long, env = "MASTERPAY_IDLE_TIMEOUT_MS")]
    pub idle_timeout_ms: Option<u64>,
    /// Largest request body in bytes [default: 65536].
    #[arg(long, env = "MASTERPAY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Grace period for in-flight requests on shutdown, in ms [default: 10000].
    #[arg(long, env = "MASTERPAY_SHUTDOWN_GRACE_MS")]
    pub shutdown_grace_ms: Option<u64>,
    /// Key sealing webhook secrets at rest: 32 bytes in base64 (`openssl
    /// rand -base64 32`). Give it by the environment or the file: a flag
    /// shows in the process list [default: none, secrets stored in clear].
    #[arg(long, env = "MASTERPAY_WEBHOOK_SECRET_KEY", hide_env_values = true)]
    pub webhook_secret_key: Option<String>,
    /// Networks (CIDRs, comma separated) that webhook endpoints may reach
    /// although they are not public: loopback, private, link-local...
    /// [default: none].
    #[arg(long, env = "MASTERPAY_WEBHOOK_ALLOW_NETWORKS", value_delimiter = ',')]
    pub webhook_allow_networks: Option<Vec<String>>,
    /// Accept only https:// webhook endpoints [default: false].
    #[arg(long, env = "MASTERPAY_WEBHOOK_HTTPS_ONLY", num_args = 0..=1, default_missing_value = "true")]
    pub webhook_https_only: Option<bool>,
    /// Waits before each retry of a failed webhook, comma separated
    /// [default: 5s,5m,30m,2h,5h,10h,14h,20h,24h].
    #[arg(long, env = "MASTERPAY_WEBHOOK_RETRY_SCHEDULE", value_delimiter = ',')]
    pub webhook_retry_schedule: Option<Vec<String>>,
    /// How long a relay instance holds the deliveries it claimed, in ms;
    /// at least 30000 [default: 60000].
    #[arg(long, env = "MASTERPAY_WEBHOOK_LEASE_MS")]
    pub webhook_lease_ms: Option<u64>,
    /// Disable an endpoint whose attempts have all failed for this long
    /// [default: 5days].
    #[arg(long, env = "MASTERPAY_WEBHOOK_DISABLE_AFTER")]
    pub webhook_disable_after: Option<String>,
    /// The longest wait a Retry-After answer can ask for [default: 24h].
    #[arg(long, env = "MASTERPAY_WEBHOOK_RETRY_AFTER_MAX")]
    pub webhook_retry_after_max: Option<String>,
    /// Webhook deliveries in hand at once per instance (being sent or
    /// recorded); 0 sends none from this instance [default: 64].
    #[arg(long, env = "MASTERPAY_WEBHOOK_RELAY_CONCURRENCY")]
    pub webhook_relay_concurrency: Option<usize>,
    /// Webhook requests in flight at once to one endpoint, per instance
    /// [default: 16].
    #[arg(long, env = "MASTERPAY_WEBHOOK_ENDPOINT_CONCURRENCY")]
    pub webhook_endpoint_concurrency: Option<usize>,
    /// How often the relay looks for due webhook deliveries, in ms
    /// [default: 100].
    #[arg(long, env = "MASTERPAY_WEBHOOK_POLL_INTERVAL_MS")]
    pub webhook_poll_interval_ms: Option<u64>,
    /// The webhook relay's own database connections per instance, on
    /// PostgreSQL and MariaDB [default: 16].
    #[arg(long, env = "MASTERPAY_WEBHOOK_DB_CONNECTIONS")]
    pub webhook_db_connections: Option<u32>,
    /// Days finished webhook deliveries and delivered events are kept, at
    /// least 14 [default: 30].
    #[arg(long, env = "MASTERPAY_WEBHOOK_RETENTION_DAYS")]
    pub webhook_retention_days: Option<u32>,
}

impl SettingsArgs {
    /// The `MASTERPAY_*` variables alone, for the commands without these
    /// flags: clap reads them as it does for `serve`, from no arguments.
    pub fn from_environment() -> anyhow::Result<SettingsArgs> {
        SettingsArgs::augment_args(clap::Command::new("masterpay"))
            .try_get_matches_from(["masterpay"])
            .and_then(|matches| SettingsArgs::from_arg_matches(&matches))
            .map_err(|err| {
                let rendered = err.to_string();
                let first = rendered.lines().next().unwrap_or_default();
                let first = first.trim_start_matches("error: ");
                anyhow::anyhow!("MASTERPAY_* variables: {first}")
            })
    }

    /// The TOML file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<SettingsArgs> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| anyhow::anyhow!("cannot read config file {}: {err}", path.display()))?;
        toml::from_str(&text).map_err(|err| {
            let message = err.message().to_owned();
            anyhow::anyhow!("config file {}: {message}", path.display())
        })
    }

    /// The keys `self` gives, over those of `lower`. Merged as JSON objects
    /// (an absent key is `null`), so that a new key needs no line here.
    fn over(self, lower: SettingsArgs) -> SettingsArgs {
        let object = |layer| match serde_json::to_value(layer) {
            Ok(serde_json::Value::Object(keys)) => keys,
            _ => unreachable!("a struct of options is a JSON object"),
        };
        let mut merged = object(lower);
        merged.extend(
            object(self)
                .into_iter()
                .filter(|(_, value)| !value.is_null()),
        );
        serde_json::from_value(merged.into()).expect("the same keys with the same types")
    }
}

impl Settings {
    /// `given` (flags and environment) over `file` over the defaults,
    /// checked.
    pub fn resolve(file: SettingsArgs, given: SettingsArgs) -> anyhow::Result<Settings> {
        // Destructured, so that a key added above cannot be left unused here.
        let SettingsArgs {
            database_url,
            listen,
            admin_listen,
            admin_cookie_secure,
            admin_trusted_proxies,
            metrics_listen,
            db_max_connections,
            db_acquire_timeout_ms,
            db_statement_timeout_ms,
            request_timeout_ms,
            idle_timeout_ms,
            max_body_bytes,
            shutdown_grace_ms,
            webhook_secret_key,
            webhook_allow_networks,
            webhook_https_only,
            webhook_retry_schedule,
            webhook_lease_ms,
            webhook_disable_after,
            webhook_retry_after_max,
            webhook_relay_concurrency,
            webhook_endpoint_concurrency,
            webhook_poll_interval_ms,
            webhook_db_connections,
            webhook_retention_days,
        } = given.over(file);
        let d = Settings::default();
        let ms = |given: Option<u64>, default| given.map_or(default, Duration::from_millis);
        let settings = Settings {
            database_url: database_url.unwrap_or(d.database_url),
            listen: listen.unwrap_or(d.listen),
            admin_listen: listener(admin_listen, d.admin_listen),
            admin_cookie_secure: admin_cookie_secure.unwrap_or(d.admin_cookie_secure),
            admin_trusted_proxies: items(admin_trusted_proxies, d.admin_trusted_proxies, |text| {
                text.parse().map_err(|_| {
                    anyhow::anyhow!("admin_trusted_proxies: {text:?} is not an IP address")
                })
            })?,
            metrics_listen: listener(metrics_listen, d.metrics_listen),
            pool: PoolSettings {
                max_connections: db_max_connections.unwrap_or(d.pool.max_connections),
                acquire_timeout: ms(db_acquire_timeout_ms, d.pool.acquire_timeout),
                statement_timeout: ms(db_statement_timeout_ms, d.pool.statement_timeout),
            },
            request_timeout: ms(request_timeout_ms, d.request_timeout),
            idle_timeout: ms(idle_timeout_ms, d.idle_timeout),
            max_body_bytes: max_body_bytes.unwrap_or(d.max_body_bytes),
            shutdown_grace: ms(shutdown_grace_ms, d.shutdown_grace),
            webhook_secret_key: webhook_secret_key
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|err: String| anyhow::anyhow!(err))?,
            webhooks: WebhookSettings {
                allow_networks: items(webhook_allow_networks, d.webhooks.allow_networks, network)?,
                https_only: webhook_https_only.unwrap_or(d.webhooks.https_only),
                retry_schedule: items(webhook_retry_schedule, d.webhooks.retry_schedule, |text| {
                    duration("webhook_retry_schedule", text)
                })?,
                lease: ms(webhook_lease_ms, d.webhooks.lease),
                disable_after: webhook_disable_after
                    .map(|text| duration("webhook_disable_after", &text))
                    .transpose()?
                    .unwrap_or(d.webhooks.disable_after),
                retry_after_max: webhook_retry_after_max
                    .map(|text| duration("webhook_retry_after_max", &text))
                    .transpose()?
                    .unwrap_or(d.webhooks.retry_after_max),
                relay_concurrency: webhook_relay_concurrency
                    .unwrap_or(d.webhooks.relay_concurrency),
                endpoint_concurrency: webhook_endpoint_concurrency
                    .unwrap_or(d.webhooks.endpoint_concurrency),
                poll_interval: ms(webhook_poll_interval_ms, d.webhooks.poll_interval),
                db_connections: webhook_db_connections.unwrap_or(d.webhooks.db_connections),
            },
            webhook_retention_days: webhook_retention_days.unwrap_or(d.webhook_retention_days),
        };
        if settings.webhook_retention_days < MIN_WEBHOOK_RETENTION_DAYS {
            anyhow::bail!(
                "webhook_retention_days must be at least {MIN_WEBHOOK_RETENTION_DAYS}: \
                 events are kept as long as they may be sent again"
            );
        }
        if settings.pool.max_connections == 0 {
            anyhow::bail!("db_max_connections must be at least 1");
        }
        if settings.webhooks.db_connections == 0 {
            anyhow::bail!("webhook_db_connections must be at least 1");
        }
        for (name, value) in [
            ("db_acquire_timeout_ms", settings.pool.acquire_timeout),
            ("db_statement_timeout_ms", settings.pool.statement_timeout),
            ("request_timeout_ms", settings.request_timeout),
            ("idle_timeout_ms", settings.idle_timeout),
            ("webhook_poll_interval_ms", settings.webhooks.poll_interval),
            ("webhook_disable_after", settings.webhooks.disable_after),
        ] {
            if value.is_zero() {
                anyhow::bail!("{name} must be greater than 0");
            }
        }
        let webhooks = &settings.webhooks;
        if webhooks.lease < 2 * WEBHOOK_SEND_TIMEOUT {
            anyhow::bail!(
                "webhook_lease_ms must be at least {} (twice a send's bound)",
                (2 * WEBHOOK_SEND_TIMEOUT).as_millis()
            );
        }
        if webhooks.endpoint_concurrency == 0 {
            anyhow::bail!("webhook_endpoint_concurrency must be at least 1");
        }
        if settings.max_body_bytes == 0 {
            anyhow::bail!("max_body_bytes must be greater than 0");
        }
        if let Some(address) = &settings.admin_listen
            && !is_loopback(address)
            && !settings.admin_cookie_secure
        {
            anyhow::bail!(
                "admin_listen {address} is not a loopback address: the panel must then sit \
                 behind TLS with admin_cookie_secure = true (or use admin_listen = off)"
            );
        }
        Ok(settings)
    }
}

/// The items of a list setting as given, blanks dropped, each read by
/// `read`; `default` when it is not given.
fn items<T>(
    given: Option<Vec<String>>,
    default: Vec<T>,
    read: impl Fn(&str) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<T>> {
    let Some(given) = given else {
        return Ok(default);
    };
    given
        .iter()
        .map(|text| text.trim())
        .filter(|text| !text.is_empty())
        .map(read)
        .collect()
}

/// A listener's address as given (`off`: none), else `default`.
fn listener(given: Option<String>, default: Option<String>) -> Option<String> {
    match given {
        Some(off) if off.trim().eq_ignore_ascii_case(LISTEN_OFF) => None,
        Some(address) => Some(address),
        None => default,
    }
}

/// A network of `webhook_allow_networks`: a CIDR, or one address.
fn network(text: &str) -> anyhow::Result<IpNet> {
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| anyhow::anyhow!("webhook_allow_networks: {text:?} is not a network (CIDR)"))
}

/// A duration as operators write it (`5s`, `30m`, `5days`).
fn duration(key: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .map_err(|err| anyhow::anyhow!("{key}: {text:?} is not a duration ({err})"))
}

/// Whether `address` (`host:port`) can only be reached from this host.
fn is_loopback(address: &str) -> bool {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SettingsArgs {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let file = file(
            "listen = \"0.0.0.0:9000\"\ndb_max_connections = 4\nrequest_timeout_ms = 900\n\
             admin_trusted_proxies = [\"127.0.0.1\"]\n",
        );
        let given = SettingsArgs {
            db_max_connections: Some(32),
            ..Default::default()
        };
        let s = Settings::resolve(file, given).unwrap();
        assert_eq!(s.listen, "0.0.0.0:9000");
        assert_eq!(s.pool.max_connections, 32);
        assert_eq!(s.request_timeout, Duration::from_millis(900));
        assert_eq!(s.admin_trusted_proxies, [IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(s.max_body_bytes, 64 * 1024);
        assert_eq!(s.shutdown_grace, Duration::from_secs(10));
    }

    #[test]
    fn unknown_keys_and_zero_limits_are_refused() {
        let unknown = toml::from_str::<SettingsArgs>("lisen = \"x\"").unwrap_err();
        assert!(
            unknown.message().contains("unknown field `lisen`"),
            "{unknown}"
        );
        let given = SettingsArgs {
            request_timeout_ms: Some(0),
            ..Default::default()
        };
        let zero = Settings::resolve(SettingsArgs::default(), given).unwrap_err();
        assert_eq!(
            zero.to_string(),
            "request_timeout_ms must be greater than 0"
        );
    }

    #[test]
    fn webhook_retention_is_30_days_and_never_below_14() {
        let resolve = |days: Option<u32>| {
            let given = SettingsArgs {
                webhook_retention_days: days,
                ..Default::default()
            };
            Settings::resolve(SettingsArgs::default(), given)
        };
        assert_eq!(resolve(None).unwrap().webhook_retention_days, 30);
        assert_eq!(resolve(Some(14)).unwrap().webhook_retention_days, 14);
        let refused = resolve(Some(13)).unwrap_err().to_string();
        assert!(refused.starts_with("webhook_retention_days must be at least 14"));
    }

    #[test]
    fn the_webhook_secret_key_is_32_bytes_of_base64_and_never_printed() {
        let resolve = |key: &str| {
            let given = SettingsArgs {
                webhook_secret_key: Some(key.to_owned()),
                ..Default::default()
            };
            Settings::resolve(SettingsArgs::default(), given)
        };
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let settings = resolve(key).unwrap();
        let parsed = settings.webhook_secret_key.as_ref().unwrap();
        assert_eq!(parsed.bytes()[31], 31);
        assert!(!format!("{settings:?}").contains(key));
        assert!(format!("{settings:?}").contains("WebhookSecretKey([redacted])"));
        assert_eq!(
            resolve("AAECAw==").unwrap_err().to_string(),
            "webhook_secret_key must be 32 bytes in base64, not 4"
        );
        assert_eq!(
            resolve("not base64!").unwrap_err().to_string(),
            "webhook_secret_key is not base64"
        );
        assert!(resolve_default().webhook_secret_key.is_none());
    }

    fn resolve_default() -> Settings {
        Settings::resolve(SettingsArgs::default(), SettingsArgs::default()).unwrap()
    }

    #[test]
    fn webhook_settings_are_read_and_checked() {
        let resolve = |toml_text: &str| Settings::resolve(file(toml_text), SettingsArgs::default());
        let defaults = resolve("").unwrap().webhooks;
        assert_eq!(defaults.retry_schedule.len(), 9, "ten attempts in all");
        assert_eq!(defaults.lease, Duration::from_secs(60));
        assert!(!defaults.https_only && defaults.allow_networks.is_empty());
        let set = resolve(
            "webhook_allow_networks = [\"127.0.0.0/8\", \"10.1.2.3\", \"fd00::/8\"]\n\
             webhook_retry_schedule = [\"1s\", \"2m\"]\nwebhook_disable_after = \"2days\"\n\
             webhook_https_only = true\nwebhook_relay_concurrency = 0\n",
        )
        .unwrap()
        .webhooks;
        assert_eq!(set.allow_networks.len(), 3);
        assert_eq!(set.allow_networks[1].to_string(), "10.1.2.3/32");
        assert_eq!(
            set.retry_schedule,
            [Duration::from_secs(1), Duration::from_secs(120)]
        );
        assert_eq!(set.disable_after, Duration::from_secs(2 * 86_400));
        assert!(set.https_only);
        assert_eq!(set.relay_concurrency, 0);
        for (text, error) in [
            (
                "webhook_lease_ms = 20000",
                "webhook_lease_ms must be at least 30000",
            ),
            (
                "webhook_allow_networks = [\"intranet\"]",
                "is not a network",
            ),
            ("webhook_retry_schedule = [\"soon\"]", "is not a duration"),
            ("webhook_endpoint_concurrency = 0", "must be at least 1"),
            (
                "webhook_db_connections = 0",
                "webhook_db_connections must be at least 1",
            ),
        ] {
            let err = resolve(text).unwrap_err().to_string();
            assert!(err.contains(error), "{text}: {err}");
        }
    }

    #[test]
    fn the_panel_leaves_loopback_only_with_secure_cookies() {
        let resolve = |toml_text: &str| Settings::resolve(file(toml_text), SettingsArgs::default());
        let default = resolve("").unwrap();
        assert_eq!(default.admin_listen.as_deref(), Some(DEFAULT_ADMIN_LISTEN));
        assert_eq!(
            resolve("admin_listen = \"off\"").unwrap().admin_listen,
            None
        );
        for loopback in ["127.0.0.1:9", "[::1]:9", "localhost:9", "127.0.0.2:0"] {
            let text = format!("admin_listen = \"{loopback}\"");
            assert!(resolve(&text).is_ok(), "{loopback}");
        }
        for open in [
            "0.0.0.0:8081",
            "[::]:8081",
            "10.0.0.5:8081",
            "panel.example:8081",
        ] {
            let text = format!("admin_listen = \"{open}\"");
            assert!(resolve(&text).is_err(), "{open}");
            let secure = format!("{text}\nadmin_cookie_secure = true");
            assert!(resolve(&secure).is_ok(), "{open}");
        }
        let proxies = resolve("admin_trusted_proxies = [\"127.0.0.1\", \" ::1 \"]").unwrap();
        assert_eq!(
            proxies.admin_trusted_proxies,
            [
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(resolve("admin_trusted_proxies = [\"proxy.local\"]").is_err());
        assert!(default.admin_trusted_proxies.is_empty());
        let given = SettingsArgs {
            admin_listen: Some("0.0.0.0:8081".into()),
            admin_cookie_secure: Some(true),
            ..Default::default()
        };
        assert!(Settings::resolve(file("admin_listen = \"off\""), given).is_ok());
    }

    #[test]
    fn metrics_listen_on_loopback_by_default_anywhere_when_given_or_off() {
        let resolve = |toml_text: &str| Settings::resolve(file(toml_text), SettingsArgs::default());
        assert_eq!(
            resolve("").unwrap().metrics_listen.as_deref(),
            Some(DEFAULT_METRICS_LISTEN)
        );
        assert_eq!(
            resolve("metrics_listen = \"10.0.0.5:9100\"")
                .unwrap()
                .metrics_listen
                .as_deref(),
            Some("10.0.0.5:9100")
        );
        assert_eq!(
            resolve("metrics_listen = \" OFF \"")
                .unwrap()
                .metrics_listen,
            None
        );
        let given = SettingsArgs {
            metrics_listen: Some("off".into()),
            ..Default::default()
        };
        let file = file("metrics_listen = \"127.0.0.1:9100\"");
        assert_eq!(Settings::resolve(file, given).unwrap().metrics_listen, None);
    }
}
