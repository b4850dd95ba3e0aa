//! What forms and filters send, read into the values the service takes.
//!
//! A posted form is a `#[derive(Deserialize)]` struct read by
//! [`PostForm`](super::session::PostForm), with one step that gives its
//! parsed values or its [`FieldErrors`]; the struct, as sent, is also what
//! its page shows again next to those errors. A list's filters are
//! [`Params`], text each, so that a bad one gets its error next to its
//! field instead of a bare 400. Values are read trimmed, passwords as typed.

use chrono::{DateTime, Utc};
use entity::balance::GENERAL_ACCOUNT;
use maud::{Markup, html};
use serde::{Deserialize, Deserializer, de::Error as _};

use super::PanelError;
use crate::{
    money::Money,
    service::{AdminError, keyset::Keyset},
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

    /// `value` when there is no error, else the errors.
    pub fn or<T>(self, value: T) -> Result<T, FieldErrors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(self)
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

/// An enable or disable form: `active` is `true` or `false`, the two
/// values the forms send; anything else is refused.
#[derive(Debug, Deserialize)]
pub struct Toggle {
    #[serde(deserialize_with = "switch")]
    pub active: bool,
}

fn switch<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match String::deserialize(deserializer)?.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(D::Error::custom("its active field must be true or false")),
    }
}

/// A list page's filters: the query string's parameters, read trimmed.
#[derive(Debug, Default)]
pub struct Params(Vec<(String, String)>);

impl Params {
    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    /// The trimmed value of `name`; empty when it is missing.
    pub fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map_or("", |(_, value)| value.trim())
    }

    /// Filter `name` as `parse` reads it, none when blank; a value `parse`
    /// refuses gets its message next to its field.
    pub fn parsed<T>(
        &self,
        name: &'static str,
        errors: &mut FieldErrors,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        match self.get(name) {
            "" => None,
            text => parse(text)
                .map_err(|message| errors.add(name, message))
                .ok(),
        }
    }

    /// A query string (`?a=1&b=2`, or empty) carrying the non-blank values
    /// of `names`, for links that keep the filters.
    pub fn query(&self, names: &[&str]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for name in names {
            let value = self.get(name);
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        let query = query.finish();
        if query.is_empty() {
            query
        } else {
            format!("?{query}")
        }
    }

    /// The page of a list that `before` asks for (the newest when it is
    /// blank), of `size` rows. Only an "older" link sends `before`, so a
    /// value that is not a row id is a bad request, not a field's error.
    pub fn page(&self, size: u64) -> Result<Keyset, PanelError> {
        let before = match self.get("before") {
            "" => None,
            text => Some(parse_id(text).ok_or_else(|| {
                PanelError::BadRequest("The page asked for is not a row id.".to_owned())
            })?),
        };
        Ok(Keyset { before, size })
    }
}

impl<'a> poem::FromRequest<'a> for Params {
    async fn from_request(
        req: &'a poem::Request,
        _body: &mut poem::RequestBody,
    ) -> poem::Result<Self> {
        let pairs = req
            .uri()
            .query()
            .map(|query| {
                form_urlencoded::parse(query.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(Params(pairs))
    }
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
    params: &Params,
    errors: &mut FieldErrors,
) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let start = params.parsed("from", errors, parse_day).flatten();
    let last = params.parsed("to", errors, parse_day).flatten();
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
        let params = Params::from_pairs(&[("from", "2026-12-31"), ("to", "2026-12-31")]);
        let (from, until) = parse_day_range(&params, &mut errors);
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
