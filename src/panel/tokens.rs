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

use entity::{admin_audit_entry, app_token, project};
use maud::{Markup, html};
use poem::{
    Response, Route, get, handler, post,
    web::{Data, Path, Query},
};
use serde::Deserialize;

use super::{
    PanelError, PanelState,
    audit_log::{self, Listing},
    page::{self, FieldAttrs, FieldErrors, Params},
    session::{PostForm, SignedIn},
};
use crate::service::{
    AdminError,
    admin_audit::{self, AuditFilter},
    keyset::Listed,
    projects,
    tokens::{self, Permission, TokenInfo, TokenValue},
    validate,
};

/// How many admin-audit entries a token's page lists.
const HISTORY_LIMIT: u64 = 100;

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

/// What the create and edit forms hold.
#[derive(Debug, Default)]
struct TokenFields {
    name: String,
    description: String,
    permissions: Vec<Permission>,
    /// The expiry day as typed (`YYYY-MM-DD`, blank: never).
    expires_on: String,
    /// That day's start (UTC), when it is one.
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl TokenFields {
    fn of(info: &TokenInfo) -> TokenFields {
        TokenFields {
            name: info.token.name.clone(),
            description: info.token.description.clone().unwrap_or_default(),
            permissions: info.permissions.clone(),
            expires_on: expiry_day(&info.token),
            expires_at: info.token.expires_at,
        }
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

/// The fields of a posted create or edit form, with an error next to each
/// field that is wrong (the rules are the service's).
fn read_fields(form: &PostForm) -> (TokenFields, FieldErrors) {
    let mut errors = FieldErrors::default();
    let name = form.get("name");
    if let Err(message) = validate::check_name("token", name) {
        errors.add("name", message);
    }
    let description = form.get("description");
    if let Err(message) = validate::check_description(description) {
        errors.add("description", message);
    }
    let mut permissions = Vec::new();
    let mut unknown = Vec::new();
    for value in form.all("permission") {
        match value.parse::<Permission>() {
            Ok(permission) => permissions.push(permission),
            Err(_) => unknown.push(value),
        }
    }
    permissions.sort();
    permissions.dedup();
    if !unknown.is_empty() {
        errors.add(
            "permissions",
            format!("unknown endpoint: {}", unknown.join(", ")),
        );
    } else if permissions.is_empty() {
        errors.add(
            "permissions",
            "choose at least one endpoint: a token without any can call nothing",
        );
    }
    let expires_on = form.get("expires_on");
    let expires_at = page::parse_day(expires_on).unwrap_or_else(|message| {
        errors.add("expires_on", message);
        None
    });
    let fields = TokenFields {
        name: name.to_owned(),
        description: description.to_owned(),
        permissions,
        expires_on: expires_on.trim().to_owned(),
        expires_at,
    };
    (fields, errors)
}

/// A service refusal the form checks did not foresee, shown next to the
/// field it is about.
fn refused(err: AdminError) -> Result<FieldErrors, PanelError> {
    match err {
        AdminError::Invalid(field, message) | AdminError::Conflict(field, message) => {
            let field = if field == "expires_at" {
                "expires_on"
            } else {
                field
            };
            let mut errors = FieldErrors::default();
            errors.add(field, message);
            Ok(errors)
        }
        err => Err(err.into()),
    }
}

fn permission_badges(permissions: &[Permission]) -> Markup {
    html! {
        @for p in permissions { (page::badge(p.as_str(), "")) }
        @if permissions.is_empty() { (page::badge("no endpoint", "warn")) }
    }
}

fn created(token: &app_token::Model) -> Markup {
    html! {
        (page::when(&token.created_at))
        @if let Some(by) = &token.created_by { br; span.muted { "by " (by) } }
    }
}

fn last_used(at: Option<&chrono::DateTime<chrono::Utc>>) -> Markup {
    html! {
        @match at {
            Some(at) => { (page::when(at)) }
            None => { span.muted { "never" } }
        }
    }
}

/// A value as its last 4 characters (unknown for values issued before they
/// were kept).
fn value_end(last4: Option<&str>) -> Markup {
    html! {
        @match last4 {
            Some(last4) => { code { "…" (last4) } }
            None => { span.muted { "unknown" } }
        }
    }
}

fn expiry(token: &app_token::Model) -> Markup {
    html! {
        @match &token.expires_at {
            Some(at) if *at <= chrono::Utc::now() => { (page::badge("expired", "off")) " " (page::when(at)) }
            Some(at) => { (page::when(at)) }
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
fn token_fields(fields: &TokenFields, errors: &FieldErrors) -> Markup {
    html! {
        (page::text_field("Name", "name", &fields.name, errors, FieldAttrs::TEXT))
        (page::text_field("Description (optional)", "description", &fields.description, errors, FieldAttrs::OPTIONAL))
        (page::text_field("Expires on (UTC day, optional: from 00:00 that day it is refused)", "expires_on", &fields.expires_on, errors, FieldAttrs::DATE))
        fieldset id=[errors.id("permissions")] aria-invalid=[errors.invalid("permissions")] aria-describedby=[errors.described_by("permissions")] {
            legend { "Endpoints this token may call" }
            @for p in Permission::ALL {
                label {
                    input type="checkbox" name="permission" value=(p.as_str())
                        checked[fields.permissions.contains(&p)];
                    " " code { (p.endpoint()) } " " span.muted { (p.as_str()) }
                }
            }
            (errors.show("permissions"))
        }
    }
}

/// Tokens a page lists at most, newest first.
const PAGE_SIZE: u64 = 100;

fn list_page(
    admin: &SignedIn,
    params: &Params,
    p: &project::Model,
    all: &Listed<TokenInfo>,
) -> Markup {
    page::frame(
        admin,
        &format!("Tokens of {}", p.name),
        html! {
            p { a href={ "/projects/" (p.id) } { "Project " (p.name) } }
            (disabled_project_warning(p))
            div.actions {
                a.button href={ "/projects/" (p.id) "/tokens/new" } { "New token" }
            }
            (page::search_form(&format!("/projects/{}/tokens", p.id), "Name or description contains", "game panel", params.get("q")))
            div.table-wrap { table {
                thead { tr {
                    th { "Name" } th { "Value" } th { "Description" } th { "Endpoints" } th { "State" }
                    th { "Created" } th { "Expires" } th { "Last used" }
                } }
                tbody {
                    @for info in &all.rows {
                        @let t = &info.token;
                        tr {
                            td { a href={ "/tokens/" (t.id) } { (t.name) } }
                            td {
                                (value_end(t.last4.as_deref()))
                                @if let Some(until) = tokens::grace_until(t) {
                                    br; span.muted { "and " (value_end(t.previous_last4.as_deref())) " until " (page::when(&until)) }
                                }
                            }
                            td { @if let Some(d) = &t.description { (d) } }
                            td { (permission_badges(&info.permissions)) }
                            td { (page::state_badge(t.active)) }
                            td { (created(t)) }
                            td { (expiry(t)) }
                            td { (last_used(t.last_used_at.as_ref())) }
                        }
                    }
                    @if all.rows.is_empty() { tr { td colspan="8" .muted {
                        @if params.get("q").is_empty() { "No token yet." } @else { "No token matches." }
                    } } }
                }
            } }
            (page::paging(&format!("/projects/{}/tokens", p.id), params, &["q"], all.older))
            p.muted { "A token's value is shown once, when it is created or reissued; only a hash of it is kept." }
        },
    )
}

#[handler]
async fn list(
    admin: SignedIn,
    Path(id): Path<i64>,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, id).await?;
    let all = tokens::page(&state.db, id, params.get("q"), params.page(PAGE_SIZE)?).await?;
    Ok(page::ok(list_page(&admin, &params, &p, &all)))
}

fn new_page(
    admin: &SignedIn,
    p: &project::Model,
    like: Option<&app_token::Model>,
    fields: &TokenFields,
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
            section {
                form method="post" action={ "/projects/" (p.id) "/tokens" } {
                    (page::csrf(admin))
                    (token_fields(fields, errors))
                    p.muted { "The value is shown once, on the next page: copy it into your game panel's settings." }
                    button type="submit" { "Create token" }
                }
            }
        },
    )
}

#[derive(Debug, Deserialize)]
struct NewQuery {
    like: Option<String>,
}

#[handler]
async fn new_form(
    admin: SignedIn,
    Path(id): Path<i64>,
    Query(query): Query<NewQuery>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, id).await?;
    let like = match query.like.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => {
            let like_id = text
                .parse::<i64>()
                .map_err(|_| PanelError::NotFound(format!("token {text}")))?;
            Some(tokens::get_info(&state.db, like_id).await?)
        }
    };
    let fields = match &like {
        Some(info) => TokenFields {
            name: format!("{} (copy)", info.token.name),
            ..TokenFields::of(info)
        },
        None => TokenFields::default(),
    };
    let like = like.as_ref().map(|info| &info.token);
    Ok(page::ok(new_page(
        &admin,
        &p,
        like,
        &fields,
        &FieldErrors::default(),
    )))
}

#[handler]
async fn create(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, id).await?;
    let (fields, mut errors) = read_fields(&form);
    if errors.is_empty() {
        match tokens::create(
            &state.db,
            &admin.actor(),
            id,
            &fields.name,
            Some(&fields.description),
            &fields.permissions,
            fields.expires_at,
        )
        .await
        {
            Ok((info, value)) => {
                let admin = admin.told(format!("Token {} created.", info.token.id));
                return value_shown_once(&admin, &state, &info, &value).await;
            }
            Err(err) => errors = refused(err)?,
        }
    }
    Ok(page::invalid(new_page(&admin, &p, None, &fields, &errors)))
}

