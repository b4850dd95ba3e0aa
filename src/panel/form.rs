//! What forms and filters send, read into the values the service takes.
//!
//! A posted form is a `#[derive(Deserialize)]` struct read by
//! [`PostForm`](super::session::PostForm), with one step that gives its
//! parsed values or its [`FieldErrors`]; the struct, as sent, is also what
//! its page shows again next to those errors. A list's filters are read
//! the same way from the query string, by [`PageQuery`]. Values are read
//! trimmed, passwords as typed.

use std::{borrow::Cow, future::Future};

use chrono::{DateTime, Utc};
use entity::balance::GENERAL_ACCOUNT;
use maud::{Markup, html};
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned, de::Error as _};

use super::PanelError;
use crate::{
    money::Money,
    service::{
        AdminError,
        keyset::{Keyset, Listed},
    },
};

/// Field errors of a form, by field name.
#[derive(Debug, Default)]
pub struct FieldErrors(Vec<(&'static str, String)>);

impl FieldErrors {
    /// The one error of a form whose `field` is refused.
    pub fn one(field: &'static str, message: impl Into<String>) -> FieldErrors {
        let mut errors = FieldErrors::default();
        errors.add(field, message);
        errors
    }

    /// A refusal of the service as the error of the field it is about; its
    /// other errors are the page's.
    pub fn refused(err: AdminError) -> Result<FieldErrors, PanelError> {
        match err {
            AdminError::Invalid(field, message) | AdminError::Conflict(field, message) => {
                Ok(FieldErrors::one(field, message))
            }
            err => Err(err.into()),
        }
    }

    pub fn add(&mut self, field: &'static str, message: impl Into<String>) {
        self.0.push((field, message.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The errors of a read, none when it succeeded.
    pub fn of_read<T>(read: &Result<T, FieldErrors>) -> &FieldErrors {
        static NONE: FieldErrors = FieldErrors(Vec::new());
        read.as_ref().err().unwrap_or(&NONE)
    }

    /// The value a field's check gives, or none with its message next to
    /// field `name`.
    pub fn field<T>(&mut self, name: &'static str, checked: Result<T, String>) -> Option<T> {
        checked.map_err(|message| self.add(name, message)).ok()
    }

    /// Field `name`'s `text` as `parse` reads it, none when blank; a value
    /// `parse` refuses gets its message next to its field.
    pub fn check<T>(
        &mut self,
        name: &'static str,
        text: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        match text {
            "" => None,
            text => self.field(name, parse(text)),
        }
    }

    /// Each error as `field: message`, a line each.
    pub fn lines(&self) -> String {
        self.0
            .iter()
            .map(|(name, message)| format!("{name}: {message}\n"))
            .collect()
    }

    /// `value` when there is no error, else the errors.
    pub fn or<T>(self, value: T) -> Result<T, FieldErrors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }

    /// The value `make` gives of the fields' checked values (each one is
    /// there when no field has an error), else the errors.
    pub fn or_with<T>(self, make: impl FnOnce() -> Option<T>) -> Result<T, FieldErrors> {
        match make() {
            Some(value) if self.is_empty() => Ok(value),
            _ => Err(self),
        }
    }

    pub fn of(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| *name == field)
            .map(|(_, message)| message.as_str())
    }

    /// The message next to a field, when it has one (the page's summary
    /// lists it too, see `page::error_summary`).
    pub fn show(&self, field: &str) -> Markup {
        html! {
            @if let Some(message) = self.of(field) {
                p.field-error id={ (field) "-error" } { (message) }
            }
        }
    }

    /// The `id` of a field's input when it has an error: where the
    /// summary's link goes. Those of correct fields are left out, so that
    /// two forms of a page may have fields of the same name.
    pub fn id<'a>(&self, field: &'a str) -> Option<&'a str> {
        self.of(field).map(|_| field)
    }

    /// The `aria-invalid` of a field's input.
    pub fn invalid(&self, field: &str) -> Option<&'static str> {
        self.of(field).map(|_| "true")
    }

    /// The `aria-describedby` of a field's input: its error message.
    pub fn described_by(&self, field: &str) -> Option<String> {
        self.of(field).map(|_| format!("{field}-error"))
    }
}

/// What a form's change came to: what `change` made of the values `read`
/// gives, or the errors of the form, its own or the service's refusal as
/// `refused` places it (whose other errors are the page's).
pub async fn attempt<A, T, F>(
    read: Result<A, FieldErrors>,
    change: impl FnOnce(A) -> F,
    refused: fn(AdminError) -> Result<FieldErrors, PanelError>,
) -> Result<Result<T, FieldErrors>, PanelError>
where
    F: Future<Output = Result<T, AdminError>>,
{
    match read {
        Err(errors) => Ok(Err(errors)),
        Ok(asked) => match change(asked).await {
            Ok(done) => Ok(Ok(done)),
            Err(err) => refused(err).map(Err),
        },
    }
}

