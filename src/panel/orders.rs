//! Orders: find one by its id, filter the list, create one, and an order's
//! page with its history and, while it is pending, buttons to complete it
//! (a refused completion, once the balance allows) or cancel it, with the
//! API's rules: a completed or cancelled order stays as it is.

use entity::{
    admin_audit_entry, balance::GENERAL_ACCOUNT, payment_order::OrderStatus, project, server, user,
};
use maud::{Markup, html};
use poem::{
    Response, Route, get, handler,
    http::StatusCode,
    post,
    web::{Data, Path},
};
use sea_orm::ActiveEnum;

use super::{
    PanelError, PanelState,
    audit_log::{self, Listing},
    csv_export,
    page::{self, FieldAttrs, FieldErrors, Params},
    session::{PostForm, SignedIn},
    users::{account_name, entries_table, parse_money, parse_server},
};
use crate::domain::{OrderId, PaymentSystem};
use crate::service::count;
use crate::service::{
    AdminError,
    admin_audit::{self, AuditFilter},
    keyset::{Keyset, Listed},
    ledger::{self, Entry},
    orders::{
        self, CancelError, Cancellation, CompleteError, CreateError, Order, OrderFilter,
        OrderRequest,
    },
    projects, servers,
    users::{self, UserRef},
};

/// Orders a page lists at most, newest first.
const PAGE_SIZE: u64 = 100;
/// The list's filters, as the form and the query string name them.
const FILTERS: [&str; 6] = ["order_id", "project", "status", "user", "from", "to"];
/// The payment system the create form starts with.
const PANEL_PAYMENT_SYSTEM: &str = "cstm:panel";
/// Audit-log entries of an order shown at most.
const AUDIT_LIMIT: u64 = 100;

pub fn routes(route: Route) -> Route {
    route
        .at("/orders", get(list).post(create))
        .at("/orders.csv", get(export))
        .at("/orders/:project_id/:order_id", get(show))
        .at("/orders/:project_id/:order_id/cancel", post(cancel))
        .at("/orders/:project_id/:order_id/complete", post(complete))
}

/// Where an order's page is.
pub(super) fn order_path(project_id: i64, order_id: &str) -> String {
    format!("/orders/{project_id}/{order_id}")
}

/// An order's status as a badge: pending (warn), completed (ok), cancelled
/// (off).
pub(super) fn status_badge(status: OrderStatus) -> Markup {
    let kind = match status {
        OrderStatus::Pending => "warn",
        OrderStatus::Completed => "ok",
        OrderStatus::Cancelled => "off",
    };
    page::badge(&status.to_value(), kind)
}

/// An order status typed in a filter: `pending`, `completed` or
/// `cancelled`, as the entity spells them.
fn parse_status(text: &str) -> Result<OrderStatus, String> {
    OrderStatus::try_from_value(&text.to_owned())
        .map_err(|_| "choose pending, completed or cancelled".to_owned())
}

/// A positive id typed in a form or filter.
fn parse_id(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|&id| id > 0)
}

/// The list's filters as the service reads them; bad values get their
/// error next to their field.
fn parse_filter(params: &Params, errors: &mut FieldErrors) -> OrderFilter {
    let mut filter = OrderFilter::default();
    let order_id = params.get("order_id");
    if !order_id.is_empty() {
        match order_id.parse::<OrderId>() {
            Ok(order_id) => filter.order_id = Some(order_id),
            Err(err) => errors.add("order_id", err.to_string()),
        }
    }
    let project = params.get("project");
    if !project.is_empty() {
        filter.project_id = parse_id(project);
        if filter.project_id.is_none() {
            errors.add("project", "choose a project of the list");
        }
    }
    let status = params.get("status");
    if !status.is_empty() {
        match parse_status(status) {
            Ok(status) => filter.status = Some(status),
            Err(message) => errors.add("status", message),
        }
    }
    let user = params.get("user");
    if !user.is_empty() {
        filter.user_id = parse_id(user);
        if filter.user_id.is_none() {
            errors.add("user", "a user id is a positive number, such as 42");
        }
    }
    (filter.from, filter.until) =
        page::parse_day_range(params.get("from"), params.get("to"), errors);
    filter
}

