//! The outgoing events of a project: a list filtered by type, delivery
//! state and order, paged newest first, and an event's page with the exact
//! body sent, each delivery and each of its attempts (when, how long, what
//! answered), as the relay recorded them.

use entity::{
    project,
    webhook_delivery::{DeliveryStatus, Model as Delivery},
    webhook_event,
};
use sea_orm::{ActiveEnum, Iterable};

use super::prelude::*;
use crate::{
    domain::OrderId,
    events::{self, EventType},
    service::{
        projects,
        webhook_events::{self, DeliveryDetail, EventFilter},
    },
};

pub fn routes(route: Route) -> Route {
    route
        .at("/projects/:id/events", get(list))
        .at("/events/:id", get(show))
}

/// Events a page lists at most, newest first.
const PAGE_SIZE: u64 = 100;

/// The list's filters, as the form and the query string name them.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Filters {
    r#type: String,
    status: String,
    order_id: String,
}

impl Filters {
    /// The filter the query string asks for, or what is wrong with it.
    fn read(&self) -> Result<EventFilter, FieldErrors> {
        let mut errors = FieldErrors::default();
        let event_type = errors.check("type", &self.r#type, |text| {
            EventType::try_from_value(&text.to_owned()).map_err(|_| "no such event type".to_owned())
        });
        let status = errors.check("status", &self.status, |text| {
            DeliveryStatus::try_from_value(&text.to_owned())
                .map_err(|_| "no such delivery state".to_owned())
        });
        let order_id = errors.check("order_id", &self.order_id, |text| {
            text.parse::<OrderId>()
                .map(|id| id.to_string())
                .map_err(|err| err.to_string())
        });
        errors.or(EventFilter {
            event_type,
            status,
            order_id,
        })
    }
}

fn status_badge(status: DeliveryStatus) -> Markup {
    let kind = match status {
        DeliveryStatus::Pending => "warn",
        DeliveryStatus::Succeeded => "",
        DeliveryStatus::Failed => "off",
    };
    c::badge(&status.to_value(), kind)
}

/// The order an event is about, linked to its page.
fn order_link(project_id: i64, e: &webhook_event::Model) -> Markup {
    html! { @if let Some(order) = &e.order_id { a href=(c::order_path(project_id, order)) { (order) } } }
}

fn list_page(
    admin: &SignedIn,
    (query, errors): (&PageQuery<Filters>, &FieldErrors),
    p: &project::Model,
    all: &Listed<webhook_event::Model>,
) -> Markup {
    let (path, f) = (format!("/projects/{}/events", p.id), &query.filters);
    let types = EventType::iter().map(|t| (events::type_name(t), events::type_name(t)));
    let states = DeliveryStatus::iter().map(|s| (s.to_value(), s.to_value()));
    page::frame(
        admin,
        &format!("Events of {}", p.name),
        html! {
            p {
                a href={ "/projects/" (p.id) } { "Project " (p.name) } " · "
                a href={ "/projects/" (p.id) "/webhooks" } { "Its webhook endpoints" }
            }
            (c::filter_bar(&path, None, errors, html! {
                (c::select_field(("Type", "type"), errors, Blank::Any("any type"), types, &f.r#type))
                (c::select_field(("A delivery", "status"), errors, Blank::Any("in any state"), states, &f.status))
                (c::text_field("Order id", "order_id", &f.order_id, errors, FieldAttrs::OPTIONAL))
            }))
            (c::list(&all.rows, &[
                Column("Id", "num", &|e| html! { a href={ "/events/" (e.id) } { (e.id) } }),
                Column("Type", "", &|e| html! { a href={ "/events/" (e.id) } { (events::type_name(e.event_type)) } }),
                Column("Order", "", &|e| order_link(p.id, e)),
                Column("webhook-id", "", &|e| html! { code { (e.webhook_id) } }),
                Column("Recorded", "", &|e| html! { (c::when(&e.created_at)) }),
            ], "No event matches."))
            (c::paging(&path, query, all.older))
            p.muted { "Events are recorded only while an enabled endpoint of the project receives their type." }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, Path(id): Path<i64>, query: PageQuery<Filters>) -> Answer {
    let db = &admin.state.db;
    let p = projects::get(db, id).await?;
    let filter = query.filters.read();
    let all = query.rows(PAGE_SIZE, &filter, |f, page| {
        webhook_events::page(db, id, f, page)
    });
    let all = all.await?;
    let markup = list_page(&admin, (&query, FieldErrors::of_read(&filter)), &p, &all);
    Ok(page::ok_unless(filter.is_err(), markup))
}

fn delivery_section(d: &DeliveryDetail) -> Markup {
    let delivery: &Delivery = &d.delivery;
    let endpoint =
        (d.endpoint.as_ref()).map(|e| html! { a href={ "/webhooks/" (e.id) } { (e.url) } });
    html! {
        section {
            h2 { "Delivery " (delivery.id) " · " (status_badge(delivery.status)) }
            (c::details([
                ("Endpoint", c::or_none(endpoint, "deleted")),
                ("Attempts", html! { (delivery.attempts) }),
                ("Last attempt", html! { (c::when_or(delivery.last_attempt_at.as_ref(), "none yet")) }),
                ("Next attempt", html! { (c::when_or(delivery.next_attempt_at.as_ref(), "none")) }),
            ]))
            (c::list(&d.attempts, &[
                Column("Attempted", "", &|a| html! { (c::when(&a.attempted_at)) }),
                Column("Duration", "num", &|a| html! { (a.duration_ms) " ms" }),
                Column("Outcome", "", &|a| html! { (a.outcome.to_value()) }),
                Column("Status", "num", &|a| html! { @if let Some(status) = a.response_status { (status) } }),
                Column("Answer (excerpt)", "", &|a| html! { code { (a.response_excerpt) } }),
                Column("Then due", "", &|a| html! { (c::when_or(a.next_attempt_at.as_ref(), "—")) }),
            ], "Not attempted yet."))
        }
    }
}

#[handler]
async fn show(admin: SignedIn, Path(id): Path<i64>) -> Answer {
    let db = &admin.state.db;
    let (e, deliveries) = webhook_events::get(db, id).await?;
    let p = projects::get(db, e.project_id).await?;
    let markup = page::frame(
        &admin,
        &format!("Event {}", e.id),
        html! {
            p { a href={ "/projects/" (p.id) "/events" } { "Events of " (p.name) } }
            (c::details([
                ("Type", html! { (events::type_name(e.event_type)) }),
                ("webhook-id", html! { code { (e.webhook_id) } }),
                ("Order", order_link(p.id, &e)),
                ("Recorded", html! { (c::when(&e.created_at)) }),
            ]))
            section {
                h2 { "Body sent" }
                pre { code { (e.payload) } }
            }
            @for d in &deliveries { (delivery_section(d)) }
            @if deliveries.is_empty() { p.muted { "No delivery is left: its endpoints were deleted." } }
        },
    );
    Ok(page::ok(markup))
}
