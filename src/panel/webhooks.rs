//! The webhook endpoints of a project: list, create (the address, the
//! event types as checkboxes, a description), edit, disable and enable,
//! delete. A disabled endpoint shows why it stopped receiving.
//!
//! An endpoint's signing secret exists in clear only in the answer to its
//! creation: that POST's own answer is the endpoint's page with the secret
//! (`no-store`, as every panel answer), as a token's value is shown, and a
//! reload is a GET of that page, which never shows it.

use entity::{project, webhook_endpoint};
use sea_orm::Iterable;

use super::{form::attempt, prelude::*};
use crate::{
    events::{self, EventType},
    service::{
        projects, validate, webhook_destination::Destinations, webhook_endpoints as endpoints,
    },
};

pub fn routes(route: Route) -> Route {
    route
        .at("/projects/:id/webhooks", get(list).post(create))
        .at("/webhooks/:id", get(show))
        .at("/webhooks/:id/edit", post(edit))
        .at("/webhooks/:id/active", post(set_active))
        .at("/webhooks/:id/delete", post(delete))
}

/// The create and edit forms, as sent and as shown.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EndpointForm {
    url: String,
    description: String,
    /// The types checked, one value per checkbox.
    event_type: Vec<String>,
    /// Checked: every type, those added later too.
    every_type: String,
}

/// What a correct form asks for.
#[derive(Debug)]
struct EndpointSettings {
    url: String,
    /// `None`: every type.
    types: Option<Vec<EventType>>,
    description: String,
}