/// The create form's values.
struct CreateForm<'a> {
    project: &'a str,
    user: &'a str,
    server: &'a str,
    amount: &'a str,
    payment_system: &'a str,
    errors: FieldErrors,
}

impl<'a> CreateForm<'a> {
    /// The form as a list page starts it: the project and user of the
    /// filters, when they name them.
    fn from_filters(params: &'a Params) -> CreateForm<'a> {
        let valid = |name| Some(params.get(name)).filter(|text| parse_id(text).is_some());
        CreateForm {
            project: valid("project").unwrap_or(""),
            user: valid("user").unwrap_or(""),
            server: "0",
            amount: "",
            payment_system: PANEL_PAYMENT_SYSTEM,
            errors: FieldErrors::default(),
        }
    }
}

/// What the list page shows.
struct ListView {
    projects: Vec<project::Model>,
    orders: Listed<Order>,
    total: u64,
    /// False when the filters had errors (nothing was searched).
    searched: bool,
}

fn project_select(
    name: &str,
    projects: &[project::Model],
    selected: &str,
    any: Option<&str>,
    errors: &FieldErrors,
) -> Markup {
    html! {
        select name=(name) required[any.is_none()] id=[errors.id(name)] aria-invalid=[errors.invalid(name)] aria-describedby=[errors.described_by(name)] {
            @if let Some(any) = any {
                option value="" { (any) }
            } @else {
                option value="" disabled selected[selected.is_empty()] { "Choose a project" }
            }
            @for p in projects {
                @let id = p.id.to_string();
                option value=(id) selected[selected == id] { (p.name) " (" (p.id) ")" }
            }
        }
    }
}

fn list_page(
    admin: &SignedIn,
    params: &Params,
    filter_errors: &FieldErrors,
    view: &ListView,
    form: &CreateForm,
) -> Markup {
    let project_name = |id: i64| {
        view.projects
            .iter()
            .find(|p| p.id == id)
            .map_or_else(|| id.to_string(), |p| p.name.clone())
    };
    let status = params.get("status");
    let errors = &form.errors;
    page::frame(
        admin,
        "Orders",
        html! {
            section {
                form.filters method="get" action="/orders" {
                    (page::text_field("Order id", "order_id", params.get("order_id"), filter_errors, FieldAttrs { placeholder: Some("Order:…"), ..FieldAttrs::OPTIONAL }))
                    label.field {
                        span { "Project" }
                        (project_select("project", &view.projects, params.get("project"), Some("All projects"), filter_errors))
                        (filter_errors.show("project"))
                    }
                    label.field {
                        span { "Status" }
                        select name="status" id=[filter_errors.id("status")] aria-invalid=[filter_errors.invalid("status")] aria-describedby=[filter_errors.described_by("status")] {
                            option value="" { "Any status" }
                            @for s in [OrderStatus::Pending, OrderStatus::Completed, OrderStatus::Cancelled] {
                                @let value = s.to_value();
                                option value=(value) selected[status == value] { (value) }
                            }
                        }
                        (filter_errors.show("status"))
                    }
                    (page::text_field("User id", "user", params.get("user"), filter_errors, FieldAttrs::OPTIONAL))
                    (page::text_field("From (UTC day)", "from", params.get("from"), filter_errors, FieldAttrs::DATE))
                    (page::text_field("To (UTC day, included)", "to", params.get("to"), filter_errors, FieldAttrs::DATE))
                    button type="submit" { "Filter" }
                    a.button.secondary href="/orders" { "Clear" }
                }
            }
            @if view.searched {
                div.actions {
                    a.button.secondary href={ "/orders.csv" (params.query(&FILTERS)) } download {
                        "Export CSV"
                    }
                }
                p {
                    (count(view.total, "order matches", "orders match")) "."
                    @if view.total > PAGE_SIZE {
                        " Newest first, " (PAGE_SIZE) " a page."
                    }
                }
            } @else {
                p.warning { "Correct the filters marked above; no order was searched." }
            }
            div.table-wrap { table {
                thead { tr {
                    th { "Order" } th { "Project" } th.num { "User" } th { "Account" }
                    th.num { "Amount" } th { "Status" } th { "Created" }
                } }
                tbody {
                    @for o in &view.orders.rows {
                        tr {
                            td { a href=(order_path(o.project_id, &o.order_id)) { (o.order_id) } }
                            td { a href={ "/projects/" (o.project_id) "/users" } { (project_name(o.project_id)) } }
                            td.num { a href={ "/users/" (o.user_id) } { (o.user_id) } }
                            td { @if o.server_id == GENERAL_ACCOUNT { "general" } @else { "server " (o.server_id) } }
                            td.num { (o.amount) }
                            td { (status_badge(o.status)) }
                            td { (page::when(&o.created_at)) }
                        }
                    }
                    @if view.orders.rows.is_empty() { tr { td colspan="7" .muted { "No order matches." } } }
                }
            } }
            (page::paging("/orders", params, &FILTERS, view.orders.older))
            section #new-order {
                h2 { "New order" }
                p.muted { "Creates a pending order, as the API's order creation does; completing it credits the amount to the main balance of the account chosen." }
                form method="post" action="/orders" {
                    (page::csrf(admin))
                    (errors.show("order"))
                    label.field {
                        span { "Project" }
                        (project_select("project", &view.projects, form.project, None, errors))
                        (errors.show("project"))
                    }
                    (page::text_field("User (id or e-mail)", "user", form.user, errors, FieldAttrs::TEXT))
                    (page::text_field("Server id (0 = the general account)", "server", form.server, errors, FieldAttrs::TEXT))
                    (page::text_field("Amount", "amount", form.amount, errors, FieldAttrs { placeholder: Some("10.50"), ..FieldAttrs::TEXT }))
                    (page::text_field("Payment system", "payment_system", form.payment_system, errors, FieldAttrs::TEXT))
                    button type="submit" { "Create order" }
                }
            }
        },
    )
}

