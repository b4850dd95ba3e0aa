//! Users and servers of a project: search, create; a user's balances,
//! "set balance" (with a required reason) and operation history.

use std::collections::HashMap;

use entity::{balance::GENERAL_ACCOUNT, operation_log::BalanceType, project, server, user};
use maud::{Markup, html};
use poem::{
    Response, Route, get, handler, post,
    web::{Data, Path, Query},
};
use serde::Deserialize;

use super::{
    PanelError, PanelState,
    page::{self, FieldAttrs, FieldErrors, Params},
    session::{PostForm, SignedIn},
};
use crate::{
    domain::Email,
    money::{Money, signed_cents},
    service::{
        AdminError,
        balances::{self, AccountBalance},
        keyset::{Keyset, Listed},
        ledger::{self, Entry, HistoryError, HistoryRequest, Page},
        projects, servers,
        users::{self, UserRef},
        validate,
    },
};

/// Users a page lists at most, of a search or without one, newest first.
const PAGE_SIZE: u64 = 50;
/// Operation-log entries per page of a user's history.
const HISTORY_LIMIT: u64 = 50;

pub fn routes(route: Route) -> Route {
    route
        .at("/projects/:id/users", get(list).post(create_user))
        .at("/projects/:id/servers", post(create_server))
        .at("/users/:id", get(show))
        .at("/users/:id/balance", post(set_balance))
}

/// An amount typed in a form: `None` when left blank, else exact money, or
/// the message to show next to its field.
pub(super) fn parse_money(text: &str) -> Result<Option<Money>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<Money>()
        .map(Some)
        .map_err(|err| format!("{text:?} {err}"))
}

/// An account typed or chosen in a form: a server id, or blank or 0 for
/// the general account; `None` when it is not one.
pub(super) fn parse_server(text: &str) -> Option<i64> {
    match text {
        "" => Some(GENERAL_ACCOUNT),
        text => text.parse::<i64>().ok().filter(|&id| id >= 0),
    }
}

/// The name of account `server_id` of a project with `servers`.
pub(super) fn account_name(server_id: i64, servers: &[server::Model]) -> String {
    if server_id == GENERAL_ACCOUNT {
        return "General account".to_owned();
    }
    match servers.iter().find(|s| s.id == server_id) {
        Some(s) => format!("{} (server {})", s.name, s.id),
        None => format!("Server {server_id}"),
    }
}

fn balance_type_text(kind: BalanceType) -> &'static str {
    match kind {
        BalanceType::Main => "main",
        BalanceType::Bonus => "bonus",
    }
}

/// Operation-log entries as a table (a user's history, an order's credit).
pub(super) fn entries_table(
    entries: &[Entry],
    project_id: i64,
    servers: &[server::Model],
) -> Markup {
    html! {
        div.table-wrap { table {
            thead { tr {
                th { "When" } th { "Kind" } th { "Account" } th { "Balance" }
                th.num { "Change" } th.num { "Before" } th.num { "After" } th { "Order" }
            } }
            tbody {
                @for e in entries {
                    tr {
                        td { (page::when(&e.created_at)) }
                        td { (page::kind_label(e.kind)) }
                        td { (account_name(e.server_id, servers)) }
                        td { (balance_type_text(e.balance_type)) }
                        td.num { (signed_cents(e.amount_cents)) }
                        td.num { (e.balance_before) }
                        td.num { (e.balance_after) }
                        td {
                            @if let Some(order_id) = &e.order_id {
                                a href={ "/orders/" (project_id) "/" (order_id) } { (order_id) }
                            }
                        }
                    }
                }
                @if entries.is_empty() { tr { td colspan="8" .muted { "No operation yet." } } }
            }
        } }
    }
}

// ---------------------------------------------------------------------------
// A project's users and servers.

/// What the forms of the users page hold when sent back with errors.
#[derive(Default)]
struct ProjectForms<'a> {
    email: &'a str,
    server_name: &'a str,
    errors: FieldErrors,
}

struct ProjectView {
    project: project::Model,
    found: Listed<user::Model>,
    servers: Vec<server::Model>,
}

async fn project_view(
    state: &PanelState,
    project_id: i64,
    q: &str,
    page: Keyset,
) -> Result<ProjectView, PanelError> {
    let project = projects::get(&state.db, project_id).await?;
    let found = users::search(&state.db, project_id, q, page).await?;
    let servers = servers::list(&state.db, project_id).await?;
    Ok(ProjectView {
        project,
        found,
        servers,
    })
}

