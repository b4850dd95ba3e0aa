//! The operation log read back: a user's history behind
//! `GET /v2/master-account/operations` (newest first, a page at a time),
//! the ledger the panel filters, and an order's credit.
//!
//! Pages are cut by log id, not by offset: a page holds the entries below
//! the previous page's last id, so entries logged while a client pages
//! (they get higher ids) never shift what the next page holds, and no entry
//! is skipped or shown twice. The cursor carries that id and a checksum of
//! the query it was made for (project, user as named, server filter), so
//! that a cursor altered by hand or made for another query is refused
//! instead of silently paging something else. It is opaque to clients, not
//! secret: it only says where a page of the same query starts.

use chrono::{DateTime, Utc};
use entity::{
    operation_log::{self, BalanceType, LogKind},
    payment_order,
};
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect, QueryTrait,
};
use sha2::{Digest, Sha256};

use super::{
    keyset::{Keyset, Listed},
    servers, users,
    users::UserRef,
};
use crate::{money::Money, store::StoreError};

/// Entries per page at most.
pub const MAX_LIMIT: u64 = 100;
/// Entries per page when the caller does not say.
pub const DEFAULT_LIMIT: u64 = 20;

/// One page of one user's history.
#[derive(Debug, Clone)]
pub struct HistoryRequest {
    pub project_id: i64,
    pub who: UserRef,
    /// One account only (0 = the general account); every account when `None`.
    pub server_id: Option<i64>,
    /// 1 to [`MAX_LIMIT`].
    pub limit: u64,
    /// Where the page starts: the previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// One operation-log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: i64,
    pub kind: LogKind,
    /// 0 for the general account.
    pub server_id: i64,
    pub balance_type: BalanceType,
    /// The signed change, in cents.
    pub amount_cents: i64,
    pub balance_before: Money,
    pub balance_after: Money,
    /// The order credited, for `order_credit` entries.
    pub order_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// The cursor of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The cursor was altered, or made for another query.
    #[error("cursor not valid for this query")]
    BadCursor,
    #[error("user not found")]
    UserNotFound,
    #[error("server not found")]
    ServerNotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A page of the history `request` asks for (see the module docs). The
/// cursor is checked first, then the user, then the server.
pub async fn page(db: &DatabaseConnection, request: &HistoryRequest) -> Result<Page, HistoryError> {
    let before = match &request.cursor {
        Some(cursor) => Some(decode_cursor(request, cursor).ok_or(HistoryError::BadCursor)?),
        None => None,
    };
    let user_id = users::resolve(db, request.project_id, &request.who)
        .await
        .map_err(StoreError::from)?
        .ok_or(HistoryError::UserNotFound)?;
    if let Some(server_id) = request.server_id
        && !servers::is_in_project(db, request.project_id, server_id)
            .await
            .map_err(StoreError::from)?
    {
        return Err(HistoryError::ServerNotFound);
    }
    let page = Keyset {
        before,
        size: request.limit.clamp(1, MAX_LIMIT),
    };
    let query = operation_log::Entity::find()
        .filter(operation_log::Column::UserId.eq(user_id))
        .apply_if(request.server_id, |q, id| {
            q.filter(operation_log::Column::ServerId.eq(id))
        })
        .find_also_related(payment_order::Entity);
    let rows = page
        .select(query, operation_log::Column::Id)
        .all(db)
        .await
        .map_err(StoreError::from)?;
    let Listed { rows, older } = page.cut(rows, |(row, _)| row.id);
    let entries = rows.into_iter().map(entry).collect::<Result<Vec<_>, _>>()?;
    let next_cursor = older.map(|last| encode_cursor(request, last));
    Ok(Page {
        entries,
        next_cursor,
    })
}

/// An entry as read with the order it credited.
fn entry(
    (row, order): (operation_log::Model, Option<payment_order::Model>),
) -> Result<Entry, StoreError> {
    let money = |cents: i64| {
        Money::from_cents(cents)
            .map_err(|err| StoreError::Failed(format!("balance out of range in log: {err}")))
    };
    Ok(Entry {
        id: row.id,
        kind: row.kind,
        server_id: row.server_id,
        balance_type: row.balance_type,
        amount_cents: row.amount_cents,
        balance_before: money(row.balance_before_cents)?,
        balance_after: money(row.balance_after_cents)?,
        order_id: order.map(|o| o.order_id),
        created_at: row.created_at,
    })
}

/// Bytes of the checksum a cursor carries.
const CHECK_LEN: usize = 12;

/// The checksum of a cursor starting below `before` for `request`'s query.
fn cursor_check(request: &HistoryRequest, before: i64) -> [u8; CHECK_LEN] {
    let scope = format!(
        "operations cursor\nproject={}\nuser_id={:?}\nemail={:?}\nserver_id={:?}\nbefore={before}",
        request.project_id,
        request.who.user_id(),
        request.who.email().map(|email| email.as_str()),
        request.server_id,
    );
    let digest = Sha256::digest(scope.as_bytes());
    let mut check = [0; CHECK_LEN];
    check.copy_from_slice(&digest[..CHECK_LEN]);
    check
}

/// The cursor of the page below log id `before`: the id and the checksum,
/// in hex.
fn encode_cursor(request: &HistoryRequest, before: i64) -> String {
    let mut bytes = before.to_be_bytes().to_vec();
    bytes.extend_from_slice(&cursor_check(request, before));
    hex::encode(bytes)
}

/// The log id a cursor starts below, when it was made for `request`'s query.
fn decode_cursor(request: &HistoryRequest, cursor: &str) -> Option<i64> {
    let bytes = hex::decode(cursor).ok()?;
    if bytes.len() != 8 + CHECK_LEN {
        return None;
    }
    let (id, check) = bytes.split_at(8);
    let before = i64::from_be_bytes(id.try_into().ok()?);
    (before > 0 && check == cursor_check(request, before)).then_some(before)
}

/// Which operation-log entries [`ledger`] keeps; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct LedgerFilter {
    /// Entries of this project's users.
    pub project_id: Option<i64>,
    pub user_id: Option<i64>,
    pub kind: Option<LogKind>,
    /// From this moment on.
    pub from: Option<DateTime<Utc>>,
    /// Before this moment.
    pub until: Option<DateTime<Utc>>,
}