async fn list_view(
    state: &PanelState,
    filter: Option<&OrderFilter>,
    page: Keyset,
) -> Result<ListView, PanelError> {
    let projects = projects::list(&state.db).await?;
    let (orders, total) = match filter {
        Some(filter) => (
            orders::list(&state.db, filter, page).await?,
            orders::count(&state.db, filter).await?,
        ),
        None => (Listed::default(), 0),
    };
    Ok(ListView {
        projects,
        orders,
        total,
        searched: filter.is_some(),
    })
}

#[handler]
async fn list(
    admin: SignedIn,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let page = params.page(PAGE_SIZE)?;
    let mut errors = FieldErrors::default();
    let filter = parse_filter(&params, &mut errors);
    let valid = errors.is_empty();
    let view = list_view(&state, valid.then_some(&filter), page).await?;
    let markup = list_page(
        &admin,
        &params,
        &errors,
        &view,
        &CreateForm::from_filters(&params),
    );
    Ok(if valid {
        page::ok(markup)
    } else {
        page::invalid(markup)
    })
}

/// The columns of the export, one row per order; amounts in exact decimal.
const CSV_HEADER: &[&str] = &[
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
    "cancelled_at",
];

fn csv_row(order: Order) -> Vec<String> {
    let at = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            .unwrap_or_default()
    };
    vec![
        order.order_id.to_string(),
        order.project_id.to_string(),
        order.user_id.to_string(),
        order.server_id.to_string(),
        order.amount.to_string(),
        order.status.to_value(),
        order.payment_system.to_string(),
        order.payment_id.unwrap_or_default(),
        at(Some(order.created_at)),
        at(order.completed_at),
        at(order.cancelled_at),
    ]
}