/// What the token's page shows of its value.
enum Reveal {
    /// The value, just created or reissued: shown this once.
    Now(String),
    /// Shown already, or never to this browser.
    Gone,
}

/// What the token page's forms hold: the edit form's fields, the delete
/// form's typed name, and the errors of either.
struct Forms<'a> {
    fields: &'a TokenFields,
    errors: &'a FieldErrors,
    confirm_name: &'a str,
}

fn token_page(
    admin: &SignedIn,
    info: &TokenInfo,
    p: &project::Model,
    reveal: &Reveal,
    history: &[admin_audit_entry::Model],
    forms: &Forms<'_>,
) -> Markup {
    let Forms {
        fields,
        errors,
        confirm_name,
    } = *forms;
    let t = &info.token;
    let base = format!("/tokens/{}", t.id);
    html! {
        (page::frame(admin, &format!("Token {}", t.name), html! {
            p { a href={ "/projects/" (p.id) "/tokens" } { "Tokens of " (p.name) } }
            (disabled_project_warning(p))
            @match reveal {
                Reveal::Now(value) => {
                    section.reveal data-address={ "/tokens/" (t.id) } {
                        h2 { "The token's value" }
                        p.secret id="token-value" { (value) }
                        div.actions {
                            button.secondary type="button" data-copy="token-value" { "Copy" }
                        }
                        p.warning { "Copy it now into your game panel's settings or a secret store: it will not be shown again, not even on this page after a reload. Only a hash of it is kept." }
                    }
                }
                Reveal::Gone => {
                    p.muted { "The value was shown once and cannot be shown again; reissue the token to get a new one." }
                }
            }
            section {
                h2 { "Details" }
                div.table-wrap { table {
                    tbody {
                        tr { th { "Id" } td { (t.id) } }
                        tr { th { "Project" } td { a href={ "/projects/" (p.id) } { (p.name) } } }
                        tr { th { "State" } td { (page::state_badge(t.active)) } }
                        tr { th { "Endpoints" } td { (permission_badges(&info.permissions)) } }
                        tr { th { "Description" } td {
                            @match &t.description { Some(d) => { (d) } None => { span.muted { "none" } } }
                        } }
                        tr { th { "Value" } td { (value_end(t.last4.as_deref())) } }
                        tr { th { "Created" } td { (created(t)) } }
                        tr { th { "Expires" } td { (expiry(t)) } }
                        tr { th { "Last used" } td { (last_used(t.last_used_at.as_ref())) } }
                    }
                } }
                div.actions {
                    a.button.secondary href={ "/projects/" (p.id) "/tokens/new?like=" (t.id) } { "New token like this one" }
                }
            }
            section {
                h2 { "Edit" }
                form method="post" action={ (base) "/edit" } {
                    (page::csrf(admin))
                    (token_fields(fields, errors))
                    p.muted { "Changes hold from the token's next API request." }
                    button type="submit" { "Save changes" }
                }
            }
            section {
                @if t.active {
                    h2 { "Disable" }
                    p { "A disabled token is answered 403 TOKEN_DISABLED from its next request on; it keeps its value and settings and works again once enabled." }
                    form method="post" action={ (base) "/active" } data-confirm={ "Disable token " (t.name) "? Requests made with it are refused at once." } {
                        (page::csrf(admin))
                        input type="hidden" name="active" value="false";
                        button.danger type="submit" { "Disable token" }
                    }
                } @else {
                    h2 { "Enable" }
                    p { "The token is disabled: its requests are answered 403 TOKEN_DISABLED. Enabling it makes its value work again from the next request." }
                    form method="post" action={ (base) "/active" } {
                        (page::csrf(admin))
                        input type="hidden" name="active" value="true";
                        button type="submit" { "Enable token" }
                    }
                }
            }
            @if let Some(until) = tokens::grace_until(t) {
                section {
                    h2 { "Old value in its grace period" }
                    p { "The value ending " (value_end(t.previous_last4.as_deref())) " still works until " (page::when(&until))
                        ", then it is answered 403 TOKEN_NOT_FOUND. Last used: " (last_used(t.previous_last_used_at.as_ref())) "." }
                    form method="post" action={ (base) "/end-grace" } data-confirm={ "End the grace period of token " (t.name) "? Its old value stops working at once." } {
                        (page::csrf(admin))
                        button.danger type="submit" { "End grace now" }
                    }
                }
            }
            section {
                h2 { "Reissue" }
                p { "Reissuing gives the token a new value, shown once, and keeps its name, endpoints and state. The old value keeps working for the grace period you choose, so that your game panels can switch without downtime; a reissue ends an earlier grace period." }
                form method="post" action={ (base) "/reissue" } data-confirm={ "Reissue token " (t.name) "?" } {
                    (page::csrf(admin))
                    label.field {
                        span { "The old value stops working" }
                        select name="grace_hours" {
                            @for (value, label) in GRACE_CHOICES { option value=(value) { (label) } }
                        }
                    }
                    button.danger type="submit" { "Reissue token" }
                }
            }
            section {
                h2 { "Delete" }
                p { "A deleted token is answered 403 TOKEN_NOT_FOUND from its next request on. This cannot be undone." }
                form method="post" action={ (base) "/delete" } {
                    (page::csrf(admin))
                    label.field {
                        span { "Type the token's name, " code { (t.name) } ", to confirm" }
                        input type="text" name="confirm_name" value=(confirm_name) required autocomplete="off"
                            id=[errors.id("confirm_name")] aria-invalid=[errors.invalid("confirm_name")] aria-describedby=[errors.described_by("confirm_name")];
                        (errors.show("confirm_name"))
                    }
                    button.danger type="submit" { "Delete token" }
                }
            }
            section {
                h2 { "Changes" }
                (audit_log::entries_table(history, Listing::OneObject, "No change recorded."))
            }
        }))
    }
}

