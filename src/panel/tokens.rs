//! The tokens of a project: list, create (one checkbox per endpoint), edit,
//! disable and enable, reissue, delete, and "new token like this one".
//!
//! A token's value exists only in the answer to its creation or reissue: the
//! POST hands it to the browser in an HttpOnly session cookie (never kept
//! on disk as a persistent one) whose path is the token's page, and that
//! page shows it once and clears the cookie in the same answer. The value
//! never appears in a URL. The cookie is bound to the signed-in session
//! that made the value: one read in another session (another administrator
//! signing in later in the same browser), or that no longer matches the
//! token's stored hash (a reissue since), shows nothing.

use entity::{admin_audit_entry, app_token, project};
use maud::{Markup, html};
use poem::{
    Request, Response, Route, get, handler, post,
    web::{Data, Path, Query},
};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{
    PanelError, PanelState,
    audit_log::{self, Listing},
    page::{self, FieldAttrs, FieldErrors},
    session::{self, PostForm, SignedIn},
};
use crate::service::{
    AdminError,
    admin_audit::{self, AuditFilter},
    projects,
    tokens::{self, Permission, TokenInfo, TokenValue},
    validate,
};

/// How many leading characters of the session's CSRF token bind a reveal
/// cookie to that session.
const REVEAL_BINDING_LEN: usize = 16;
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
        .at("/tokens/:id/delete", post(delete))
}

/// What the create and edit forms hold.
#[derive(Debug, Default)]
struct TokenFields {
    name: String,
    description: String,
    permissions: Vec<Permission>,
}

impl TokenFields {
    fn of(info: &TokenInfo) -> TokenFields {
        TokenFields {
            name: info.token.name.clone(),
            description: info.token.description.clone().unwrap_or_default(),
            permissions: info.permissions.clone(),
        }
    }
}

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
    let fields = TokenFields {
        name: name.to_owned(),
        description: description.to_owned(),
        permissions,
    };
    (fields, errors)
}

/// A service refusal the form checks did not foresee, shown next to the
/// field it is about.
fn refused(err: AdminError) -> Result<FieldErrors, PanelError> {
    match err {
        AdminError::Invalid(field, message) | AdminError::Conflict(field, message) => {
            let mut errors = FieldErrors::default();
            errors.add(field, message);
            Ok(errors)
        }
        err => Err(err.into()),
    }
}

/// The cookie carrying a new value from its POST to the page showing it:
/// with `Secure`, the `__Secure-` prefix makes browsers refuse it unless it
/// is Secure.
fn reveal_cookie_name(secure: bool) -> &'static str {
    if secure {
        "__Secure-masterpay_reveal"
    } else {
        "masterpay_reveal"
    }
}

/// What binds a reveal cookie to `admin`'s session: the start of its CSRF
/// token (derived from the session's cookie, so another session's differs).
fn reveal_binding(admin: &SignedIn) -> &str {
    admin.csrf.get(..REVEAL_BINDING_LEN).unwrap_or(&admin.csrf)
}

/// Sets on `response` the reveal cookie of token `id`: `<binding>.<value>`
/// until the browser closes, or its removal when `value` is none.
fn set_reveal_cookie(response: &mut Response, id: i64, value: Option<(&str, &str)>, secure: bool) {
    let path = format!("/tokens/{id}");
    let name = reveal_cookie_name(secure);
    match value {
        Some((binding, value)) => {
            let text = format!("{binding}.{value}");
            session::set_cookie(response, (name, &text, &path), secure, None);
        }
        None => session::set_cookie(response, (name, "", &path), secure, Some(0)),
    }
}

/// The value a reveal cookie `sent` carries, when it was made in the
/// session whose binding is `ours` and is still the value of the token
/// whose hash is `token_hash`.
fn revealed(sent: &str, ours: &str, token_hash: &str) -> Option<String> {
    let (binding, value) = sent.split_once('.')?;
    let same_session =
        binding.len() == ours.len() && bool::from(binding.as_bytes().ct_eq(ours.as_bytes()));
    (same_session && tokens::hash(value) == token_hash).then(|| value.to_owned())
}

