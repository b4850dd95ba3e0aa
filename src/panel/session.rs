//! The panel's request guards: who is signed in, and whether a POST may
//! change anything.
//!
//! A signed-in browser holds the session cookie, HttpOnly and
//! SameSite=Strict (and Secure, named with the `__Host-` prefix, when the
//! panel is served over TLS), set at sign-in with a new value each time (so
//! a value planted before sign-in is worth nothing after it). The sign-in
//! pages give a cookie of their own, a random value with no session. The
//! CSRF token every form carries is derived from the cookie's value
//! ([`csrf_token`]), so it needs no storage, differs per browser and
//! session, and cannot be computed without the cookie, which scripts of
//! other origins cannot read. A POST ([`PostForm`]) is refused before
//! anything is read from its body when the browser says it comes from
//! another origin (`Origin`, `Sec-Fetch-Site`), and then unless its token
//! matches the cookie's.
//!
//! After a change, the answer's redirect carries what was done ("Token 12
//! disabled.") in a flash cookie of the same kind, lasting a minute; the
//! page the browser is sent to says it and deletes it. Its text is the
//! panel's own, and it is escaped like any other text when shown.

use std::net::IpAddr;

use poem::{
    FromRequest, Request, RequestBody,
    web::cookie::{Cookie, CookieJar, SameSite},
};
use serde::de::{DeserializeOwned, IgnoredAny};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Answer, PanelError, PanelState, form::read_pairs};
use crate::service::{
    admin_audit::Actor,
    admin_sessions::{self, Secret, Session},
};

/// Largest form body the panel reads.
const MAX_FORM_BYTES: usize = 64 * 1024;

/// Cookie `name` (`__Host-…`) as the panel names it: with `Secure`, the
/// `__Host-` prefix makes browsers refuse it unless it is Secure,
/// host-only and for the whole path; without, the prefix is left out.
fn named(name: &'static str, secure: bool) -> &'static str {
    if secure {
        name
    } else {
        name.trim_start_matches("__Host-")
    }
}

/// The session cookie's name.
pub fn cookie_name(secure: bool) -> &'static str {
    named("__Host-masterpay_session", secure)
}

/// The name of the cookie the sign-in forms' CSRF token comes from. It is
/// not the session's: a page opened from another site arrives without the
/// SameSite=Strict session cookie and is sent to sign in, and a cookie set
/// there must not replace a live session's.
pub fn sign_in_cookie_name(secure: bool) -> &'static str {
    named("__Host-masterpay_sign_in", secure)
}

/// The name of the flash cookie: what the last change did, said once by
/// the page the browser is sent to next ([`set_flash`], [`take_flash`]).
pub fn flash_cookie_name(secure: bool) -> &'static str {
    named("__Host-masterpay_flash", secure)
}

/// How long a flash waits for its page: a redirect is followed at once.
const FLASH_SECONDS: i64 = 60;

/// Sets, by the answer, the panel's cookie `name` (HttpOnly,
/// SameSite=Strict, Path=/, Secure when `secure`); `max_age` of 0 deletes
/// it, none makes it last until the browser closes.
pub fn set_cookie(
    jar: &CookieJar,
    (name, value): (&str, &str),
    secure: bool,
    max_age: Option<i64>,
) {
    let mut cookie = Cookie::new_with_str(name, value);
    cookie.set_path("/");
    cookie.set_http_only(true);
    cookie.set_same_site(SameSite::Strict);
    cookie.set_secure(secure);
    if let Some(seconds) = max_age {
        cookie.set_max_age(std::time::Duration::from_secs(
            seconds.max(0).unsigned_abs(),
        ));
    }
    jar.add(cookie);
}

/// The value of cookie `name` in the request, if any.
pub fn read_cookie(req: &Request, name: &str) -> Option<String> {
    req.cookie()
        .get(name)
        .map(|cookie| cookie.value_str().to_owned())
        .filter(|value| !value.is_empty())
}

/// The session cookie the browser sent, if any.
pub fn session_cookie(req: &Request, state: &PanelState) -> Option<Secret> {
    read_cookie(req, cookie_name(state.cookie_secure)).map(|value| Secret::from_client(&value))
}

/// Says `message` on the next page this browser opens.
pub fn set_flash(jar: &CookieJar, secure: bool, message: &str) {
    let name = flash_cookie_name(secure);
    set_cookie(jar, (name, message), secure, Some(FLASH_SECONDS));
}

/// The flash waiting for this page, deleted as it is read so that it is
/// said once.
pub fn take_flash(req: &Request, secure: bool) -> Option<String> {
    let name = flash_cookie_name(secure);
    let message = read_cookie(req, name)?;
    set_cookie(req.cookie(), (name, ""), secure, Some(0));
    Some(message)
}

/// Off to the sign-in page saying `message`, the session cookie deleted.
pub fn signed_out(req: &Request, state: &PanelState, message: &str) -> poem::Response {
    let name = cookie_name(state.cookie_secure);
    set_cookie(req.cookie(), (name, ""), state.cookie_secure, Some(0));
    set_flash(req.cookie(), state.cookie_secure, message);
    super::page::redirect("/sign-in")
}