/// The orders the filters keep, every page of them, as CSV.
#[handler]
async fn export(
    _admin: SignedIn,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let mut errors = FieldErrors::default();
    let filter = parse_filter(&params, &mut errors);
    if !errors.is_empty() {
        return Ok(csv_export::refused(&errors, &FILTERS));
    }
    let db = state.db.clone();
    Ok(csv_export::attachment(
        "masterpay-orders.csv",
        CSV_HEADER,
        move |page| {
            let (db, filter) = (db.clone(), filter.clone());
            async move {
                let orders = orders::list(&db, &filter, page).await?;
                orders.try_map(|order| Ok::<_, crate::store::StoreError>(csv_row(order)))
            }
        },
    ))
}

#[handler]
async fn create(
    admin: SignedIn,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let mut sent = CreateForm {
        project: form.get("project"),
        user: form.get("user"),
        server: form.get("server"),
        amount: form.get("amount"),
        payment_system: form.get("payment_system"),
        errors: FieldErrors::default(),
    };
    let errors = &mut sent.errors;
    let project_id = match parse_id(sent.project) {
        Some(id) => match projects::get(&state.db, id).await {
            Ok(project) => Some(project.id),
            Err(AdminError::NotFound(..)) => {
                errors.add("project", "this project does not exist");
                None
            }
            Err(err) => return Err(err.into()),
        },
        None => {
            errors.add("project", "choose a project");
            None
        }
    };
    let who = if sent.user.is_empty() {
        errors.add("user", "give the user's id or e-mail");
        None
    } else {
        sent.user
            .parse::<UserRef>()
            .map_err(|err| errors.add("user", err.to_string()))
            .ok()
    };
    let server_id = parse_server(sent.server);
    if server_id.is_none() {
        errors.add(
            "server",
            "a server id is a number: 0 for the general account",
        );
    }
    let amount = match parse_money(sent.amount) {
        Ok(Some(amount)) => Some(amount),
        Ok(None) => {
            errors.add("amount", "give an amount, such as 10 or 10.50");
            None
        }
        Err(message) => {
            errors.add("amount", message);
            None
        }
    };
    let payment_system = sent
        .payment_system
        .parse::<PaymentSystem>()
        .map_err(|err| errors.add("payment_system", err.to_string()))
        .ok();
    if let (Some(project_id), Some(who), Some(server_id), Some(amount), Some(payment_system)) =
        (project_id, who, server_id, amount, payment_system)
    {
        let request = OrderRequest {
            project_id,
            who,
            server_id,
            amount,
            payment_system,
            order_id: None,
        };
        match orders::create_as(&state.db, &*state.store, &admin.actor(), &request).await {
            Ok(order) => {
                let to = order_path(order.project_id, &order.order_id);
                return Ok(page::done(
                    &admin,
                    &to,
                    &format!("Order {} created.", order.order_id),
                ));
            }
            Err(CreateError::UserNotFound) => {
                errors.add("user", "no such user in this project");
            }
            Err(CreateError::ServerNotFound) => {
                errors.add(
                    "server",
                    "no such server in this project (0 is the general account)",
                );
            }
            Err(CreateError::Invalid(field, message)) => {
                // The form names the server `server`; an order id is never typed.
                let field = match field {
                    "server_id" => "server",
                    "amount" => "amount",
                    _ => "order",
                };
                errors.add(field, message)
            }
            Err(err @ (CreateError::KeyReused | CreateError::OrderIdTaken(_))) => {
                errors.add("order", err.to_string());
            }
            Err(CreateError::Store(err)) => return Err(err.into()),
        }
    }
    let view = list_view(
        &state,
        Some(&OrderFilter::default()),
        Keyset::first(PAGE_SIZE),
    )
    .await?;
    Ok(page::invalid(list_page(
        &admin,
        &Params::default(),
        &FieldErrors::default(),
        &view,
        &sent,
    )))
}

