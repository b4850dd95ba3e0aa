//! Orders: find one by its id, filter the list, create one, and an order's
//! page with its history and, while it is pending, buttons to complete it
//! (a refused completion, once the balance allows) or cancel it, with the
//! API's rules: a completed or cancelled order stays as it is.

use entity::{admin_audit_entry, payment_order::OrderStatus, project, server, user};
use poem::http::StatusCode;
use sea_orm::ActiveEnum;

use super::{
    components::{account_name, order_path, status_badge},
    csv_export,
    form::{parse_day_range, parse_id, parse_money, parse_server},
    prelude::*,
};
use crate::domain::{OrderId, PaymentSystem};
use crate::service::{
    AdminError, count,
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
/// The payment system the create form starts with.
const PANEL_PAYMENT_SYSTEM: &str = "cstm:panel";

pub fn routes(route: Route) -> Route {
    route
        .at("/orders", get(list).post(create))
        .at("/orders.csv", get(export))
        .at("/orders/:project_id/:order_id", get(show))
        .at("/orders/:project_id/:order_id/cancel", post(cancel))
        .at("/orders/:project_id/:order_id/complete", post(complete))
}

/// An order status typed in a filter: `pending`, `completed` or
/// `cancelled`, as the entity spells them.
fn parse_status(text: &str) -> Result<OrderStatus, String> {
    OrderStatus::try_from_value(&text.to_owned())
        .map_err(|_| "choose pending, completed or cancelled".to_owned())
}

/// The list's filters, as the form and the query string name them.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Filters {
    order_id: String,
    project: String,
    status: String,
    user: String,
    from: String,
    to: String,
}

impl Filters {
    /// The list's filters as the service reads them, or what is wrong with
    /// them.
    fn read(&self) -> Result<OrderFilter, FieldErrors> {
        let mut errors = FieldErrors::default();
        let order_id = errors.check("order_id", &self.order_id, |text| {
            text.parse::<OrderId>().map_err(|err| err.to_string())
        });
        let project_id = errors.check("project", &self.project, |text| {
            parse_id(text).ok_or_else(|| "choose a project of the list".to_owned())
        });
        let status = errors.check("status", &self.status, parse_status);
        let user_id = errors.check("user", &self.user, |text| {
            parse_id(text).ok_or_else(|| "a user id is a positive number, such as 42".to_owned())
        });
        let (from, until) = parse_day_range((&self.from, &self.to), &mut errors);
        errors.or(OrderFilter {
            project_id,
            order_id,
            user_id,
            status,
            from,
            until,
        })
    }
}

/// The create form, as sent and as shown.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OrderForm {
    project: String,
    user: String,
    server: String,
    amount: String,
    payment_system: String,
}

impl OrderForm {
    /// The form as a list page starts it: the project and user of the
    /// filters, when they name them.
    fn from_filters(f: &Filters) -> OrderForm {
        let valid = |text: &String| Some(text).filter(|text| parse_id(text).is_some()).cloned();
        OrderForm {
            project: valid(&f.project).unwrap_or_default(),
            user: valid(&f.user).unwrap_or_default(),
            server: "0".to_owned(),
            amount: String::new(),
            payment_system: PANEL_PAYMENT_SYSTEM.to_owned(),
        }
    }

