//! What an attempt to deliver a webhook means, and what follows it.
//!
//! Only a 2xx answer delivers. A redirect is a failure and is not followed
//! (it could lead anywhere, past the destination checks); 410 Gone says the
//! endpoint is gone for good, and disables it. Any other answer, a timeout or
//! a connection that failed is retried on the schedule of the settings:
//! the wait before retry *n* is the schedule's *n*-th, plus up to a tenth of
//! it at random so that the retries of many deliveries that failed together
//! (an endpoint that was down) do not arrive together. A `Retry-After` in the
//! answer is honoured within [the wait, twice the wait] and never beyond
//! `webhook_retry_after_max`: an endpoint may slow its retries down, but not
//! stop them or hurry them. When the schedule runs out the delivery fails;
//! an endpoint all of whose attempts failed for `webhook_disable_after` is
//! disabled.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;

use crate::{config::WebhookSettings, store::relay::After};

/// What an attempt came to, as `webhook_attempts.outcome` stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Succeeded,
    /// Any other answer but a redirect or 410.
    HttpError,
    /// No complete answer within the send's bound.
    Timeout,
    /// No connection, or the connection broke.
    ConnectError,
    /// 3xx: not followed.
    Redirect,
    /// The destination is no longer allowed (its name resolves to an
    /// address that is not public): nothing was sent.
    RefusedAddress,
    /// 410: the endpoint is gone.
    Gone,
}

impl Outcome {
    /// The outcome of an answer with `status`.
    pub fn of_status(status: u16) -> Outcome {
        match status {
            200..=299 => Outcome::Succeeded,
            300..=399 => Outcome::Redirect,
            410 => Outcome::Gone,
            _ => Outcome::HttpError,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::HttpError => "http_error",
            Outcome::Timeout => "timeout",
            Outcome::ConnectError => "connect_error",
            Outcome::Redirect => "redirect",
            Outcome::RefusedAddress => "refused_address",
            Outcome::Gone => "gone",
        }
    }
}

/// The disable reason of an endpoint that answered 410.
pub const GONE_REASON: &str = "answered 410";

/// The disable reason of an endpoint that has failed for `window`.
pub fn failing_reason(window: Duration) -> String {
    format!("failing for {}", humantime::format_duration(window))
}

/// What follows an attempt that came to `outcome`, the attempt having been
/// the delivery's `attempt`-th (from 1), started at `attempted_at` and
/// ended at `ended_at` (the database's time), with `retry_after` the wait
/// the answer asked for, if any.
pub fn after(
    settings: &WebhookSettings,
    outcome: Outcome,
    attempt: usize,
    attempted_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    retry_after: Option<Duration>,
) -> After {
    let reason = failing_reason(settings.disable_after);
    let disable_if_failing_since = attempted_at - settings.disable_after;
    match outcome {
        Outcome::Succeeded => After::Succeeded,
        Outcome::Gone => After::Disable {
            reason: GONE_REASON.to_owned(),
        },
        _ => match settings.retry_schedule.get(attempt.saturating_sub(1)) {
            Some(gap) => {
                let wait = retry_wait(*gap, retry_after, settings.retry_after_max);
                After::Retry {
                    at: ended_at + wait,
                    disable_if_failing_since,
                    reason,
                }
            }
            None => After::GiveUp {
                disable_if_failing_since,
                reason,
            },
        },
    }
}

/// The wait before a retry whose scheduled gap is `gap`: the answer's
/// `Retry-After` within [gap, 2 × gap], else the gap and up to a tenth more
/// at random; never more than `max`.
pub fn retry_wait(gap: Duration, retry_after: Option<Duration>, max: Duration) -> Duration {
    let wait = match retry_after {
        Some(asked) => asked.clamp(gap, gap * 2),
        None => gap + jitter(gap / 10),
    };
    wait.min(max)
}

/// A random duration from 0 to `at_most`.
fn jitter(at_most: Duration) -> Duration {
    let micros = u64::try_from(at_most.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::rng().random_range(0..=micros))
}

/// The wait a `Retry-After` value asks for: seconds, or an HTTP date
/// (counted from `now`; a date past is no wait). `None` when it is neither.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (date.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> WebhookSettings {
        WebhookSettings {
            retry_schedule: vec![Duration::from_secs(5), Duration::from_secs(300)],
            ..WebhookSettings::default()
        }
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn outcomes_of_statuses() {
        assert_eq!(Outcome::of_status(200), Outcome::Succeeded);
        assert_eq!(Outcome::of_status(204), Outcome::Succeeded);
        assert_eq!(Outcome::of_status(301), Outcome::Redirect);
        assert_eq!(Outcome::of_status(308), Outcome::Redirect);
        assert_eq!(Outcome::of_status(410), Outcome::Gone);
        assert_eq!(Outcome::of_status(404), Outcome::HttpError);
        assert_eq!(Outcome::of_status(500), Outcome::HttpError);
        assert_eq!(Outcome::of_status(101), Outcome::HttpError);
    }

    #[test]
    fn failures_follow_the_schedule_then_give_up() {
        let s = settings();
        for (attempt, gap) in [(1, 5), (2, 300)] {
            let After::Retry { at: next, .. } =
                after(&s, Outcome::HttpError, attempt, at(0), at(1), None)
            else {
                panic!("attempt {attempt} is retried");
            };
            let wait = (next - at(1)).to_std().unwrap();
            let gap = Duration::from_secs(gap);
            assert!(wait >= gap && wait <= gap + gap / 10, "{wait:?}");
        }
        assert!(matches!(
            after(&s, Outcome::Timeout, 3, at(0), at(1), None),
            After::GiveUp { .. }
        ));
        assert!(matches!(
            after(&s, Outcome::Succeeded, 1, at(0), at(1), None),
            After::Succeeded
        ));
        let After::Disable { reason } = after(&s, Outcome::Gone, 1, at(0), at(1), None) else {
            panic!("410 disables");
        };
        assert_eq!(reason, "answered 410");
        let After::Retry {
            disable_if_failing_since,
            reason,
            ..
        } = after(&s, Outcome::Redirect, 1, at(0), at(1), None)
        else {
            panic!("a redirect is retried");
        };
        assert_eq!(disable_if_failing_since, at(0) - chrono::Duration::days(5));
        assert_eq!(reason, "failing for 5days");
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let gap = Duration::from_secs(60);
        let day = Duration::from_secs(86_400);
        let wait = |asked: u64| retry_wait(gap, Some(Duration::from_secs(asked)), day);
        assert_eq!(wait(90), Duration::from_secs(90));
        assert_eq!(wait(1), gap);
        assert_eq!(wait(10_000), gap * 2);
        let long_gap = Duration::from_secs(20 * 3600);
        assert_eq!(
            retry_wait(long_gap, Some(Duration::from_secs(40 * 3600)), day),
            day
        );
    }

    #[test]
    fn retry_after_values() {
        let now = at(0);
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        let later = (now + chrono::Duration::seconds(30)).to_rfc2822();
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let earlier = (now - chrono::Duration::seconds(30)).to_rfc2822();
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