/// What an order's page shows.
struct OrderView {
    order: Order,
    project: project::Model,
    user: Option<user::Model>,
    servers: Vec<server::Model>,
    audit: Vec<admin_audit_entry::Model>,
    log: Vec<Entry>,
}

async fn order_view(
    state: &PanelState,
    project_id: i64,
    order_id: &str,
) -> Result<OrderView, PanelError> {
    let db = &state.db;
    let not_found = || PanelError::NotFound(format!("order {order_id} of project {project_id}"));
    let order = orders::get(db, Some(project_id), order_id)
        .await
        .map_err(PanelError::from)?
        .ok_or_else(not_found)?;
    let project = projects::get(db, project_id).await?;
    let user = match users::get(db, order.user_id).await {
        Ok(user) => Some(user),
        Err(AdminError::NotFound(..)) => None,
        Err(err) => return Err(err.into()),
    };
    let servers = servers::list(db, project_id).await?;
    let audit_filter = AuditFilter {
        object_kind: Some("order".to_owned()),
        object_id: Some(order.order_id.to_string()),
        ..AuditFilter::default()
    };
    let audit = admin_audit::list(db, &audit_filter, AUDIT_LIMIT).await?;
    let log = ledger::of_order(db, project_id, &order.order_id)
        .await
        .map_err(PanelError::from)?;
    Ok(OrderView {
        order,
        project,
        user,
        servers,
        audit,
        log,
    })
}

fn order_page(admin: &SignedIn, view: &OrderView, notice: Option<&str>) -> Markup {
    let o = &view.order;
    let p = &view.project;
    let path = order_path(o.project_id, &o.order_id);
    page::frame(
        admin,
        &format!("Order {}", o.order_id),
        html! {
            @if let Some(notice) = notice {
                p.warning role="alert" { (notice) }
            }
            section {
                div.table-wrap { table {
                    tbody {
                        tr { th { "Status" } td { (status_badge(o.status)) } }
                        tr { th { "Amount" } td { (o.amount) } }
                        tr { th { "Project" } td { a href={ "/projects/" (p.id) } { (p.name) " (" (p.id) ")" } } }
                        tr { th { "User" } td {
                            a href={ "/users/" (o.user_id) } {
                                (o.user_id)
                                @if let Some(u) = &view.user { " · " (u.email) }
                            }
                        } }
                        tr { th { "Account credited" } td { (account_name(o.server_id, &view.servers)) } }
                        tr { th { "Payment system" } td { (o.payment_system) } }
                        tr { th { "Payment id" } td { @if let Some(id) = &o.payment_id { (id) } @else { span.muted { "none" } } } }
                        tr { th { "Created" } td { (page::when(&o.created_at)) } }
                        tr { th { "Completed" } td { (page::when_or(o.completed_at.as_ref(), "—")) } }
                        tr { th { "Cancelled" } td { (page::when_or(o.cancelled_at.as_ref(), "—")) } }
                        @if let (Some(at), Some(why)) = (&o.refused_at, &o.refusal) {
                            tr.refused { th { "Completion refused" } td { (page::when(at)) ": " (why) } }
                        }
                    }
                } }
                div.actions {
                    @if o.status == OrderStatus::Pending {
                        form method="post" action={ (path) "/complete" } data-confirm={ "Complete order " (o.order_id) "? Its " (o.amount) " is credited to the user's main balance." } {
                            (page::csrf(admin))
                            button type="submit" { "Complete order" }
                        }
                        form method="post" action={ (path) "/cancel" } data-confirm={ "Cancel order " (o.order_id) "? It will never be credited." } {
                            (page::csrf(admin))
                            button.danger type="submit" { "Cancel order" }
                        }
                    }
                    a.button.secondary href={ "/orders?project=" (p.id) "&user=" (o.user_id) } { "Orders of this user" }
                }
                @if o.status == OrderStatus::Pending {
                    p.muted { "A cancelled order is final: it is never credited, and a completion request for it is answered 409 ORDER_ALREADY_CANCELLED. A completed order cannot be cancelled." }
                }
            }
            section {
                h2 { "Operation log" }
                p.muted { "The credit of the order, once completed." }
                (entries_table(&view.log, p.id, &view.servers))
            }
            section {
                h2 { "Admin audit log" }
                p.muted { "Changes made through the panel or the command line; creations, completions and cancellations through the API are in the order's times above." }
                (audit_log::entries_table(&view.audit, Listing::OneObject, "No change made through the panel or the command line."))
            }
        },
    )
}

