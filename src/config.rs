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
use serde::{Deserialize, Serialize};

/// Default database: an SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://masterpay.db";
/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default listen address of the administration panel: this host only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8081";
/// The `admin_listen` value that turns the panel off.
pub const ADMIN_LISTEN_OFF: &str = "off";
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

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            listen: DEFAULT_LISTEN.to_owned(),
            admin_listen: Some(DEFAULT_ADMIN_LISTEN.to_owned()),
            admin_cookie_secure: false,
            admin_trusted_proxies: Vec::new(),
            pool: PoolSettings::default(),
            request_timeout: Duration::from_millis(2500),
            idle_timeout: Duration::from_secs(30),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            shutdown_grace: Duration::from_secs(10),
            webhook_secret_key: None,
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
            db_max_connections,
            db_acquire_timeout_ms,
            db_statement_timeout_ms,
            request_timeout_ms,
            idle_timeout_ms,
            max_body_bytes,
            shutdown_grace_ms,
            webhook_secret_key,
            webhook_retention_days,
        } = given.over(file);
        let d = Settings::default();
        let ms = |given: Option<u64>, default| given.map_or(default, Duration::from_millis);
        let settings = Settings {
            database_url: database_url.unwrap_or(d.database_url),
            listen: listen.unwrap_or(d.listen),
            admin_listen: match admin_listen {
                Some(off) if off.trim().eq_ignore_ascii_case(ADMIN_LISTEN_OFF) => None,
                Some(address) => Some(address),
                None => d.admin_listen,
            },
            admin_cookie_secure: admin_cookie_secure.unwrap_or(d.admin_cookie_secure),
            admin_trusted_proxies: match admin_trusted_proxies {
                Some(proxies) => proxies
                    .iter()
                    .map(|text| text.trim())
                    .filter(|text| !text.is_empty())
                    .map(|text| {
                        text.parse().map_err(|_| {
                            anyhow::anyhow!("admin_trusted_proxies: {text:?} is not an IP address")
                        })
                    })
                    .collect::<anyhow::Result<_>>()?,
                None => d.admin_trusted_proxies,
            },
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
        for (name, value) in [
            ("db_acquire_timeout_ms", settings.pool.acquire_timeout),
            ("db_statement_timeout_ms", settings.pool.statement_timeout),
            ("request_timeout_ms", settings.request_timeout),
            ("idle_timeout_ms", settings.idle_timeout),
        ] {
            if value.is_zero() {
                anyhow::bail!("{name} must be greater than 0");
            }
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
}