/// The token's page with its new `value`, the one time it is shown.
async fn value_shown_once(
    admin: &SignedIn,
    state: &PanelState,
    info: &TokenInfo,
    value: &TokenValue,
) -> Result<Response, PanelError> {
    let forms = Forms {
        fields: &TokenFields::of(info),
        errors: &FieldErrors::default(),
        confirm_name: "",
    };
    let reveal = Reveal::Now(value.expose().to_owned());
    token_page_with(admin, state, info, &reveal, &forms).await
}

/// The token's page: with `reveal`, the answer to a creation or reissue
/// (200); else with `forms` sent back with their errors (422).
async fn token_page_with(
    admin: &SignedIn,
    state: &PanelState,
    info: &TokenInfo,
    reveal: &Reveal,
    forms: &Forms<'_>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, info.token.project_id).await?;
    let history = history(state, info.token.id).await?;
    let markup = token_page(admin, info, &p, reveal, &history, forms);
    Ok(match reveal {
        Reveal::Now(_) => page::ok(markup),
        Reveal::Gone => page::invalid(markup),
    })
}

async fn history(state: &PanelState, id: i64) -> Result<Vec<admin_audit_entry::Model>, PanelError> {
    let filter = AuditFilter {
        object_kind: Some("token".to_owned()),
        object_id: Some(id.to_string()),
        ..Default::default()
    };
    Ok(admin_audit::list(&state.db, &filter, HISTORY_LIMIT).await?)
}