/// The CSRF token of the browser holding `cookie`.
pub fn csrf_token(cookie: &Secret) -> String {
    let mut digest = Sha256::new();
    digest.update(b"masterpay panel csrf\0");
    digest.update(cookie.expose().as_bytes());
    hex::encode(digest.finalize())
}

/// The address a request came from: the TCP peer, or when that is a
/// trusted proxy, the last address of `X-Forwarded-For` that is not one
/// (the one the nearest trusted proxy saw; those before it could be made
/// up by the client).
pub fn client_address(req: &Request, state: &PanelState) -> String {
    let peer = req.remote_addr().as_socket_addr().map(|addr| addr.ip());
    let forwarded = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    client_ip(peer, &forwarded, &state.trusted_proxies)
}

fn client_ip(peer: Option<IpAddr>, forwarded: &str, trusted: &[IpAddr]) -> String {
    let Some(peer) = peer else {
        return "unknown".to_owned();
    };
    if !trusted.contains(&peer) {
        return peer.to_string();
    }
    forwarded
        .rsplit(',')
        .map_while(|hop| hop.trim().parse::<IpAddr>().ok())
        .find(|hop| !trusted.contains(hop))
        .unwrap_or(peer)
        .to_string()
}

/// A browser on the sign-in pages: its sign-in cookie's value, a fresh one
/// (to be set by the answer) when it has none.
pub struct Visitor {
    pub cookie: Secret,
    /// Whether the answer must set the cookie.
    pub fresh: bool,
}

impl Visitor {
    pub fn of(req: &Request, state: &PanelState) -> Visitor {
        match read_cookie(req, sign_in_cookie_name(state.cookie_secure)) {
            Some(value) => Visitor {
                cookie: Secret::from_client(&value),
                fresh: false,
            },
            None => Visitor {
                cookie: Secret::generate(),
                fresh: true,
            },
        }
    }

    pub fn csrf(&self) -> String {
        csrf_token(&self.cookie)
    }
}

/// A signed-in administrator, with the panel's state; requests without a
/// live session are sent to the sign-in page.
pub struct SignedIn {
    pub state: PanelState,
    pub session: Session,
    pub csrf: String,
    pub address: String,
    /// The SHA-256 of the session's cookie, as stored.
    pub cookie_hash: String,
    /// The path of the page asked for (the navigation marks its link).
    pub path: String,
    /// What the last change did, said once on this page.
    pub flash: Option<String>,
    jar: CookieJar,
    cookie_secure: bool,
}

impl SignedIn {
    /// The actor of the changes this request makes.
    pub fn actor(&self) -> Actor {
        self.session.actor(Some(self.address.clone()))
    }

    pub fn name(&self) -> &str {
        &self.session.administrator.name
    }

    /// POST-redirect-GET after a change: off to `to`, whose page says
    /// `message`, what was done ("Token 12 disabled.").
    pub fn done(&self, to: &str, message: &str) -> Answer {
        set_flash(&self.jar, self.cookie_secure, message);
        Ok(super::page::redirect(to))
    }

    /// This administrator, with `message` said on the page being answered
    /// (a change whose answer is a page, not a redirect).
    pub fn told(self, message: String) -> SignedIn {
        SignedIn {
            flash: Some(message),
            ..self
        }
    }
}

impl<'a> FromRequest<'a> for SignedIn {
    async fn from_request(req: &'a Request, _body: &mut RequestBody) -> poem::Result<Self> {
        let state = PanelState::of(req)?;
        // A page asked for (not a form sent) is where sign-in goes on to.
        let required = || PanelError::SignInRequired {
            next: (req.method() == poem::http::Method::GET)
                .then(|| req.uri().path_and_query().map(|p| p.as_str().to_owned()))
                .flatten()
                .and_then(|next| Some(next_page(&next)?.to_owned()))
                .filter(|next| next != "/"),
        };
        let cookie = session_cookie(req, state).ok_or_else(required)?;
        let session = admin_sessions::session(&state.db, &cookie)
            .await
            .map_err(PanelError::from)?
            .ok_or_else(required)?;
        // A page shows the flash; a form's answer leaves it to the next page.
        let flash = (req.method() == poem::http::Method::GET)
            .then(|| take_flash(req, state.cookie_secure))
            .flatten();
        Ok(SignedIn {
            state: state.clone(),
            session,
            csrf: csrf_token(&cookie),
            address: client_address(req, state),
            cookie_hash: admin_sessions::cookie_hash(&cookie),
            path: req.uri().path().to_owned(),
            flash,
            jar: req.cookie().clone(),
            cookie_secure: state.cookie_secure,
        })
    }
}

/// `next` when it is a page of the panel to go on to after sign-in: a
/// path on this origin (`/orders?status=pending`), never an absolute URL,
/// a scheme-relative `//host`, a backslash (which browsers read as a
/// slash) or anything but printable ASCII.
pub fn next_page(next: &str) -> Option<&str> {
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && next.bytes().all(|b| b.is_ascii_graphic());
    local.then_some(next)
}