fn users_page(
    admin: &SignedIn,
    view: &ProjectView,
    params: &Params,
    forms: &ProjectForms,
) -> Markup {
    let p = &view.project;
    let q = params.get("q");
    let path = format!("/projects/{}/users", p.id);
    let email_attrs = FieldAttrs {
        kind: "email",
        required: true,
        placeholder: Some("player@example.com"),
    };
    page::frame(
        admin,
        &format!("Users and servers of {}", p.name),
        html! {
            p {
                a href={ "/projects/" (p.id) } { "Project " (p.name) }
                " · " (page::state_badge(p.active))
                " · " a href={ "/orders?project=" (p.id) } { "orders" }
                " · " a href={ "/projects/" (p.id) "/tokens" } { "tokens" }
            }
            section {
                h2 { "Users" }
                (page::search_form(&format!("/projects/{}/users", p.id), "User id or e-mail", "42, alice@example.com or example.com", q))
                div.table-wrap { table {
                    thead { tr { th.num { "Id" } th { "E-mail" } th { "Created" } } }
                    tbody {
                        @for u in &view.found.rows {
                            tr {
                                td.num { a href={ "/users/" (u.id) } { (u.id) } }
                                td { a href={ "/users/" (u.id) } { (u.email) } }
                                td { (page::when(&u.created_at)) }
                            }
                        }
                        @if view.found.rows.is_empty() {
                            tr { td colspan="3" .muted {
                                @if q.is_empty() { "No user yet." } @else { "No user matches " (q) "." }
                            } }
                        }
                    }
                } }
                (page::paging(&path, params, &["q"], view.found.older))
            }
            section {
                h2 { "New user" }
                form method="post" action={ "/projects/" (p.id) "/users" } {
                    (page::csrf(admin))
                    (page::text_field("E-mail (unique in the project)", "email", forms.email, &forms.errors, email_attrs))
                    button type="submit" { "Create user" }
                }
            }
            section {
                h2 { "Servers" }
                p.muted { "Balances are kept per user on each server and on the general account (server 0)." }
                div.table-wrap { table {
                    thead { tr { th.num { "Id" } th { "Name" } th { "Created" } } }
                    tbody {
                        @for s in &view.servers {
                            tr {
                                td.num { (s.id) }
                                td { (s.name) }
                                td { (page::when(&s.created_at)) }
                            }
                        }
                        @if view.servers.is_empty() { tr { td colspan="3" .muted { "No server yet." } } }
                    }
                } }
                h2 { "New server" }
                form method="post" action={ "/projects/" (p.id) "/servers" } {
                    (page::csrf(admin))
                    (page::text_field("Name", "server_name", forms.server_name, &forms.errors, FieldAttrs::TEXT))
                    button type="submit" { "Create server" }
                }
            }
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
    let page = params.page(PAGE_SIZE)?;
    let view = project_view(&state, id, params.get("q"), page).await?;
    Ok(page::ok(users_page(
        &admin,
        &view,
        &params,
        &ProjectForms::default(),
    )))
}

#[handler]
async fn create_user(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let email = form.get("email");
    let created = match email.parse::<Email>() {
        Ok(address) => users::create(&state.db, &admin.actor(), id, &address).await,
        Err(err) => Err(AdminError::Invalid("email", err.to_string())),
    };
    match created {
        Ok(user) => Ok(page::done(
            &admin,
            &format!("/users/{}", user.id),
            &format!("User {} created.", user.id),
        )),
        Err(AdminError::Invalid(field, message) | AdminError::Conflict(field, message)) => {
            let mut forms = ProjectForms {
                email,
                ..ProjectForms::default()
            };
            forms.errors.add(field, message);
            let view = project_view(&state, id, "", Keyset::first(PAGE_SIZE)).await?;
            Ok(page::invalid(users_page(
                &admin,
                &view,
                &Params::default(),
                &forms,
            )))
        }
        Err(err) => Err(err.into()),
    }
}

#[handler]
async fn create_server(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let name = form.get("server_name");
    match servers::create(&state.db, &admin.actor(), id, name).await {
        Ok(server) => Ok(page::done(
            &admin,
            &format!("/projects/{id}/users"),
            &format!("Server {} created.", server.id),
        )),
        // The server form's one field, named apart from the user form's on
        // the same page.
        Err(AdminError::Invalid(_, message) | AdminError::Conflict(_, message)) => {
            let mut forms = ProjectForms {
                server_name: name,
                ..ProjectForms::default()
            };
            forms.errors.add("server_name", message);
            let view = project_view(&state, id, "", Keyset::first(PAGE_SIZE)).await?;
            Ok(page::invalid(users_page(
                &admin,
                &view,
                &Params::default(),
                &forms,
            )))
        }
        Err(err) => Err(err.into()),
    }
}

// ---------------------------------------------------------------------------
// A user: balances, "set balance", history.

#[derive(Debug, Default, Deserialize)]
struct HistoryQuery {
    /// Where the page of the history starts (the previous page's cursor).
    before: Option<String>,
}

/// The "set balance" form as sent back with errors.
#[derive(Default)]
struct BalanceForm<'a> {
    server: &'a str,
    main: &'a str,
    bonus: &'a str,
    reason: &'a str,
    errors: FieldErrors,
}

struct UserView {
    user: user::Model,
    project: project::Model,
    servers: Vec<server::Model>,
    /// Every account of the project (general first), with the user's balance.
    balances: Vec<(i64, AccountBalance)>,
    history: Page,
    /// Set when the requested history page's cursor was refused.
    bad_cursor: bool,
}

async fn user_view(
    state: &PanelState,
    user_id: i64,
    before: Option<String>,
) -> Result<UserView, PanelError> {
    let db = &state.db;
    let user = users::get(db, user_id).await?;
    let project = projects::get(db, user.project_id).await?;
    let servers = servers::list(db, user.project_id).await?;
    let held: HashMap<i64, AccountBalance> =
        balances::of_user(db, user.id).await?.into_iter().collect();
    let zero = AccountBalance {
        main: Money::ZERO,
        bonus: Money::ZERO,
    };
    let mut accounts: Vec<i64> = std::iter::once(GENERAL_ACCOUNT)
        .chain(servers.iter().map(|s| s.id))
        .collect();
    for id in held.keys() {
        if !accounts.contains(id) {
            accounts.push(*id);
        }
    }
    let balances = accounts
        .into_iter()
        .map(|id| (id, held.get(&id).copied().unwrap_or(zero)))
        .collect();
    let mut request = HistoryRequest {
        project_id: user.project_id,
        who: UserRef::Id(user.id),
        server_id: None,
        limit: HISTORY_LIMIT,
        cursor: before.filter(|c| !c.is_empty()),
    };
    let mut bad_cursor = false;
    let history = loop {
        match ledger::page(db, &request).await {
            Ok(page) => break page,
            Err(HistoryError::BadCursor) if request.cursor.is_some() => {
                bad_cursor = true;
                request.cursor = None;
            }
            Err(HistoryError::Store(err)) => return Err(err.into()),
            Err(
                HistoryError::UserNotFound | HistoryError::ServerNotFound | HistoryError::BadCursor,
            ) => {
                return Err(PanelError::NotFound(format!("user {user_id}")));
            }
        }
    };
    Ok(UserView {
        user,
        project,
        servers,
        balances,
        history,
        bad_cursor,
    })
}

fn user_page(admin: &SignedIn, view: &UserView, form: &BalanceForm) -> Markup {
    let u = &view.user;
    let p = &view.project;
    let errors = &form.errors;
    let selected: i64 = form.server.parse().unwrap_or(GENERAL_ACCOUNT);
    let optional = FieldAttrs {
        placeholder: Some("unchanged"),
        ..FieldAttrs::OPTIONAL
    };
    page::frame(
        admin,
        &format!("User {} · {}", u.id, u.email),
        html! {
            p {
                "User " (u.id) " · " (u.email) " · project "
                a href={ "/projects/" (p.id) "/users" } { (p.name) }
                " · created " (page::when(&u.created_at))
            }
            div.actions {
                a.button href={ "/orders?project=" (p.id) "&user=" (u.id) "#new-order" } { "New order" }
                a.button.secondary href={ "/orders?project=" (p.id) "&user=" (u.id) } { "Orders" }
                a.button.secondary href={ "/ledger?user=" (u.id) } { "Ledger" }
            }
            section {
                h2 { "Balances" }
                div.table-wrap { table {
                    thead { tr { th { "Account" } th.num { "Main" } th.num { "Bonus" } } }
                    tbody {
                        @for (server_id, balance) in &view.balances {
                            tr {
                                td { (account_name(*server_id, &view.servers)) }
                                td.num { (balance.main) }
                                td.num { (balance.bonus) }
                            }
                        }
                    }
                } }
            }
            section {
                h2 { "Set balance" }
                p.muted { "Sets the balance to the amount given (not added to it). Leave a balance blank to keep it; the change is written to the ledger, and the reason to the audit log." }
                form method="post" action={ "/users/" (u.id) "/balance" } {
                    (page::csrf(admin))
                    (errors.show("balance"))
                    label.field {
                        span { "Account" }
                        select name="server" id=[errors.id("server")] aria-invalid=[errors.invalid("server")] aria-describedby=[errors.described_by("server")] {
                            option value="0" selected[selected == GENERAL_ACCOUNT] { "General account" }
                            @for s in &view.servers {
                                option value=(s.id) selected[selected == s.id] { (s.name) " (server " (s.id) ")" }
                            }
                        }
                        (errors.show("server"))
                    }
                    (page::text_field("Main balance", "main", form.main, errors, optional))
                    (page::text_field("Bonus balance", "bonus", form.bonus, errors, optional))
                    (page::text_field("Reason (required, kept in the audit log)", "reason", form.reason, errors, FieldAttrs::TEXT))
                    button type="submit" { "Set balance" }
                }
            }
            section {
                h2 { "Operation history" }
                @if view.bad_cursor {
                    p.warning { "That page of the history no longer exists; the newest entries are shown." }
                }
                (entries_table(&view.history.entries, p.id, &view.servers))
                div.actions {
                    @if let Some(cursor) = &view.history.next_cursor {
                        a.button.secondary href={ "/users/" (u.id) "?before=" (cursor) } { "Older entries" }
                    }
                    a.button.secondary href={ "/ledger?user=" (u.id) } { "This user in the ledger" }
                }
            }
        },
    )
}

#[handler]
async fn show(
    admin: SignedIn,
    Path(id): Path<i64>,
    Query(query): Query<HistoryQuery>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let view = user_view(&state, id, query.before).await?;
    let markup = user_page(&admin, &view, &BalanceForm::default());
    Ok(if view.bad_cursor {
        page::invalid(markup)
    } else {
        page::ok(markup)
    })
}

#[handler]
async fn set_balance(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let mut sent = BalanceForm {
        server: form.get("server"),
        main: form.get("main"),
        bonus: form.get("bonus"),
        reason: form.get("reason"),
        errors: FieldErrors::default(),
    };
    let errors = &mut sent.errors;
    let server = parse_server(sent.server);
    if server.is_none() {
        errors.add(
            "server",
            "choose the general account or one of the project's servers",
        );
    }
    let mut money = |field: &'static str, text: &str| {
        parse_money(text).unwrap_or_else(|message| {
            errors.add(field, message);
            None
        })
    };
    let main = money("main", sent.main);
    let bonus = money("bonus", sent.bonus);
    if errors.of("main").is_none()
        && errors.of("bonus").is_none()
        && let Err(message) = balances::check_amounts(main, bonus)
    {
        errors.add("main", message);
    }
    if let Err(message) = validate::check_reason(sent.reason) {
        errors.add("reason", message);
    }
    if errors.is_empty() {
        let result = balances::set(
            &state.db,
            &admin.actor(),
            id,
            server,
            main,
            bonus,
            sent.reason,
        )
        .await;
        match result {
            Ok(_) => {
                return Ok(page::done(
                    &admin,
                    &format!("/users/{id}"),
                    &format!("Balance of user {id} set."),
                ));
            }
            Err(AdminError::NotFound("server", _)) => {
                errors.add("server", "this server is not one of the project's");
            }
            Err(AdminError::Invalid(field, message) | AdminError::Conflict(field, message)) => {
                errors.add(field, message);
            }
            Err(err) => return Err(err.into()),
        }
    }
    let view = user_view(&state, id, None).await?;
    Ok(page::invalid(user_page(&admin, &view, &sent)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_typed_in_forms() {
        assert_eq!(parse_money(""), Ok(None));
        assert_eq!(parse_money("10.5"), Ok(Some("10.50".parse().unwrap())));
        for bad in ["abc", "1.234", "-5", "1,5", " 1"] {
            assert!(parse_money(bad).is_err(), "{bad}");
        }
    }
}
