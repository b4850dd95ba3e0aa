//! Users and servers of a project: search, create; a user's balances,
//! "set balance" (with a required reason) and operation history.

use std::collections::HashMap;

use entity::{balance::GENERAL_ACCOUNT, project, server, user};
use poem::web::Query;

use super::{
    components::account_name,
    form::{attempt, parse_money, parse_server},
    prelude::*,
};
use crate::{
    domain::Email,
    money::Money,
    service::{
        AdminError,
        balances::{self, AccountBalance},
        ledger::{self, HistoryError, HistoryRequest, Page},
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

// ---------------------------------------------------------------------------
// A project's users and servers.

/// The new-user and new-server forms of the users page (each reads its
/// own field), as sent back with errors.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ProjectForms {
    email: String,
    server_name: String,
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
    query: &PageQuery<Search>,
    (forms, errors): (&ProjectForms, &FieldErrors),
) -> Markup {
    let p = &view.project;
    let q = query.filters.q.as_str();
    let path = format!("/projects/{}/users", p.id);
    let email_attrs = FieldAttrs {
        kind: "email",
        ..FieldAttrs::TEXT.placeholder("player@example.com")
    };
    page::frame(
        admin,
        &format!("Users and servers of {}", p.name),
        html! {
            p {
                a href={ "/projects/" (p.id) } { "Project " (p.name) }
                " · " (c::state_badge(p.active))
                " · " a href={ "/orders?project=" (p.id) } { "orders" }
                " · " a href={ "/projects/" (p.id) "/tokens" } { "tokens" }
            }
            section {
                h2 { "Users" }
                (c::search_form(&path, "User id or e-mail", "42, alice@example.com or example.com", q))
                (c::list(&view.found.rows, &[
                    Column("Id", "num", &|u| html! { a href={ "/users/" (u.id) } { (u.id) } }),
                    Column("E-mail", "", &|u| html! { a href={ "/users/" (u.id) } { (u.email) } }),
                    Column("Created", "", &|u| html! { (c::when(&u.created_at)) }),
                ], html! { @if q.is_empty() { "No user yet." } @else { "No user matches " (q) "." } }))
                (c::paging(&path, query, view.found.older))
            }
            (c::form_section(admin, ("New user", &format!("/projects/{}/users", p.id)), html! {
                (c::text_field("E-mail (unique in the project)", "email", &forms.email, errors, email_attrs))
                button type="submit" { "Create user" }
            }))
            section {
                h2 { "Servers" }
                p.muted { "Balances are kept per user on each server and on the general account (server 0)." }
                (c::list(&view.servers, &[
                    Column("Id", "num", &|s| html! { (s.id) }),
                    Column("Name", "", &|s| html! { (s.name) }),
                    Column("Created", "", &|s| html! { (c::when(&s.created_at)) }),
                ], "No server yet."))
                h2 { "New server" }
                (c::post_form(admin, &format!("/projects/{}/servers", p.id), None, html! {
                    (c::text_field("Name", "server_name", &forms.server_name, errors, FieldAttrs::TEXT))
                    button type="submit" { "Create server" }
                }))
            }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, Path(id): Path<i64>, query: PageQuery<Search>) -> Answer {
    let page = query.page(PAGE_SIZE)?;
    let view = project_view(&admin.state, id, &query.filters.q, page).await?;
    let forms = (&ProjectForms::default(), &FieldErrors::default());
    Ok(page::ok(users_page(&admin, &view, &query, forms)))
}

/// The users page with `forms` sent back with their `errors`.
async fn refused(admin: &SignedIn, id: i64, forms: &ProjectForms, errors: &FieldErrors) -> Answer {
    let view = project_view(&admin.state, id, "", Keyset::first(PAGE_SIZE)).await?;
    let markup = users_page(admin, &view, &PageQuery::default(), (forms, errors));
    Ok(page::invalid(markup))
}

#[handler]
async fn create_user(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<ProjectForms>,
) -> Answer {
    let created = match form.email.parse::<Email>() {
        Ok(address) => users::create(&admin.state.db, &admin.actor(), id, &address).await,
        Err(err) => Err(AdminError::Invalid("email", err.to_string())),
    };
    match created {
        Ok(user) => admin.done(
            &format!("/users/{}", user.id),
            &format!("User {} created.", user.id),
        ),
        Err(err) => refused(&admin, id, &form, &FieldErrors::refused(err)?).await,
    }
}

#[handler]
async fn create_server(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<ProjectForms>,
) -> Answer {
    match servers::create(&admin.state.db, &admin.actor(), id, &form.server_name).await {
        Ok(server) => admin.done(
            &format!("/projects/{id}/users"),
            &format!("Server {} created.", server.id),
        ),
        // The server form's one field, named apart from the user form's on
        // the same page.
        Err(AdminError::Invalid(_, message) | AdminError::Conflict(_, message)) => {
            let errors = FieldErrors::one("server_name", message);
            refused(&admin, id, &form, &errors).await
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

/// The "set balance" form, as sent and as sent back with errors.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BalanceForm {
    server: String,
    main: String,
    bonus: String,
    reason: String,
}

/// What a correct "set balance" form asks for.
struct BalanceChange {
    server: i64,
    main: Option<Money>,
    bonus: Option<Money>,
    reason: String,
}

impl BalanceForm {
    fn read(&self) -> Result<BalanceChange, FieldErrors> {
        let mut errors = FieldErrors::default();
        let server = parse_server(&self.server)
            .ok_or_else(|| "choose the general account or one of the project's servers".to_owned());
        let server = errors.field("server", server);
        let main = errors.field("main", parse_money(&self.main)).flatten();
        let bonus = errors.field("bonus", parse_money(&self.bonus)).flatten();
        if errors.of("main").is_none()
            && errors.of("bonus").is_none()
            && let Err(message) = balances::check_amounts(main, bonus)
        {
            errors.add("main", message);
        }
        let reason = errors.field("reason", validate::check_reason(&self.reason));
        errors.or_with(|| {
            Some(BalanceChange {
                server: server?,
                main,
                bonus,
                reason: reason?,
            })
        })
    }
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

fn user_page(
    admin: &SignedIn,
    view: &UserView,
    (form, errors): (&BalanceForm, &FieldErrors),
) -> Markup {
    let u = &view.user;
    let p = &view.project;
    let accounts = std::iter::once(GENERAL_ACCOUNT)
        .chain(view.servers.iter().map(|s| s.id))
        .map(|id| (id.to_string(), account_name(id, &view.servers)));
    let optional = FieldAttrs::OPTIONAL.placeholder("unchanged");
    page::frame(
        admin,
        &format!("User {} · {}", u.id, u.email),
        html! {
            p {
                "User " (u.id) " · " (u.email) " · project "
                a href={ "/projects/" (p.id) "/users" } { (p.name) }
                " · created " (c::when(&u.created_at))
            }
            div.actions {
                a.button href={ "/orders?project=" (p.id) "&user=" (u.id) "#new-order" } { "New order" }
                a.button.secondary href={ "/orders?project=" (p.id) "&user=" (u.id) } { "Orders" }
                a.button.secondary href={ "/ledger?user=" (u.id) } { "Ledger" }
            }
            section {
                h2 { "Balances" }
                (c::list(&view.balances, &[
                    Column("Account", "", &|(server_id, _)| html! { (account_name(*server_id, &view.servers)) }),
                    Column("Main", "num", &|(_, balance)| html! { (balance.main) }),
                    Column("Bonus", "num", &|(_, balance)| html! { (balance.bonus) }),
                ], "No account."))
            }
            section {
                h2 { "Set balance" }
                p.muted { "Sets the balance to the amount given (not added to it). Leave a balance blank to keep it; the change is written to the ledger, and the reason to the audit log." }
                (c::post_form(admin, &format!("/users/{}/balance", u.id), None, html! {
                    (errors.show("balance"))
                    (c::select_field(("Account", "server"), errors, Blank::None, accounts, &form.server))
                    (c::text_field("Main balance", "main", &form.main, errors, optional))
                    (c::text_field("Bonus balance", "bonus", &form.bonus, errors, optional))
                    (c::text_field("Reason (required, kept in the audit log)", "reason", &form.reason, errors, FieldAttrs::TEXT))
                    button type="submit" { "Set balance" }
                }))
            }
            section {
                h2 { "Operation history" }
                @if view.bad_cursor {
                    p.warning { "That page of the history no longer exists; the newest entries are shown." }
                }
                (c::operations_table(&view.history.entries, p.id, &view.servers))
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
async fn show(admin: SignedIn, Path(id): Path<i64>, Query(query): Query<HistoryQuery>) -> Answer {
    let view = user_view(&admin.state, id, query.before).await?;
    let forms = (&BalanceForm::default(), &FieldErrors::default());
    Ok(page::ok_unless(
        view.bad_cursor,
        user_page(&admin, &view, forms),
    ))
}

#[handler]
async fn set_balance(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<BalanceForm>,
) -> Answer {
    let (db, actor) = (&admin.state.db, admin.actor());
    let set = |change: BalanceChange| async move {
        let (server, reason) = (Some(change.server), &change.reason);
        balances::set(db, &actor, id, server, change.main, change.bonus, reason).await
    };
    let refused = |err| match err {
        AdminError::NotFound("server", _) => Ok(FieldErrors::one(
            "server",
            "this server is not one of the project's",
        )),
        err => FieldErrors::refused(err),
    };
    match attempt(form.read(), set, refused).await? {
        Ok(_) => admin.done(
            &format!("/users/{id}"),
            &format!("Balance of user {id} set."),
        ),
        Err(errors) => {
            let view = user_view(&admin.state, id, None).await?;
            Ok(page::invalid(user_page(&admin, &view, (&form, &errors))))
        }
    }
}