#[handler]
async fn show(
    admin: SignedIn,
    Path(id): Path<i64>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let info = tokens::get_info(&state.db, id).await?;
    let p = projects::get(&state.db, info.token.project_id).await?;
    let history = history(&state, id).await?;
    Ok(page::ok(token_page(
        &admin,
        &info,
        &p,
        &Reveal::Gone,
        &history,
        &Forms {
            fields: &TokenFields::of(&info),
            errors: &FieldErrors::default(),
            confirm_name: "",
        },
    )))
}

#[handler]
async fn edit(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let info = tokens::get_info(&state.db, id).await?;
    let (fields, mut errors) = read_fields(&form);
    if errors.is_empty() {
        let edit = tokens::TokenEdit {
            name: Some(&fields.name),
            description: Some(&fields.description),
            permissions: Some(&fields.permissions),
            // The form shows the day only: an unchanged day keeps the time.
            expires_at: (fields.expires_on != expiry_day(&info.token)).then_some(fields.expires_at),
        };
        match tokens::edit(&state.db, &admin.actor(), id, edit).await {
            Ok(_) => {
                return Ok(page::done(
                    &admin,
                    &format!("/tokens/{id}"),
                    &format!("Token {id} saved."),
                ));
            }
            Err(err) => errors = refused(err)?,
        }
    }
    let forms = Forms {
        fields: &fields,
        errors: &errors,
        confirm_name: "",
    };
    token_page_with(&admin, &state, &info, &Reveal::Gone, &forms).await
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let active = form.active()?;
    tokens::set_active(&state.db, &admin.actor(), id, active).await?;
    let message = format!(
        "Token {id} {}.",
        if active { "enabled" } else { "disabled" }
    );
    Ok(page::done(&admin, &format!("/tokens/{id}"), &message))
}

