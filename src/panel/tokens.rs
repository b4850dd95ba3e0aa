//! The tokens of a project: list, create (one checkbox per endpoint, an
//! optional expiry day), edit, disable and enable, reissue with a grace
//! period for the old value, end that grace, delete, and "new token like
//! this one". Lists and pages show the last 4 characters of each value.
//!
//! A token's value exists only in the answer to its creation or reissue:
//! the POST's own answer is the token's page with the value (`no-store`, as
//! every panel answer), never a cookie or a URL; the script then puts the
//! token page's address in the browser's history, so that a reload is a
//! GET of that page, which never shows the value.

use chrono::{DateTime, Utc};
use entity::{admin_audit_entry, app_token, project};
use poem::web::Query;

use super::{
    form::{attempt, parse_day},
    prelude::*,
};
use crate::service::{
    AdminError, projects,
    tokens::{self, Permission, TokenInfo, TokenValue},
    validate,
};

pub fn routes(route: Route) -> Route {
    route
        .at("/projects/:id/tokens", get(list).post(create))
        .at("/projects/:id/tokens/new", get(new_form))
        .at("/tokens/:id", get(show))
        .at("/tokens/:id/edit", post(edit))
        .at("/tokens/:id/active", post(set_active))
        .at("/tokens/:id/reissue", post(reissue))
        .at("/tokens/:id/end-grace", post(end_grace))
        .at("/tokens/:id/delete", post(delete))
}

/// The create and edit forms, as sent and as shown (a token's settings, or
/// a form sent back with its errors).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TokenForm {
    name: String,
    description: String,
    /// The endpoints checked, one value per checkbox.
    permission: Vec<String>,
    /// The expiry day (`YYYY-MM-DD`, blank: never).
    expires_on: String,
}

/// What a correct create or edit form asks for.
#[derive(Debug)]
struct TokenSettings {
    name: String,
    description: Option<String>,
    permissions: Vec<Permission>,
    /// The expiry day's start (UTC).
    expires_at: Option<DateTime<Utc>>,
}

impl TokenForm {
    fn of(info: &TokenInfo) -> TokenForm {
        TokenForm {
            name: info.token.name.clone(),
            description: info.token.description.clone().unwrap_or_default(),
            permission: info
                .permissions
                .iter()
                .map(|p| p.as_str().to_owned())
                .collect(),
            expires_on: expiry_day(&info.token),
        }
    }

    /// The settings the form asks for, or an error next to each field that
    /// is wrong (the rules are the service's).
    fn read(&self) -> Result<TokenSettings, FieldErrors> {
        let mut errors = FieldErrors::default();
        let name = errors.field("name", validate::check_name("token", &self.name));
        let description = validate::check_description(&self.description);
        let description = errors.field("description", description);
        let (mut permissions, mut unknown) = (Vec::new(), Vec::new());
        for value in &self.permission {
            match value.parse::<Permission>() {
                Ok(permission) => permissions.push(permission),
                Err(_) => unknown.push(value.as_str()),
            }
        }
        permissions.sort();
        permissions.dedup();
        if !unknown.is_empty() {
            let message = format!("unknown endpoint: {}", unknown.join(", "));
            errors.add("permissions", message);
        } else if permissions.is_empty() {
            let message = "choose at least one endpoint: a token without any can call nothing";
            errors.add("permissions", message);
        }
        let expires_at = errors.field("expires_on", parse_day(&self.expires_on));
        errors.or_with(|| {
            Some(TokenSettings {
                name: name?,
                description: description?,
                permissions,
                expires_at: expires_at?,
            })
        })
    }
}