/// One entry of the whole operation log, as stored (amounts in signed
/// cents, so that an entry breaking the rules still shows), with its
/// user's project and the order it credited.
#[derive(Debug, Clone)]
pub struct LedgerEntry {
    pub row: operation_log::Model,
    /// The project of the entry's user.
    pub project_id: Option<i64>,
    /// The order credited, for `order_credit` entries.
    pub order_id: Option<String>,
}

/// The page `page` of the operation log's entries that `filter` keeps,
/// across every project, newest first.
pub async fn ledger(
    db: &DatabaseConnection,
    filter: &LedgerFilter,
    page: Keyset,
) -> Result<Listed<LedgerEntry>, sea_orm::DbErr> {
    use entity::user;
    use operation_log::Column;
    use sea_orm::sea_query::Query;

    let in_project = |project_id| {
        Query::select()
            .column(user::Column::Id)
            .from(user::Entity)
            .and_where(user::Column::ProjectId.eq(project_id))
            .to_owned()
    };
    let query = operation_log::Entity::find()
        .apply_if(filter.project_id, |q, id| {
            q.filter(Column::UserId.in_subquery(in_project(id)))
        })
        .apply_if(filter.user_id, |q, id| q.filter(Column::UserId.eq(id)))
        .apply_if(filter.kind, |q, kind| q.filter(Column::Kind.eq(kind)))
        .apply_if(filter.from, |q, from| q.filter(Column::CreatedAt.gte(from)))
        .apply_if(filter.until, |q, until| {
            q.filter(Column::CreatedAt.lt(until))
        });
    let rows = page
        .select(query.find_also_related(payment_order::Entity), Column::Id)
        .all(db)
        .await?;
    let Listed { rows, older } = page.cut(rows, |(row, _)| row.id);
    let mut user_ids: Vec<i64> = rows.iter().map(|(row, _)| row.user_id).collect();
    user_ids.sort_unstable();
    user_ids.dedup();
    let projects: std::collections::HashMap<i64, i64> = if user_ids.is_empty() {
        Default::default()
    } else {
        user::Entity::find()
            .select_only()
            .column(user::Column::Id)
            .column(user::Column::ProjectId)
            .filter(user::Column::Id.is_in(user_ids))
            .into_tuple::<(i64, i64)>()
            .all(db)
            .await?
            .into_iter()
            .collect()
    };
    let rows = rows
        .into_iter()
        .map(|(row, order)| LedgerEntry {
            project_id: projects.get(&row.user_id).copied(),
            order_id: order.map(|o| o.order_id),
            row,
        })
        .collect();
    Ok(Listed { rows, older })
}

/// The operation-log entries of order `order_id` of `project_id` (its
/// credit, once completed), oldest first.
pub async fn of_order(
    db: &DatabaseConnection,
    project_id: i64,
    order_id: &str,
) -> Result<Vec<Entry>, StoreError> {
    operation_log::Entity::find()
        .find_also_related(payment_order::Entity)
        .filter(payment_order::Column::ProjectId.eq(project_id))
        .filter(payment_order::Column::OrderId.eq(order_id))
        .order_by_asc(operation_log::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(entry)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(user_id: i64, server_id: Option<i64>) -> HistoryRequest {
        HistoryRequest {
            project_id: 1,
            who: UserRef::Id(user_id),
            server_id,
            limit: 20,
            cursor: None,
        }
    }

    #[test]
    fn a_cursor_reads_back_only_for_its_own_query() {
        let mine = request(7, None);
        let cursor = encode_cursor(&mine, 42);
        assert_eq!(decode_cursor(&mine, &cursor), Some(42));
        assert_eq!(decode_cursor(&request(8, None), &cursor), None);
        assert_eq!(decode_cursor(&request(7, Some(0)), &cursor), None);
        let other_project = HistoryRequest {
            project_id: 2,
            ..mine.clone()
        };
        assert_eq!(decode_cursor(&other_project, &cursor), None);
    }

    #[test]
    fn an_altered_cursor_is_refused() {
        let mine = request(7, None);
        let cursor = encode_cursor(&mine, 42);
        for at in 0..cursor.len() {
            let mut altered = cursor.clone().into_bytes();
            altered[at] = if altered[at] == b'0' { b'1' } else { b'0' };
            let altered = String::from_utf8(altered).unwrap();
            assert_eq!(decode_cursor(&mine, &altered), None, "{altered}");
        }
        for bad in ["", "zz", &cursor[..38], &format!("{cursor}00")] {
            assert_eq!(decode_cursor(&mine, bad), None, "{bad}");
        }
    }
}
