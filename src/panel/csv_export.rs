//! The CSV exports (orders, ledger, audit log): streamed a page of rows at
//! a time, read by id as the lists are paged, so that an export of any size
//! holds one page in memory; every cell a spreadsheet would run as a
//! formula is neutralised.

use std::{fmt::Display, future::Future, io};

use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::{StreamExt, stream};
use poem::{
    Body, Response,
    http::{StatusCode, header},
};
use sea_orm::DatabaseConnection;

use super::form::FieldErrors;
use crate::service::keyset::{Keyset, Listed};

/// Rows read from the database at a time.
const PAGE_SIZE: u64 = 1000;

/// A cell a spreadsheet would not run as a formula: one starting with
/// `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`,
/// unless it is a negative decimal number (`-1.50`, a ledger's change),
/// which is a value and stays one.
pub(super) fn cell(text: &str) -> String {
    let negative_number = text.strip_prefix('-').is_some_and(|digits| {
        let (whole, cents) = digits.split_once('.').unwrap_or((digits, "0"));
        [whole, cents]
            .iter()
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    });
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) && !negative_number {
        format!("'{text}")
    } else {
        text.to_owned()
    }
}

/// A moment as the exports write it, RFC 3339 in UTC to the microsecond;
/// blank when there is none.
pub(super) fn moment(at: impl Into<Option<DateTime<Utc>>>) -> String {
    at.into()
        .map(|at| at.to_rfc3339_opts(SecondsFormat::Micros, true))
        .unwrap_or_default()
}

/// `rows` as CSV, each cell through [`cell`].
pub(super) fn to_csv<R: AsRef<[String]>>(rows: &[R]) -> io::Result<Vec<u8>> {
    let mut out = csv::Writer::from_writer(Vec::new());
    for row in rows {
        out.write_record(row.as_ref().iter().map(|text| cell(text)))?;
    }
    out.into_inner().map_err(|err| err.into_error())
}

/// The columns of an export of `R`s: each one's name, in the header row,
/// and its cell of an entry.
pub(super) type Columns<R> = &'static [(&'static str, fn(&R) -> String)];

/// A CSV attachment named `file_name` of the rows a list's `filter` keeps:
/// the header row of the `columns`, then each entry `read` gives from
/// `db` with `filter` for each page from the newest to the oldest, a cell
/// a column. A filter with errors is answered with what is wrong with
/// each field, as text (the list page's buttons never send them). A failure once the answer has
/// started ends its body short of its end (and is logged), which the
/// client sees as a broken download, never as a shorter file.
pub(super) fn attachment<S, R, F, E>(
    (file_name, columns): (&str, Columns<R>),
    (db, filter): (&DatabaseConnection, Result<S, FieldErrors>),
    read: impl Fn(DatabaseConnection, S, Keyset) -> F + Send + 'static,
) -> Response
where
    S: Clone + Send + 'static,
    R: 'static,
    F: Future<Output = Result<Listed<R>, E>> + Send + 'static,
    E: Display,
{
    let filter = match filter {
        Ok(filter) => filter,
        Err(errors) => {
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(errors.lines());
        }
    };
    let db = db.clone();
    let header = [columns.iter().map(|(name, _)| (*name).to_owned()).collect()];
    let header = stream::once(async move { to_csv::<Vec<String>>(&header) });
    let rows = stream::try_unfold(Some(Keyset::first(PAGE_SIZE)), move |page| {
        let reading = page.map(|page| read(db.clone(), filter.clone(), page));
        async move {
            let Some(reading) = reading else {
                return Ok(None);
            };
            let page = reading.await.map_err(|err| {
                tracing::error!(error = %err, "CSV export failed");
                io::Error::other("the export could not be read")
            })?;
            let next = page.older.map(|before| Keyset {
                before: Some(before),
                size: PAGE_SIZE,
            });
            let row = |entry| columns.iter().map(|(_, cell)| cell(entry)).collect();
            let rows: Vec<Vec<String>> = page.rows.iter().map(row).collect();
            Ok(Some((to_csv(&rows)?, next)))
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/csv; charset=utf-8")
        .header(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{file_name}\""),
        )
        .body(Body::from_bytes_stream(header.chain(rows)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_are_neutralized() {
        for bad in ["=1+1", "+1", "-1+1", "-A1", "-1.", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(cell(bad), format!("'{bad}"));
        }
        assert_eq!(cell("-1.50"), "-1.50");
        assert_eq!(cell("-3"), "-3");
        assert_eq!(cell("token.create"), "token.create");
        assert_eq!(cell("{\"a\":1}"), "{\"a\":1}");
        assert_eq!(cell(""), "");
    }

    #[test]
    fn cells_are_quoted_when_they_need_it() {
        let row = vec!["=cmd".to_owned(), r#"{"name":"a,b"}"#.to_owned()];
        let text = String::from_utf8(to_csv(&[row]).unwrap()).unwrap();
        assert_eq!(text, "'=cmd,\"{\"\"name\"\":\"\"a,b\"\"}\"\n");
    }
}