impl EndpointForm {
    fn of(endpoint: &webhook_endpoint::Model) -> EndpointForm {
        let types = endpoint.event_types.as_deref();
        EndpointForm {
            url: endpoint.url.clone(),
            description: endpoint.description.clone(),
            event_type: types
                .map(|names| names.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            every_type: types.map_or("on", |_| "").to_owned(),
        }
    }

    /// The settings the form asks for, or an error next to each field that
    /// is wrong (the rules are the service's).
    async fn read(&self, destinations: &Destinations) -> Result<EndpointSettings, FieldErrors> {
        let mut errors = FieldErrors::default();
        let url = endpoints::check_destination(&self.url, destinations).await;
        let url = errors.field("url", url);
        let description = validate::check_description(&self.description);
        let description = errors.field("description", description);
        let types = match self.every_type.as_str() {
            "" => events::parse_types(&self.event_type.join(",")).map(Some),
            _ => Ok(None),
        };
        let types = errors.field("event_types", types);
        errors.or_with(|| {
            Some(EndpointSettings {
                url: url?,
                types: types?,
                description: description?.unwrap_or_default(),
            })
        })
    }
}

fn types_badges(stored: Option<&str>) -> Markup {
    html! {
        @match stored {
            None => { (c::badge("every type", "")) }
            Some(names) => { @for name in names.split(',') { (c::badge(name, "")) " " } }
        }
    }
}

fn state(endpoint: &webhook_endpoint::Model) -> Markup {
    html! {
        (c::state_badge(endpoint.enabled))
        @if let Some(reason) = &endpoint.disabled_reason { " " span.muted { (reason) } }
    }
}

/// The address, description and type checkboxes of the create and edit
/// forms.
fn endpoint_fields(form: &EndpointForm, errors: &FieldErrors) -> Markup {
    html! {
        (c::text_field("URL (http:// or https://)", "url", &form.url, errors, FieldAttrs::TEXT.placeholder("https://shop.example/masterpay-events")))
        (c::text_field("Description (optional)", "description", &form.description, errors, FieldAttrs::OPTIONAL))
        (c::checkboxes(
            ("Events it receives", "event_types", "event_type"),
            errors,
            html! {
                label {
                    input type="checkbox" name="every_type" value="on" checked[!form.every_type.is_empty()];
                    " Every type, those added later too"
                }
            },
            EventType::iter().map(|t| (events::type_name(t), html! { code { (events::type_name(t)) } })),
            &form.event_type,
        ))
    }
}

fn list_page(
    admin: &SignedIn,
    p: &project::Model,
    all: &[webhook_endpoint::Model],
    form: &EndpointForm,
    errors: &FieldErrors,
) -> Markup {
    let path = format!("/projects/{}/webhooks", p.id);
    page::frame(
        admin,
        &format!("Webhook endpoints of {}", p.name),
        html! {
            p {
                a href={ "/projects/" (p.id) } { "Project " (p.name) } " · "
                a href={ "/projects/" (p.id) "/events" } { "Its events" }
            }
            (c::list(all, &[
                Column("Id", "num", &|e| html! { a href={ "/webhooks/" (e.id) } { (e.id) } }),
                Column("URL", "", &|e| html! { a href={ "/webhooks/" (e.id) } { (e.url) } }),
                Column("Events", "", &|e| types_badges(e.event_types.as_deref())),
                Column("State", "", &state),
                Column("Description", "", &|e| html! { (e.description) }),
                Column("Created", "", &|e| html! { (c::when(&e.created_at)) }),
            ], "No endpoint yet: no event is recorded for this project."))
            (c::form_section(admin, ("New endpoint", &path), html! {
                (endpoint_fields(form, errors))
                p.muted { "Its signing secret is shown once, on the next page." }
                button type="submit" { "Create endpoint" }
            }))
        },
    )
}

#[handler]
async fn list(admin: SignedIn, Path(id): Path<i64>) -> Answer {
    let p = projects::get(&admin.state.db, id).await?;
    let all = endpoints::list(&admin.state.db, Some(id)).await?;
    let form = EndpointForm {
        every_type: "on".to_owned(),
        ..EndpointForm::default()
    };
    let markup = list_page(&admin, &p, &all, &form, &FieldErrors::default());
    Ok(page::ok(markup))
}

#[handler]
async fn create(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<EndpointForm>,
) -> Answer {
    let (state, actor) = (&admin.state, admin.actor());
    let p = projects::get(&state.db, id).await?;
    let (key, to) = (
        state.webhook_secret_key.as_ref(),
        &state.webhook_destinations,
    );
    let create = |asked: EndpointSettings| async move {
        let (url, types) = (&asked.url, asked.types.as_deref());
        let description = Some(asked.description.as_str());
        endpoints::create(&state.db, key, to, &actor, id, url, types, description).await
    };
    match attempt(form.read(to).await, create, FieldErrors::refused).await? {
        Ok((endpoint, secret)) => {
            let admin = admin.told(format!("Webhook endpoint {} created.", endpoint.id));
            endpoint_answer(&admin, &endpoint, Some(secret.expose()), None).await
        }
        Err(errors) => {
            let all = endpoints::list(&state.db, Some(id)).await?;
            Ok(page::invalid(list_page(&admin, &p, &all, &form, &errors)))
        }
    }
}

fn endpoint_page(
    admin: &SignedIn,
    (e, p): (&webhook_endpoint::Model, &project::Model),
    secret: Option<&str>,
    forms: &PageForms<EndpointForm>,
) -> Markup {
    let base = format!("/webhooks/{}", e.id);
    page::frame(
        admin,
        &format!("Webhook endpoint {}", e.id),
        html! {
            p {
                a href={ "/projects/" (p.id) "/webhooks" } { "Webhook endpoints of " (p.name) } " · "
                a href={ "/projects/" (p.id) "/events" } { "Events of " (p.name) }
            }
            @match secret {
                Some(secret) => {
                    (c::reveal(&base, (html! { "The endpoint's signing secret" }, "webhook-secret", secret), html! {
                        "Copy it now into the receiving service's settings: it will not be shown again, not even on this page after a reload."
                    }))
                }
                None => { p.muted { "The signing secret was shown once, when the endpoint was created, and cannot be shown again." } }
            }
            section {
                h2 { "Details" }
                (c::details([
                    ("Id", html! { (e.id) }),
                    ("URL", html! { code { (e.url) } }),
                    ("Events", types_badges(e.event_types.as_deref())),
                    ("State", state(e)),
                    ("Failing since", html! { (c::when_or(e.failing_since.as_ref(), "not failing")) }),
                    ("Description", html! { (e.description) }),
                    ("Created", html! { (c::when(&e.created_at)) }),
                    ("Changed", html! { (c::when(&e.updated_at)) }),
                ]))
            }
            (c::form_section(admin, ("Edit", &format!("{base}/edit")), html! {
                (endpoint_fields(&forms.edit, &forms.errors))
                button type="submit" { "Save changes" }
            }))
            (c::toggle_section(
                admin,
                (&format!("{base}/active"), "endpoint"),
                e.enabled,
                (
                    "A disabled endpoint receives nothing: no event is recorded for it from then on, and its pending deliveries are not sent.",
                    "The endpoint is disabled: no event is recorded for it. Enabling it records its events again from then on.",
                ),
                &format!("Disable endpoint {}? It stops receiving events at once.", e.id),
            ))
            (c::delete_section(
                admin,
                (&format!("{base}/delete"), "endpoint", &e.url),
                "Deleting the endpoint deletes its deliveries and their attempts; the project's events stay. This cannot be undone.",
                &forms.confirm_name,
                &forms.errors,
            ))
        },
    )
}

/// The endpoint's page, with its new `secret` the one time it is shown, or
/// with `refused` forms (422).
async fn endpoint_answer(
    admin: &SignedIn,
    e: &webhook_endpoint::Model,
    secret: Option<&str>,
    refused: Option<PageForms<EndpointForm>>,
) -> Answer {
    let p = projects::get(&admin.state.db, e.project_id).await?;
    let is_refused = refused.is_some();
    let forms =
        refused.unwrap_or_else(|| PageForms::new(EndpointForm::of(e), FieldErrors::default()));
    let markup = endpoint_page(admin, (e, &p), secret, &forms);
    Ok(page::ok_unless(is_refused, markup))
}

#[handler]
async fn show(admin: SignedIn, Path(id): Path<i64>) -> Answer {
    let e = endpoints::get(&admin.state.db, id).await?;
    endpoint_answer(&admin, &e, None, None).await
}

#[handler]
async fn edit(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<EndpointForm>,
) -> Answer {
    let (state, actor) = (&admin.state, admin.actor());
    let e = endpoints::get(&state.db, id).await?;
    let to = &state.webhook_destinations;
    let edit = |asked: EndpointSettings| async move {
        let edit = endpoints::EndpointEdit {
            url: Some(&asked.url),
            types: Some(asked.types.as_deref()),
            description: Some(&asked.description),
        };
        endpoints::edit(&state.db, to, &actor, id, edit).await
    };
    match attempt(form.read(to).await, edit, FieldErrors::refused).await? {
        Ok(_) => admin.done(
            &format!("/webhooks/{id}"),
            &format!("Webhook endpoint {id} saved."),
        ),
        Err(errors) => endpoint_answer(&admin, &e, None, Some(PageForms::new(form, errors))).await,
    }
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(toggle): PostForm<Toggle>,
) -> Answer {
    endpoints::set_enabled(&admin.state.db, &admin.actor(), id, toggle.active).await?;
    let message = format!("Webhook endpoint {id} {}.", toggle.done());
    admin.done(&format!("/webhooks/{id}"), &message)
}

#[handler]
async fn delete(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<DeleteForm>,
) -> Answer {
    let e = endpoints::get(&admin.state.db, id).await?;
    let shown = EndpointForm::of(&e);
    if let Some(forms) = form.refused(&e.url, ("the endpoint's URL", "endpoint"), shown) {
        return endpoint_answer(&admin, &e, None, Some(forms)).await;
    }
    endpoints::delete(&admin.state.db, &admin.actor(), id).await?;
    let to = format!("/projects/{}/webhooks", e.project_id);
    admin.done(&to, &format!("Webhook endpoint {id} deleted."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn forms_need_a_url_and_known_types_unless_every_type() {
        let body =
            "url=https%3A%2F%2Fa.example%2Fin&event_type=order.completed&event_type=balance.set";
        let form: EndpointForm = serde_html_form::from_str(body).unwrap();
        let read = form.read(&Destinations::default()).await.unwrap();
        assert_eq!(
            read.types,
            Some(vec![EventType::OrderCompleted, EventType::BalanceSet])
        );
        let every: EndpointForm =
            serde_html_form::from_str("url=http%3A%2F%2Fa.example&every_type=on").unwrap();
        assert_eq!(
            every.read(&Destinations::default()).await.unwrap().types,
            None
        );
        let errors = EndpointForm::default()
            .read(&Destinations::default())
            .await
            .unwrap_err();
        assert!(errors.of("url").is_some());
        assert!(errors.of("event_types").is_some());
        let unknown: EndpointForm =
            serde_html_form::from_str("url=http%3A%2F%2Fa.example&event_type=order.lost").unwrap();
        assert!(
            unknown
                .read(&Destinations::default())
                .await
                .unwrap_err()
                .of("event_types")
                .unwrap()
                .contains("order.lost")
        );
    }
}