#[handler]
async fn show(
    admin: SignedIn,
    Path((project_id, order_id)): Path<(i64, String)>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let view = order_view(&state, project_id, &order_id).await?;
    Ok(page::ok(order_page(&admin, &view, None)))
}

#[handler]
async fn cancel(
    admin: SignedIn,
    Path((project_id, order_id)): Path<(i64, String)>,
    _form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let found = order_view(&state, project_id, &order_id).await?.order;
    let request = Cancellation {
        project_id,
        order_id: found.order_id,
        payment_system: found.payment_system,
    };
    let notice = match orders::cancel(&state.db, Some(&admin.actor()), &request).await {
        Ok(o) => {
            return Ok(page::done(
                &admin,
                &order_path(project_id, &o.order_id),
                &format!("Order {} cancelled.", o.order_id),
            ));
        }
        Err(CancelError::AlreadyCompleted) => "The order is already completed: nothing changed.",
        Err(CancelError::AlreadyCancelled) => "The order is already cancelled: nothing changed.",
        Err(CancelError::OrderNotFound) => {
            return Err(PanelError::NotFound(format!(
                "order {order_id} of project {project_id}"
            )));
        }
        Err(CancelError::Store(err)) => return Err(err.into()),
    };
    let view = order_view(&state, project_id, &request.order_id).await?;
    Ok(page::render(
        StatusCode::CONFLICT,
        order_page(&admin, &view, Some(notice)),
    ))
}

/// Completes the order as the API would, for the signed-in administrator.
#[handler]
async fn complete(
    admin: SignedIn,
    Path((project_id, order_id)): Path<(i64, String)>,
    _form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let completed = orders::complete_as(
        &state.db,
        &*state.store,
        &admin.actor(),
        project_id,
        &order_id,
    )
    .await;
    let refusal;
    let notice = match completed {
        Ok(o) => {
            return Ok(page::done(
                &admin,
                &order_path(project_id, &o.order_id),
                &format!("Order {} completed.", o.order_id),
            ));
        }
        Err(CompleteError::AlreadyCompleted) => "The order is already completed: nothing changed.",
        Err(CompleteError::Cancelled) => "The order is cancelled: it is never credited.",
        Err(CompleteError::BalanceCeiling) => {
            refusal = format!("Not completed: {}.", orders::BALANCE_CEILING_REFUSAL);
            &refusal
        }
        Err(CompleteError::OrderNotFound) => {
            return Err(PanelError::NotFound(format!(
                "order {order_id} of project {project_id}"
            )));
        }
        Err(
            CompleteError::UpdateFailed(err)
            | CompleteError::ProcessingFailed(err)
            | CompleteError::Unavailable(err),
        ) => return Err(err.into()),
    };
    let view = order_view(&state, project_id, &order_id).await?;
    Ok(page::render(
        StatusCode::CONFLICT,
        order_page(&admin, &view, Some(notice)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_typed_in_filters() {
        assert_eq!(parse_status("pending"), Ok(OrderStatus::Pending));
        assert_eq!(parse_status("completed"), Ok(OrderStatus::Completed));
        assert_eq!(parse_status("cancelled"), Ok(OrderStatus::Cancelled));
        assert!(parse_status("Pending").is_err());
        assert!(parse_status("done").is_err());
    }
}