/// Off to the token's page, which shows `value` once to `admin`'s session.
fn show_value_once(admin: &SignedIn, id: i64, value: &TokenValue, secure: bool) -> Response {
    let mut response = page::redirect(&format!("/tokens/{id}"));
    let value = Some((reveal_binding(admin), value.expose()));
    set_reveal_cookie(&mut response, id, value, secure);
    response
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

fn last_used(token: &app_token::Model) -> Markup {
    html! {
        @match &token.last_used_at {
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
        fieldset aria-invalid=[errors.of("permissions").map(|_| "true")] {
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

fn list_page(admin: &SignedIn, p: &project::Model, all: &[TokenInfo]) -> Markup {
    page::frame(
        admin,
        &format!("Tokens of {}", p.name),
        html! {
            p { a href={ "/projects/" (p.id) } { "Project " (p.name) } }
            (disabled_project_warning(p))
            div.actions {
                a.button href={ "/projects/" (p.id) "/tokens/new" } { "New token" }
            }
            div.table-wrap { table {
                thead { tr {
                    th { "Name" } th { "Description" } th { "Endpoints" } th { "State" }
                    th { "Created" } th { "Last used" }
                } }
                tbody {
                    @for info in all {
                        @let t = &info.token;
                        tr {
                            td { a href={ "/tokens/" (t.id) } { (t.name) } }
                            td { @if let Some(d) = &t.description { (d) } }
                            td { (permission_badges(&info.permissions)) }
                            td { (page::state_badge(t.active)) }
                            td { (created(t)) }
                            td { (last_used(t)) }
                        }
                    }
                    @if all.is_empty() { tr { td colspan="6" .muted { "No token yet." } } }
                }
            } }
            p.muted { "A token's value is shown once, when it is created or reissued; only a hash of it is kept." }
        },
    )
}

#[handler]
async fn list(
    admin: SignedIn,
    Path(id): Path<i64>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, id).await?;
    let all = tokens::list(&state.db, id).await?;
    Ok(page::ok(list_page(&admin, &p, &all)))
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
        )
        .await
        {
            Ok((info, value)) => {
                return Ok(show_value_once(
                    &admin,
                    info.token.id,
                    &value,
                    state.cookie_secure,
                ));
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
                    section.reveal {
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
                        tr { th { "Created" } td { (created(t)) } }
                        tr { th { "Last used" } td { (last_used(t)) } }
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
            section {
                h2 { "Reissue" }
                p { "Reissuing gives the token a new value, shown once, and keeps its name, endpoints and state. The old value stops working at once." }
                p.muted { "To rotate without downtime, create a new token like this one, switch your game panel to it, then delete this one." }
                form method="post" action={ (base) "/reissue" } data-confirm={ "Reissue token " (t.name) "? The old value stops working at once." } {
                    (page::csrf(admin))
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
                            aria-invalid=[errors.of("confirm_name").map(|_| "true")];
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

/// The token's page with `fields` in its edit form, `errors` next to their
/// fields, and nothing revealed (for forms sent back).
async fn token_page_again(
    admin: &SignedIn,
    state: &PanelState,
    info: &TokenInfo,
    forms: &Forms<'_>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, info.token.project_id).await?;
    let history = history(state, info.token.id).await?;
    Ok(page::invalid(token_page(
        admin,
        info,
        &p,
        &Reveal::Gone,
        &history,
        forms,
    )))
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
    req: &Request,
    Path(id): Path<i64>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let info = tokens::get_info(&state.db, id).await?;
    let p = projects::get(&state.db, info.token.project_id).await?;
    let history = history(&state, id).await?;
    let sent = session::read_cookie(req, reveal_cookie_name(state.cookie_secure));
    let was_sent = sent.is_some();
    // A value of another session, from before a reissue or of another token
    // shows nothing.
    let reveal = match sent
        .as_deref()
        .and_then(|sent| revealed(sent, reveal_binding(&admin), &info.token.token_hash))
    {
        Some(value) => Reveal::Now(value),
        None => Reveal::Gone,
    };
    let mut response = page::ok(token_page(
        &admin,
        &info,
        &p,
        &reveal,
        &history,
        &Forms {
            fields: &TokenFields::of(&info),
            errors: &FieldErrors::default(),
            confirm_name: "",
        },
    ));
    if was_sent {
        set_reveal_cookie(&mut response, id, None, state.cookie_secure);
    }
    Ok(response)
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
        match tokens::edit(
            &state.db,
            &admin.actor(),
            id,
            Some(&fields.name),
            Some(&fields.description),
            Some(&fields.permissions),
        )
        .await
        {
            Ok(_) => return Ok(page::redirect(&format!("/tokens/{id}"))),
            Err(err) => errors = refused(err)?,
        }
    }
    let forms = Forms {
        fields: &fields,
        errors: &errors,
        confirm_name: "",
    };
    token_page_again(&admin, &state, &info, &forms).await
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
    Ok(page::redirect(&format!("/tokens/{id}")))
}

#[handler]
async fn reissue(
    admin: SignedIn,
    Path(id): Path<i64>,
    _form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let (token, value) = tokens::reissue(&state.db, &admin.actor(), id).await?;
    Ok(show_value_once(
        &admin,
        token.id,
        &value,
        state.cookie_secure,
    ))
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
        return token_page_again(&admin, &state, &info, &forms).await;
    }
    tokens::delete(&state.db, &admin.actor(), id).await?;
    Ok(page::redirect(&format!(
        "/projects/{}/tokens",
        info.token.project_id
    )))
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
    fn a_reveal_cookie_shows_its_value_only_to_its_session() {
        let value = "a".repeat(64);
        let hash = tokens::hash(&value);
        let ours = "0123456789abcdef";
        let sent = format!("{ours}.{value}");
        assert_eq!(revealed(&sent, ours, &hash), Some(value.clone()));
        // Another session's, a stale value, no binding, an empty binding.
        assert_eq!(revealed(&sent, "fedcba9876543210", &hash), None);
        assert_eq!(revealed(&sent, ours, &tokens::hash("other")), None);
        assert_eq!(revealed(&value, ours, &hash), None);
        assert_eq!(revealed(&format!(".{value}"), ours, &hash), None);
        assert_eq!(revealed(&format!("{ours}0.{value}"), ours, &hash), None);
        // The cookie is a session cookie, named for Secure when it is.
        let set = |value: Option<(&str, &str)>, secure: bool| {
            let mut response = Response::default();
            set_reveal_cookie(&mut response, 7, value, secure);
            let cookie = response.headers().get(poem::http::header::SET_COOKIE);
            cookie.unwrap().to_str().unwrap().to_owned()
        };
        let cookie = set(Some((ours, &value)), true);
        assert!(cookie.starts_with(&format!("__Secure-masterpay_reveal={sent};")));
        assert!(cookie.contains("Path=/tokens/7") && cookie.contains("Secure"));
        assert!(!cookie.contains("Max-Age") && !cookie.contains("Expires"));
        let cleared = set(None, false);
        assert!(cleared.starts_with("masterpay_reveal=;"), "{cleared}");
        assert!(cleared.contains("Max-Age=0"));
    }

    #[test]
    fn every_permission_names_its_endpoint() {
        for p in Permission::ALL {
            assert!(p.endpoint().contains(" /v2/"), "{p}");
        }
    }
}