/// The day a token expires, as the form shows it.
fn expiry_day(token: &app_token::Model) -> String {
    token
        .expires_at
        .map(|at| at.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// The grace periods a reissue offers, as (form value, label).
const GRACE_CHOICES: [(&str, &str); 4] = [
    ("0", "now"),
    ("1", "in 1 hour"),
    ("24", "in 24 hours"),
    ("168", "in 7 days"),
];

/// A service refusal the form checks did not foresee, shown next to the
/// field it is about.
fn refused(err: AdminError) -> Result<FieldErrors, PanelError> {
    match err {
        AdminError::Invalid("expires_at", message) => Ok(FieldErrors::one("expires_on", message)),
        err => FieldErrors::refused(err),
    }
}

fn permission_badges(permissions: &[Permission]) -> Markup {
    html! {
        @for p in permissions { (c::badge(p.as_str(), "")) }
        @if permissions.is_empty() { (c::badge("no endpoint", "warn")) }
    }
}

fn created(token: &app_token::Model) -> Markup {
    html! {
        (c::when(&token.created_at))
        @if let Some(by) = &token.created_by { br; span.muted { "by " (by) } }
    }
}

fn last_used(at: Option<&DateTime<Utc>>) -> Markup {
    c::or_none(at.map(c::when), "never")
}

/// A value as its last 4 characters (unknown for values issued before they
/// were kept).
fn value_end(last4: Option<&str>) -> Markup {
    c::or_none(last4.map(|last4| html! { code { "…" (last4) } }), "unknown")
}

fn expiry(token: &app_token::Model) -> Markup {
    html! {
        @match &token.expires_at {
            Some(at) if *at <= Utc::now() => { (c::badge("expired", "off")) " " (c::when(at)) }
            Some(at) => { (c::when(at)) }
            None => { span.muted { "never" } }
        }
    }
}

fn disabled_project_warning(p: &project::Model) -> Markup {
    html! {
        @if !p.active {
            p.warning {
                "Project " (p.name) " is disabled: every request made with its tokens, active or not, is answered 404 PROJECT_NOT_FOUND until the project is enabled again. "
                a href={ "/projects/" (p.id) } { "Enable it on the project's page." }
            }
        }
    }
}

/// The name, description and endpoint checkboxes of the create and edit
/// forms.
fn token_fields(form: &TokenForm, errors: &FieldErrors) -> Markup {
    html! {
        (c::text_field("Name", "name", &form.name, errors, FieldAttrs::TEXT))
        (c::text_field("Description (optional)", "description", &form.description, errors, FieldAttrs::OPTIONAL))
        (c::text_field("Expires on (UTC day, optional: from 00:00 that day it is refused)", "expires_on", &form.expires_on, errors, FieldAttrs::DATE))
        (c::checkboxes(
            ("Endpoints this token may call", "permissions", "permission"),
            errors,
            html! {},
            Permission::ALL.map(|p| {
                let text = html! { code { (p.endpoint()) } " " span.muted { (p.as_str()) } };
                (p.as_str().to_owned(), text)
            }),
            &form.permission,
        ))
    }
}

/// Tokens a page lists at most, newest first.
const PAGE_SIZE: u64 = 100;

fn list_page(
    admin: &SignedIn,
    query: &PageQuery<Search>,
    p: &project::Model,
    all: &Listed<TokenInfo>,
) -> Markup {
    let path = format!("/projects/{}/tokens", p.id);
    page::frame(
        admin,
        &format!("Tokens of {}", p.name),
        html! {
            p { a href={ "/projects/" (p.id) } { "Project " (p.name) } }
            (disabled_project_warning(p))
            div.actions {
                a.button href={ (path) "/new" } { "New token" }
            }
            (c::search_form(&path, "Name or description contains", "game panel", &query.filters.q))
            (c::list(&all.rows, &[
                Column("Name", "", &|info| html! { a href={ "/tokens/" (info.token.id) } { (info.token.name) } }),
                Column("Value", "", &|info| html! {
                    (value_end(info.token.last4.as_deref()))
                    @if let Some(until) = tokens::grace_until(&info.token) {
                        @let previous = value_end(info.token.previous_last4.as_deref());
                        br; span.muted { "and " (previous) " until " (c::when(&until)) }
                    }
                }),
                Column("Description", "", &|info| html! { @if let Some(d) = &info.token.description { (d) } }),
                Column("Endpoints", "", &|info| permission_badges(&info.permissions)),
                Column("State", "", &|info| c::state_badge(info.token.active)),
                Column("Created", "", &|info| created(&info.token)),
                Column("Expires", "", &|info| expiry(&info.token)),
                Column("Last used", "", &|info| last_used(info.token.last_used_at.as_ref())),
            ], if query.filters.q.is_empty() { "No token yet." } else { "No token matches." }))
            (c::paging(&path, query, all.older))
            p.muted { "A token's value is shown once, when it is created or reissued; only a hash of it is kept." }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, Path(id): Path<i64>, query: PageQuery<Search>) -> Answer {
    let p = projects::get(&admin.state.db, id).await?;
    let page = query.page(PAGE_SIZE)?;
    let all = tokens::page(&admin.state.db, id, &query.filters.q, page).await?;
    Ok(page::ok(list_page(&admin, &query, &p, &all)))
}

fn new_page(
    admin: &SignedIn,
    p: &project::Model,
    like: Option<&app_token::Model>,
    form: &TokenForm,
    errors: &FieldErrors,
) -> Markup {
    page::frame(
        admin,
        &format!("New token for {}", p.name),
        html! {
            p { a href={ "/projects/" (p.id) "/tokens" } { "Tokens of " (p.name) } }
            (disabled_project_warning(p))
            @if let Some(like) = like {
                p.notice { "With the settings of " a href={ "/tokens/" (like.id) } { (like.name) } "; change what you need." }
            }
            (c::form_section(admin, ("", &format!("/projects/{}/tokens", p.id)), html! {
                (token_fields(form, errors))
                p.muted { "The value is shown once, on the next page: copy it into your game panel's settings." }
                button type="submit" { "Create token" }
            }))
        },
    )
}

#[derive(Debug, Deserialize)]
struct NewQuery {
    like: Option<String>,
}

#[handler]
async fn new_form(admin: SignedIn, Path(id): Path<i64>, Query(query): Query<NewQuery>) -> Answer {
    let p = projects::get(&admin.state.db, id).await?;
    let like = match query.like.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => {
            let like_id = text
                .parse::<i64>()
                .map_err(|_| PanelError::NotFound(format!("token {text}")))?;
            Some(tokens::get_info(&admin.state.db, like_id).await?)
        }
    };
    let form = match &like {
        Some(info) => TokenForm {
            name: format!("{} (copy)", info.token.name),
            ..TokenForm::of(info)
        },
        None => TokenForm::default(),
    };
    let like = like.as_ref().map(|info| &info.token);
    let markup = new_page(&admin, &p, like, &form, &FieldErrors::default());
    Ok(page::ok(markup))
}

#[handler]
async fn create(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<TokenForm>,
) -> Answer {
    let (db, actor) = (&admin.state.db, admin.actor());
    let p = projects::get(db, id).await?;
    let create = |asked: TokenSettings| async move {
        let (name, description) = (&asked.name, asked.description.as_deref());
        let (permissions, expires) = (&asked.permissions, asked.expires_at);
        tokens::create(db, &actor, id, name, description, permissions, expires).await
    };
    match attempt(form.read(), create, refused).await? {
        Ok((info, value)) => {
            let admin = admin.told(format!("Token {} created.", info.token.id));
            value_shown_once(&admin, &info, &value).await
        }
        Err(errors) => Ok(page::invalid(new_page(&admin, &p, None, &form, &errors))),
    }
}

/// The token's page; `value`, when it was just created or reissued, is
/// shown this once (none: shown already, or never to this browser).
fn token_page(
    admin: &SignedIn,
    (info, p): (&TokenInfo, &project::Model),
    value: Option<&str>,
    history: &[admin_audit_entry::Model],
    forms: &PageForms<TokenForm>,
) -> Markup {
    let errors = &forms.errors;
    let t = &info.token;
    let base = format!("/tokens/{}", t.id);
    html! {
        (page::frame(admin, &format!("Token {}", t.name), html! {
            p { a href={ "/projects/" (p.id) "/tokens" } { "Tokens of " (p.name) } }
            (disabled_project_warning(p))
            @match value {
                Some(value) => {
                    (c::reveal(&base, (html! { "The token's value" }, "token-value", value), html! {
                        "Copy it now into your game panel's settings or a secret store: it will not be shown again, not even on this page after a reload. Only a hash of it is kept."
                    }))
                }
                None => {
                    p.muted { "The value was shown once and cannot be shown again; reissue the token to get a new one." }
                }
            }
            section {
                h2 { "Details" }
                (c::details([
                    ("Id", html! { (t.id) }),
                    ("Project", html! { a href={ "/projects/" (p.id) } { (p.name) } }),
                    ("State", c::state_badge(t.active)),
                    ("Endpoints", permission_badges(&info.permissions)),
                    ("Description", c::or_none(t.description.as_deref(), "none")),
                    ("Value", value_end(t.last4.as_deref())),
                    ("Created", created(t)),
                    ("Expires", expiry(t)),
                    ("Last used", last_used(t.last_used_at.as_ref())),
                ]))
                div.actions {
                    a.button.secondary href={ "/projects/" (p.id) "/tokens/new?like=" (t.id) } { "New token like this one" }
                }
            }
            (c::form_section(admin, ("Edit", &format!("{base}/edit")), html! {
                (token_fields(&forms.edit, errors))
                p.muted { "Changes hold from the token's next API request." }
                button type="submit" { "Save changes" }
            }))
            (c::toggle_section(
                admin,
                (&format!("{base}/active"), "token"),
                t.active,
                (
                    "A disabled token is answered 403 TOKEN_DISABLED from its next request on; it keeps its value and settings and works again once enabled.",
                    "The token is disabled: its requests are answered 403 TOKEN_DISABLED. Enabling it makes its value work again from the next request.",
                ),
                &format!("Disable token {}? Requests made with it are refused at once.", t.name),
            ))
            @if let Some(until) = tokens::grace_until(t) {
                section {
                    h2 { "Old value in its grace period" }
                    p { "The value ending " (value_end(t.previous_last4.as_deref())) " still works until " (c::when(&until))
                        ", then it is answered 403 TOKEN_NOT_FOUND. Last used: " (last_used(t.previous_last_used_at.as_ref())) "." }
                    @let confirm = format!(
                        "End the grace period of token {}? Its old value stops working at once.",
                        t.name
                    );
                    (c::post_form(admin, &format!("{base}/end-grace"), Some(&confirm), html! {
                        button.danger type="submit" { "End grace now" }
                    }))
                }
            }
            section {
                h2 { "Reissue" }
                p { "Reissuing gives the token a new value, shown once, and keeps its name, endpoints and state. The old value keeps working for the grace period you choose, so that your game panels can switch without downtime; a reissue ends an earlier grace period." }
                @let grace = GRACE_CHOICES.map(|(value, label)| (value.to_owned(), label.to_owned()));
                (c::post_form(admin, &format!("{base}/reissue"), Some(&format!("Reissue token {}?", t.name)), html! {
                    (c::select_field(("The old value stops working", "grace_hours"), errors, Blank::None, grace, ""))
                    button.danger type="submit" { "Reissue token" }
                }))
            }
            (c::delete_section(
                admin,
                (&format!("{base}/delete"), "token", &t.name),
                "A deleted token is answered 403 TOKEN_NOT_FOUND from its next request on. This cannot be undone.",
                &forms.confirm_name,
                errors,
            ))
            section {
                h2 { "Changes" }
                (c::audit_table(history, Listing::OneObject, "No change recorded."))
            }
        }))
    }
}

/// The token's page with its new `value`, the one time it is shown.
async fn value_shown_once(admin: &SignedIn, info: &TokenInfo, value: &TokenValue) -> Answer {
    token_answer(admin, info, Some(value.expose()), None).await
}

/// The token's page: as asked for or with a new value shown (200), or with
/// `refused` forms sent back with their errors (422).
async fn token_answer(
    admin: &SignedIn,
    info: &TokenInfo,
    value: Option<&str>,
    refused: Option<PageForms<TokenForm>>,
) -> Answer {
    let db = &admin.state.db;
    let p = projects::get(db, info.token.project_id).await?;
    let history = c::history(db, "token", info.token.id.to_string()).await?;
    let is_refused = refused.is_some();
    let forms =
        refused.unwrap_or_else(|| PageForms::new(TokenForm::of(info), FieldErrors::default()));
    let markup = token_page(admin, (info, &p), value, &history, &forms);
    Ok(page::ok_unless(is_refused, markup))
}

#[handler]
async fn show(admin: SignedIn, Path(id): Path<i64>) -> Answer {
    let info = tokens::get_info(&admin.state.db, id).await?;
    token_answer(&admin, &info, None, None).await
}

#[handler]
async fn edit(admin: SignedIn, Path(id): Path<i64>, PostForm(form): PostForm<TokenForm>) -> Answer {
    let (db, actor) = (&admin.state.db, admin.actor());
    let info = tokens::get_info(db, id).await?;
    // The form shows the day only: an unchanged day keeps the time.
    let new_day = form.expires_on != expiry_day(&info.token);
    let edit = |asked: TokenSettings| async move {
        let edit = tokens::TokenEdit {
            name: Some(&asked.name),
            // A blank description removes it.
            description: Some(asked.description.as_deref().unwrap_or_default()),
            permissions: Some(&asked.permissions),
            expires_at: new_day.then_some(asked.expires_at),
        };
        tokens::edit(db, &actor, id, edit).await
    };
    match attempt(form.read(), edit, refused).await? {
        Ok(_) => admin.done(&format!("/tokens/{id}"), &format!("Token {id} saved.")),
        Err(errors) => token_answer(&admin, &info, None, Some(PageForms::new(form, errors))).await,
    }
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(toggle): PostForm<Toggle>,
) -> Answer {
    tokens::set_active(&admin.state.db, &admin.actor(), id, toggle.active).await?;
    let message = format!("Token {id} {}.", toggle.done());
    admin.done(&format!("/tokens/{id}"), &message)
}

/// The reissue form: when the old value stops working, one of
/// [`GRACE_CHOICES`].
#[derive(Debug, Deserialize)]
struct ReissueForm {
    grace_hours: String,
}

#[handler]
async fn reissue(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<ReissueForm>,
) -> Answer {
    let hours = GRACE_CHOICES
        .iter()
        .find(|(value, _)| *value == form.grace_hours)
        .and_then(|(value, _)| value.parse().ok())
        .ok_or_else(|| PanelError::BadRequest("No such grace period.".to_owned()))?;
    let grace = chrono::TimeDelta::hours(hours);
    let (_, value) = tokens::reissue(&admin.state.db, &admin.actor(), id, grace).await?;
    let info = tokens::get_info(&admin.state.db, id).await?;
    let admin = admin.told(format!("Token {id} reissued."));
    value_shown_once(&admin, &info, &value).await
}

#[handler]
async fn end_grace(admin: SignedIn, Path(id): Path<i64>, _form: PostForm) -> Answer {
    tokens::end_grace(&admin.state.db, &admin.actor(), id).await?;
    let message = format!("Token {id}: the old value no longer works.");
    admin.done(&format!("/tokens/{id}"), &message)
}

#[handler]
async fn delete(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<DeleteForm>,
) -> Answer {
    let info = tokens::get_info(&admin.state.db, id).await?;
    let shown = TokenForm::of(&info);
    if let Some(forms) = form.refused(&info.token.name, ("the token's name", "token"), shown) {
        return token_answer(&admin, &info, None, Some(forms)).await;
    }
    tokens::delete(&admin.state.db, &admin.actor(), id).await?;
    let to = format!("/projects/{}/tokens", info.token.project_id);
    admin.done(&to, &format!("Token {id} deleted."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(name: &str, permissions: &[&str]) -> TokenForm {
        TokenForm {
            name: name.to_owned(),
            permission: permissions.iter().map(|p| (*p).to_owned()).collect(),
            ..TokenForm::default()
        }
    }

    #[test]
    fn forms_need_a_name_and_known_endpoints() {
        let read = form(
            " Shop ",
            &[
                "payment/order/read",
                "master-account/balance",
                "payment/order/read",
            ],
        )
        .read()
        .unwrap();
        assert_eq!(read.name, "Shop");
        assert_eq!(read.permissions, [Permission::Balance, Permission::Read]);

        let errors = form("", &[]).read().unwrap_err();
        assert!(errors.of("name").is_some());
        assert!(errors.of("permissions").unwrap().contains("at least one"));

        let errors = form("x", &["master-account/balance", "everything"])
            .read()
            .unwrap_err();
        assert!(errors.of("permissions").unwrap().contains("everything"));
    }

    #[test]
    fn checkboxes_are_read_as_a_list() {
        let body =
            "csrf=t&name=a&permission=payment%2Forder%2Fread&permission=master-account%2Fbalance";
        let sent: TokenForm = serde_html_form::from_str(body).unwrap();
        assert_eq!(sent.permission.len(), 2);
        let one: TokenForm = serde_html_form::from_str("name=a&permission=x").unwrap();
        assert_eq!(one.permission, ["x"]);
    }

    #[test]
    fn every_permission_names_its_endpoint() {
        for p in Permission::ALL {
            assert!(p.endpoint().contains(" /v2/"), "{p}");
        }
    }
}