/// A form of one name (a project's, an administrator's).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NameForm {
    pub name: String,
}

/// A delete form: what the operator typed to confirm (the thing's name or
/// URL, which the page compares).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeleteForm {
    pub confirm_name: String,
}

impl DeleteForm {
    /// The forms of the page sent back, with `edit` as the object is, when
    /// what was typed is not the object's `name`, `what` it is (the
    /// token's name) to type to delete the `object`.
    pub fn refused<F>(
        self,
        name: &str,
        (what, object): (&str, &str),
        edit: F,
    ) -> Option<PageForms<F>> {
        let message = format!("this is not {what}: type it exactly to delete the {object}");
        (self.confirm_name != name).then(|| PageForms {
            edit,
            confirm_name: self.confirm_name,
            errors: FieldErrors::one("confirm_name", message),
        })
    }
}

/// The forms of an object's page: its edit form, as the object is or as
/// sent back, and what was typed in its delete form, with the errors of
/// either.
pub struct PageForms<F> {
    pub edit: F,
    pub confirm_name: String,
    pub errors: FieldErrors,
}

impl<F> PageForms<F> {
    /// The edit form sent back with its `errors` (none: the forms as the
    /// page first shows them).
    pub fn new(edit: F, errors: FieldErrors) -> PageForms<F> {
        PageForms {
            edit,
            confirm_name: String::new(),
            errors,
        }
    }
}

/// An enable or disable form: `active` is `true` or `false`, the two
/// values the forms send; anything else is refused.
#[derive(Debug, Deserialize)]
pub struct Toggle {
    #[serde(deserialize_with = "switch")]
    pub active: bool,
}

impl Toggle {
    /// What the form did: `enabled` or `disabled`.
    pub fn done(&self) -> &'static str {
        if self.active { "enabled" } else { "disabled" }
    }
}

fn switch<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match String::deserialize(deserializer)?.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(D::Error::custom("its active field must be true or false")),
    }
}

/// The fields read as typed, not trimmed: spaces at either end are part of
/// a password.
const PASSWORDS: [&str; 3] = ["password", "current_password", "password_again"];

/// `pairs` (a form's or a query string's) read as `T`, values trimmed but
/// passwords; a form the panel's pages never send (a field of the wrong
/// kind) is a bad request.
pub fn read_pairs<'a, T: DeserializeOwned>(
    pairs: impl IntoIterator<Item = (Cow<'a, str>, Cow<'a, str>)>,
) -> Result<T, PanelError> {
    let mut read = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        let as_typed = PASSWORDS.contains(&key.as_ref());
        read.append_pair(&key, if as_typed { &value } else { value.trim() });
    }
    serde_html_form::from_str(&read.finish()).map_err(|err| {
        PanelError::BadRequest(format!("The form is not one the panel sends: {err}."))
    })
}

/// What a page's query string asks for: `T`, a list's filters (text each,
/// so that a bad one gets its error next to its field instead of a bare
/// 400, see [`FieldErrors::check`]), and `before`, the page of the list.
/// A name sent more than once counts as first sent.
#[derive(Default)]
pub struct PageQuery<T> {
    pub filters: T,
    before: String,
}

impl<T> PageQuery<T> {
    /// The page of a list that `before` asks for (the newest when it is
    /// blank), of `size` rows. Only an "older" link sends `before`, so a
    /// value that is not a row id is a bad request, not a field's error.
    pub fn page(&self, size: u64) -> Result<Keyset, PanelError> {
        let before = match self.before.as_str() {
            "" => None,
            text => Some(parse_id(text).ok_or_else(|| {
                PanelError::BadRequest("The page asked for is not a row id.".to_owned())
            })?),
        };
        Ok(Keyset { before, size })
    }

    /// The page of `size` rows `fetch` reads with the filter the query's
    /// filters give; none when they have errors (nothing is searched).
    pub async fn rows<'a, S, R, E, F>(
        &self,
        size: u64,
        filter: &'a Result<S, FieldErrors>,
        fetch: impl FnOnce(&'a S, Keyset) -> F,
    ) -> Result<Listed<R>, PanelError>
    where
        F: Future<Output = Result<Listed<R>, E>>,
        PanelError: From<E>,
    {
        let page = self.page(size)?;
        match filter {
            Ok(filter) => Ok(fetch(filter, page).await?),
            Err(_) => Ok(Listed::default()),
        }
    }