/// A POSTed form that passed the origin and CSRF checks, read as `T`: a
/// `#[derive(Deserialize)]` struct of the form's fields (a name sent
/// more than once, as checkboxes are, read as a `Vec`). A form the panel's
/// pages never send (a field of the wrong kind) is a bad request; the
/// default `T` reads nothing but the token.
pub struct PostForm<T = IgnoredAny>(pub T);

/// Whether the browser says the request comes from a page of another
/// origin. `Sec-Fetch-Site` decides when the browser sends it (every
/// current one does): under the panel's `Referrer-Policy: no-referrer`,
/// Chromium sends `Origin: null` even with its own forms. Without it,
/// `Origin` must name the panel's host; a client sending neither is left to
/// the CSRF token.
fn cross_origin(req: &Request) -> bool {
    let headers = req.headers();
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return site != "same-origin";
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => {
            let authority = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            authority != Some(host)
        }
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl<'a, T: DeserializeOwned> FromRequest<'a> for PostForm<T> {
    async fn from_request(req: &'a Request, body: &mut RequestBody) -> poem::Result<Self> {
        if cross_origin(req) {
            return Err(PanelError::Forbidden("cross-origin requests are refused").into());
        }
        let state = PanelState::of(req)?;
        // The session's token, or on the sign-in pages the sign-in cookie's.
        let expected: Vec<String> = [
            cookie_name(state.cookie_secure),
            sign_in_cookie_name(state.cookie_secure),
        ]
        .into_iter()
        .filter_map(|name| read_cookie(req, name))
        .map(|value| csrf_token(&Secret::from_client(&value)))
        .collect();
        if expected.is_empty() {
            return Err(PanelError::Forbidden("the form's security token is missing").into());
        }
        let bytes = body
            .take()?
            .into_bytes_limit(MAX_FORM_BYTES)
            .await
            .map_err(|_| PanelError::Forbidden("the form is too large"))?;
        let pairs: Vec<_> = form_urlencoded::parse(&bytes).collect();
        let sent = pairs
            .iter()
            .find(|(key, _)| key == "csrf")
            .map_or("", |(_, value)| value.as_ref());
        let matches = expected
            .iter()
            .any(|token| bool::from(sent.as_bytes().ct_eq(token.as_bytes())));
        if !matches {
            return Err(PanelError::Forbidden(
                "the form's security token does not match; reload the page and try again",
            )
            .into());
        }
        Ok(PostForm(read_pairs(pairs)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_same_origin_posts_pass() {
        let post = |headers: &[(&str, &str)]| {
            let mut builder = Request::builder().method(poem::http::Method::POST);
            for (name, value) in headers {
                builder = builder.header(*name, *value);
            }
            cross_origin(&builder.finish())
        };
        assert!(!post(&[("host", "127.0.0.1:8081")]));
        assert!(!post(&[
            ("host", "p.example"),
            ("origin", "https://p.example")
        ]));
        assert!(!post(&[
            ("host", "p.example"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(post(&[
            ("host", "p.example"),
            ("origin", "https://evil.example")
        ]));
        assert!(post(&[("host", "p.example"), ("origin", "null")]));
        assert!(post(&[
            ("host", "p.example"),
            ("sec-fetch-site", "same-site")
        ]));
        assert!(post(&[
            ("host", "p.example"),
            ("sec-fetch-site", "cross-site")
        ]));
        // Chromium's own forms under Referrer-Policy: no-referrer.
        assert!(!post(&[
            ("host", "p.example"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(post(&[
            ("host", "p.example"),
            ("origin", "https://p.example"),
            ("sec-fetch-site", "cross-site")
        ]));
    }

    #[test]
    fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let local = Some(ip("127.0.0.1"));
        let trusted = [ip("127.0.0.1"), ip("10.0.0.2")];
        // Not trusted: the header is the client's own say.
        assert_eq!(client_ip(local, "203.0.113.9", &[]), "127.0.0.1");
        assert_eq!(
            client_ip(Some(ip("198.51.100.1")), "203.0.113.9", &trusted),
            "198.51.100.1"
        );
        // Trusted: the last hop that is not a trusted proxy.
        assert_eq!(client_ip(local, "203.0.113.9", &trusted), "203.0.113.9");
        assert_eq!(
            client_ip(local, "6.6.6.6, 203.0.113.9, 10.0.0.2", &trusted),
            "203.0.113.9"
        );
        assert_eq!(client_ip(local, "", &trusted), "127.0.0.1");
        assert_eq!(
            client_ip(local, "garbage, 203.0.113.9", &trusted),
            "203.0.113.9"
        );
        assert_eq!(
            client_ip(local, "203.0.113.9, garbage", &trusted),
            "127.0.0.1"
        );
        assert_eq!(client_ip(None, "203.0.113.9", &trusted), "unknown");
    }

    #[test]
    fn csrf_tokens_differ_per_cookie() {
        let a = csrf_token(&Secret::from_client("a"));
        assert_eq!(a, csrf_token(&Secret::from_client("a")));
        assert_ne!(a, csrf_token(&Secret::from_client("b")));
        assert_eq!(a.len(), 64);
    }
}