    /// The order the form asks for, of one of `projects`, or what is wrong
    /// with it.
    fn read(&self, projects: &[project::Model]) -> Result<OrderRequest, FieldErrors> {
        let mut errors = FieldErrors::default();
        let project_id = match parse_id(&self.project) {
            Some(id) if projects.iter().any(|p| p.id == id) => Ok(id),
            Some(_) => Err("this project does not exist".to_owned()),
            None => Err("choose a project".to_owned()),
        };
        let project_id = errors.field("project", project_id);
        let who = match self.user.as_str() {
            "" => Err("give the user's id or e-mail".to_owned()),
            text => text.parse::<UserRef>().map_err(|err| err.to_string()),
        };
        let who = errors.field("user", who);
        let server_id = parse_server(&self.server)
            .ok_or_else(|| "a server id is a number: 0 for the general account".to_owned());
        let server_id = errors.field("server", server_id);
        let amount = match parse_money(&self.amount) {
            Ok(Some(amount)) => Ok(amount),
            Ok(None) => Err("give an amount, such as 10 or 10.50".to_owned()),
            Err(message) => Err(message),
        };
        let amount = errors.field("amount", amount);
        let payment_system = self.payment_system.parse::<PaymentSystem>();
        let payment_system =
            errors.field("payment_system", payment_system.map_err(|e| e.to_string()));
        errors.or_with(|| {
            Some(OrderRequest {
                project_id: project_id?,
                who: who?,
                server_id: server_id?,
                amount: amount?,
                payment_system: payment_system?,
                order_id: None,
            })
        })
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

fn list_page(
    admin: &SignedIn,
    (query, filter_errors): (&PageQuery<Filters>, &FieldErrors),
    view: &ListView,
    (form, errors): (&OrderForm, &FieldErrors),
) -> Markup {
    let statuses = [
        OrderStatus::Pending,
        OrderStatus::Completed,
        OrderStatus::Cancelled,
    ]
    .map(|s| (s.to_value(), s.to_value()));
    let f = &query.filters;
    page::frame(
        admin,
        "Orders",
        html! {
            section {
                (c::filter_bar("/orders", Some((&f.from, &f.to)), filter_errors, html! {
                    (c::text_field("Order id", "order_id", &f.order_id, filter_errors, FieldAttrs::OPTIONAL.placeholder("Order:…")))
                    (c::project_field(&view.projects, &f.project, Blank::Any("All projects"), filter_errors))
                    (c::select_field(("Status", "status"), filter_errors, Blank::Any("Any status"), statuses, &f.status))
                    (c::text_field("User id", "user", &f.user, filter_errors, FieldAttrs::OPTIONAL))
                }))
            }
            @if view.searched {
                (c::export_link("/orders.csv", query))
                p {
                    (count(view.total, "order matches", "orders match")) "."
                    @if view.total > PAGE_SIZE {
                        " Newest first, " (PAGE_SIZE) " a page."
                    }
                }
            } @else {
                p.warning { "Correct the filters marked above; no order was searched." }
            }
            (c::list(&view.orders.rows, &[
                Column("Order", "", &|o| html! { a href=(order_path(o.project_id, &o.order_id)) { (o.order_id) } }),
                Column("Project", "", &|o| html! {
                    a href={ "/projects/" (o.project_id) "/users" } { (c::project_name(&view.projects, o.project_id)) }
                }),
                Column("User", "num", &|o| html! { a href={ "/users/" (o.user_id) } { (o.user_id) } }),
                Column("Account", "", &|o| html! { @if o.server_id == 0 { "general" } @else { "server " (o.server_id) } }),
                Column("Amount", "num", &|o| html! { (o.amount) }),
                Column("Status", "", &|o| status_badge(o.status)),
                Column("Created", "", &|o| html! { (c::when(&o.created_at)) }),
            ], "No order matches."))
            (c::paging("/orders", query, view.orders.older))
            section #new-order {
                h2 { "New order" }
                p.muted { "Creates a pending order, as the API's order creation does; completing it credits the amount to the main balance of the account chosen." }
                (c::post_form(admin, "/orders", None, html! {
                    (errors.show("order"))
                    (c::project_field(&view.projects, &form.project, Blank::Choose("Choose a project"), errors))
                    (c::text_field("User (id or e-mail)", "user", &form.user, errors, FieldAttrs::TEXT))
                    (c::text_field("Server id (0 = the general account)", "server", &form.server, errors, FieldAttrs::TEXT))
                    (c::text_field("Amount", "amount", &form.amount, errors, FieldAttrs::TEXT.placeholder("10.50")))
                    (c::text_field("Payment system", "payment_system", &form.payment_system, errors, FieldAttrs::TEXT))
                    button type="submit" { "Create order" }
                }))
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
async fn list(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    let page = query.page(PAGE_SIZE)?;
    let filter = query.filters.read();
    let view = list_view(&admin.state, filter.as_ref().ok(), page).await?;
    let filters = (&query, FieldErrors::of_read(&filter));
    let form = OrderForm::from_filters(&query.filters);
    let markup = list_page(&admin, filters, &view, (&form, &FieldErrors::default()));
    Ok(page::ok_unless(filter.is_err(), markup))
}

/// The columns of the export, one row per order; amounts in exact decimal.
const CSV_COLUMNS: csv_export::Columns<Order> = &[
    ("order_id", |o| o.order_id.to_string()),
    ("project_id", |o| o.project_id.to_string()),
    ("user_id", |o| o.user_id.to_string()),
    ("server_id", |o| o.server_id.to_string()),
    ("amount", |o| o.amount.to_string()),
    ("status", |o| o.status.to_value()),
    ("payment_system", |o| o.payment_system.to_string()),
    ("payment_id", |o| o.payment_id.clone().unwrap_or_default()),
    ("created_at", |o| csv_export::moment(o.created_at)),
    ("completed_at", |o| csv_export::moment(o.completed_at)),
    ("cancelled_at", |o| csv_export::moment(o.cancelled_at)),
];

/// The orders the filters keep, every page of them, as CSV.
#[handler]
async fn export(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    Ok(csv_export::attachment(
        ("masterpay-orders.csv", CSV_COLUMNS),
        (&admin.state.db, query.filters.read()),
        |db, filter, page| async move { orders::list(&db, &filter, page).await },
    ))
}

#[handler]
async fn create(admin: SignedIn, PostForm(form): PostForm<OrderForm>) -> Answer {
    let errors = match form.read(&projects::list(&admin.state.db).await?) {
        Err(errors) => errors,
        Ok(request) => {
            match orders::create_as(
                &admin.state.db,
                &*admin.state.store,
                &admin.actor(),
                &request,
            )
            .await
            {
                Ok(order) => {
                    let to = order_path(order.project_id, &order.order_id);
                    let message = format!("Order {} created.", order.order_id);
                    return admin.done(&to, &message);
                }
                Err(CreateError::UserNotFound) => {
                    FieldErrors::one("user", "no such user in this project")
                }
                Err(CreateError::ServerNotFound) => FieldErrors::one(
                    "server",
                    "no such server in this project (0 is the general account)",
                ),
                Err(CreateError::Invalid(field, message)) => {
                    // The form names the server `server`; an order id is never typed.
                    let field = match field {
                        "server_id" => "server",
                        "amount" => "amount",
                        _ => "order",
                    };
                    FieldErrors::one(field, message)
                }
                Err(err @ (CreateError::KeyReused | CreateError::OrderIdTaken(_))) => {
                    FieldErrors::one("order", err.to_string())
                }
                Err(CreateError::Store(err)) => return Err(err.into()),
            }
        }
    };
    let view = list_view(
        &admin.state,
        Some(&OrderFilter::default()),
        Keyset::first(PAGE_SIZE),
    )
    .await?;
    let filters = (&PageQuery::default(), &FieldErrors::default());
    Ok(page::invalid(list_page(
        &admin,
        filters,
        &view,
        (&form, &errors),
    )))
}

fn not_found(project_id: i64, order_id: &str) -> PanelError {
    PanelError::NotFound(format!("order {order_id} of project {project_id}"))
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
    let order = orders::get(db, Some(project_id), order_id)
        .await
        .map_err(PanelError::from)?
        .ok_or_else(|| not_found(project_id, order_id))?;
    let project = projects::get(db, project_id).await?;
    let user = match users::get(db, order.user_id).await {
        Ok(user) => Some(user),
        Err(AdminError::NotFound(..)) => None,
        Err(err) => return Err(err.into()),
    };
    let servers = servers::list(db, project_id).await?;
    let audit = c::history(db, "order", order.order_id.to_string()).await?;
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
    let refused = (o.refused_at.as_ref().zip(o.refusal.as_ref()))
        .map(|(at, why)| ("Completion refused", html! { (c::when(at)) ": " (why) }));
    page::frame(
        admin,
        &format!("Order {}", o.order_id),
        html! {
            @if let Some(notice) = notice {
                p.warning role="alert" { (notice) }
            }
            section {
                (c::details([
                    ("Status", status_badge(o.status)),
                    ("Amount", html! { (o.amount) }),
                    ("Project", html! { a href={ "/projects/" (p.id) } { (p.name) " (" (p.id) ")" } }),
                    ("User", html! {
                        a href={ "/users/" (o.user_id) } {
                            (o.user_id)
                            @if let Some(u) = &view.user { " · " (u.email) }
                        }
                    }),
                    ("Account credited", html! { (account_name(o.server_id, &view.servers)) }),
                    ("Payment system", html! { (o.payment_system) }),
                    ("Payment id", c::or_none(o.payment_id.as_deref(), "none")),
                    ("Created", html! { (c::when(&o.created_at)) }),
                    ("Completed", html! { (c::when_or(o.completed_at.as_ref(), "—")) }),
                    ("Cancelled", html! { (c::when_or(o.cancelled_at.as_ref(), "—")) }),
                ].into_iter().chain(refused)))
                div.actions {
                    @if o.status == OrderStatus::Pending {
                        @let completing = format!(
                            "Complete order {}? Its {} is credited to the user's main balance.",
                            o.order_id, o.amount
                        );
                        (c::post_form(admin, &format!("{path}/complete"), Some(&completing), html! {
                            button type="submit" { "Complete order" }
                        }))
                        @let cancelling = format!("Cancel order {}? It will never be credited.", o.order_id);
                        (c::post_form(admin, &format!("{path}/cancel"), Some(&cancelling), html! {
                            button.danger type="submit" { "Cancel order" }
                        }))
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
                (c::operations_table(&view.log, p.id, &view.servers))
            }
            section {
                h2 { "Admin audit log" }
                p.muted { "Changes made through the panel or the command line; creations, completions and cancellations through the API are in the order's times above." }
                (c::audit_table(&view.audit, Listing::OneObject, "No change made through the panel or the command line."))
            }
        },
    )
}

#[handler]
async fn show(admin: SignedIn, Path((project_id, order_id)): Path<(i64, String)>) -> Answer {
    let view = order_view(&admin.state, project_id, &order_id).await?;
    Ok(page::ok(order_page(&admin, &view, None)))
}

/// The answer to a completion or cancellation: on to the order's page
/// saying it was `done`, or the order's page with why it was refused (409).
async fn changed(
    admin: &SignedIn,
    (project_id, order_id): (i64, &str),
    outcome: Result<&str, String>,
) -> Answer {
    match outcome {
        Ok(done) => admin.done(
            &order_path(project_id, order_id),
            &format!("Order {order_id} {done}."),
        ),
        Err(notice) => {
            let view = order_view(&admin.state, project_id, order_id).await?;
            let markup = order_page(admin, &view, Some(&notice));
            Ok(page::render(StatusCode::CONFLICT, markup))
        }
    }
}

#[handler]
async fn cancel(
    admin: SignedIn,
    Path((project_id, order_id)): Path<(i64, String)>,
    _form: PostForm,
) -> Answer {
    let found = order_view(&admin.state, project_id, &order_id).await?.order;
    let request = Cancellation {
        project_id,
        order_id: found.order_id,
        payment_system: found.payment_system,
    };
    let nothing = |text: &str| Err(format!("The order is already {text}: nothing changed."));
    let outcome = match orders::cancel(&admin.state.db, Some(&admin.actor()), &request).await {
        Ok(_) => Ok("cancelled"),
        Err(CancelError::AlreadyCompleted) => nothing("completed"),
        Err(CancelError::AlreadyCancelled) => nothing("cancelled"),
        Err(CancelError::OrderNotFound) => return Err(not_found(project_id, &order_id)),
        Err(CancelError::Store(err)) => return Err(err.into()),
    };
    changed(&admin, (project_id, &order_id), outcome).await
}

/// Completes the order as the API would, for the signed-in administrator.
#[handler]
async fn complete(
    admin: SignedIn,
    Path((project_id, order_id)): Path<(i64, String)>,
    _form: PostForm,
) -> Answer {
    let state = &admin.state;
    let completed = orders::complete_as(
        &state.db,
        &*state.store,
        &admin.actor(),
        project_id,
        &order_id,
    )
    .await;
    let outcome = match completed {
        Ok(_) => Ok("completed"),
        Err(CompleteError::AlreadyCompleted) => {
            Err("The order is already completed: nothing changed.".to_owned())
        }
        Err(CompleteError::Cancelled) => {
            Err("The order is cancelled: it is never credited.".to_owned())
        }
        Err(CompleteError::BalanceCeiling) => Err(format!(
            "Not completed: {}.",
            orders::BALANCE_CEILING_REFUSAL
        )),
        Err(CompleteError::OrderNotFound) => return Err(not_found(project_id, &order_id)),
        Err(
            CompleteError::UpdateFailed(err)
            | CompleteError::ProcessingFailed(err)
            | CompleteError::Unavailable(err),
        ) => return Err(err.into()),
    };
    changed(&admin, (project_id, &order_id), outcome).await
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