#[handler]
async fn reissue(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let hours = form.get("grace_hours");
    if !GRACE_CHOICES.iter().any(|(value, _)| *value == hours) {
        return Err(PanelError::BadRequest("No such grace period."));
    }
    let grace = chrono::TimeDelta::hours(hours.parse().unwrap_or_default());
    let (_, value) = tokens::reissue(&state.db, &admin.actor(), id, grace).await?;
    let info = tokens::get_info(&state.db, id).await?;
    let admin = admin.told(format!("Token {id} reissued."));
    value_shown_once(&admin, &state, &info, &value).await
}

#[handler]
async fn end_grace(
    admin: SignedIn,
    Path(id): Path<i64>,
    _form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    tokens::end_grace(&state.db, &admin.actor(), id).await?;
    let message = format!("Token {id}: the old value no longer works.");
    Ok(page::done(&admin, &format!("/tokens/{id}"), &message))
}

#[handler]
async fn delete(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let info = tokens::get_info(&state.db, id).await?;
    let typed = form.get("confirm_name");
    if typed != info.token.name {
        let mut errors = FieldErrors::default();
        errors.add(
            "confirm_name",
            "this is not the token's name: type it exactly to delete the token",
        );
        let fields = TokenFields::of(&info);
        let forms = Forms {
            fields: &fields,
            errors: &errors,
            confirm_name: typed,
        };
        return token_page_with(&admin, &state, &info, &Reveal::Gone, &forms).await;
    }
    tokens::delete(&state.db, &admin.actor(), id).await?;
    let to = format!("/projects/{}/tokens", info.token.project_id);
    Ok(page::done(&admin, &to, &format!("Token {id} deleted.")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_need_a_name_and_known_endpoints() {
        let (fields, errors) = read_fields(&PostForm::from_pairs(&[
            ("name", " Shop "),
            ("permission", "payment/order/read"),
            ("permission", "master-account/balance"),
            ("permission", "payment/order/read"),
        ]));
        assert!(errors.is_empty());
        assert_eq!(fields.name, "Shop");
        assert_eq!(fields.permissions, [Permission::Balance, Permission::Read]);

        let (_, errors) = read_fields(&PostForm::from_pairs(&[("name", "")]));
        assert!(errors.of("name").is_some());
        assert!(errors.of("permissions").unwrap().contains("at least one"));

        let (_, errors) = read_fields(&PostForm::from_pairs(&[
            ("name", "x"),
            ("permission", "master-account/balance"),
            ("permission", "everything"),
        ]));
        assert!(errors.of("permissions").unwrap().contains("everything"));
    }

    #[test]
    fn every_permission_names_its_endpoint() {
        for p in Permission::ALL {
            assert!(p.endpoint().contains(" /v2/"), "{p}");
        }
    }
}