    /// Whether a page older than the newest is asked for.
    pub fn paged(&self) -> bool {
        !self.before.is_empty()
    }
}

impl<T: Serialize> PageQuery<T> {
    /// A query string (`?a=1&b=2`, or empty) carrying the non-blank
    /// filters, for links that keep them.
    pub fn keep(&self) -> String {
        let all = serde_html_form::to_string(&self.filters).unwrap_or_default();
        let kept = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form_urlencoded::parse(all.as_bytes()).filter(|(_, v)| !v.is_empty()))
            .finish();
        if kept.is_empty() {
            kept
        } else {
            format!("?{kept}")
        }
    }
}

impl<'a, T: DeserializeOwned> poem::FromRequest<'a> for PageQuery<T> {
    async fn from_request(
        req: &'a poem::Request,
        _body: &mut poem::RequestBody,
    ) -> poem::Result<Self> {
        let mut pairs: Vec<(Cow<str>, Cow<str>)> = Vec::new();
        for (key, value) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
            if pairs.iter().all(|(name, _)| *name != key) {
                pairs.push((key, value));
            }
        }
        let before = match pairs.iter().position(|(name, _)| name == "before") {
            Some(at) => pairs.remove(at).1.trim().to_owned(),
            None => String::new(),
        };
        let filters = read_pairs(pairs)?;
        Ok(PageQuery { filters, before })
    }
}

/// The search of a list (its query parameter `q`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Search {
    pub q: String,
}

/// A positive id typed in a form or filter.
pub fn parse_id(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|&id| id > 0)
}

/// An amount typed in a form: `None` when left blank, else exact money, or
/// the message to show next to its field.
pub fn parse_money(text: &str) -> Result<Option<Money>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<Money>()
        .map(Some)
        .map_err(|err| format!("{text:?} {err}"))
}

/// An account typed or chosen in a form: a server id, or blank or 0 for
/// the general account; `None` when it is not one.
pub fn parse_server(text: &str) -> Option<i64> {
    match text {
        "" => Some(GENERAL_ACCOUNT),
        text => text.parse::<i64>().ok().filter(|&id| id >= 0),
    }
}

/// A day filter, `YYYY-MM-DD`, as the start of that day in UTC; blank is
/// none.
pub fn parse_day(text: &str) -> Result<Option<DateTime<Utc>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let shaped = text.len() == 10
        && text.bytes().enumerate().all(|(at, b)| match at {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    shaped
        .then(|| chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .map(|day| Some(day.and_time(chrono::NaiveTime::MIN).and_utc()))
        .ok_or_else(|| "not a date: write it as YYYY-MM-DD, such as 2026-11-25".to_owned())
}

/// The `from` and `to` day filters of a list, both days included, as the
/// moments `[from, until)`: from the start of `from`'s UTC day to the
/// start of the day after `to`. Errors go next to the fields `from` and
/// `to`.
pub fn parse_day_range(
    (from, to): (&str, &str),
    errors: &mut FieldErrors,
) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let start = errors.check("from", from, parse_day).flatten();
    let last = errors.check("to", to, parse_day).flatten();
    if let (Some(start), Some(last)) = (start, last)
        && last < start
    {
        errors.add("to", "must not be before the first day");
    }
    (start, last.map(|day| day + chrono::Days::new(1)))
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

    #[test]
    fn days_are_strict_utc_dates() {
        let day = parse_day("2026-11-25").unwrap().unwrap();
        assert_eq!(day.to_rfc3339(), "2026-11-25T00:00:00+00:00");
        assert_eq!(parse_day("  ").unwrap(), None);
        for bad in [
            "2026-2-05",
            "+2026-01-01",
            "2026-02-30",
            "2026/01/01",
            "2026-01-01T00",
        ] {
            assert!(parse_day(bad).is_err(), "{bad}");
        }
        let mut errors = FieldErrors::default();
        let (from, until) = parse_day_range(("2026-12-31", "2026-12-31"), &mut errors);
        assert!(errors.is_empty());
        assert_eq!(until.unwrap() - from.unwrap(), chrono::Duration::days(1));
    }

    #[test]
    fn switches_are_true_or_false() {
        let read = |body: &str| serde_html_form::from_str::<Toggle>(body).map(|t| t.active);
        assert!(read("active=true").unwrap());
        assert!(!read("active=false&csrf=x").unwrap());
        for bad in ["active=TRUE", "active=", "active=0", ""] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
