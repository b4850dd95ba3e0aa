//! The admin audit log: every change made through the panel or the command
//! line, with who made it, on which object, and the object before and after.
//!
//! A change is made in an [`AuditedChange`], a write transaction whose only
//! way to commit writes the change's row first: a change and its row commit
//! together or not at all, and no change commits without one. What goes into `before` and `after` is the
//! caller's choice of the object's fields; a secret (a token value, a
//! password, a hash of either) never does. Changes made through the API
//! (orders created, completed or cancelled by a game panel) are the
//! operation log's and the orders', not this log's.

use std::ops::Deref;

use chrono::{DateTime, Utc};
use entity::admin_audit_entry;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, DatabaseTransaction,
    DbErr, EntityTrait, QueryFilter, QueryTrait,
};
use serde_json::Value;

use super::{
    begin_write,
    keyset::{Keyset, Listed},
    now,
};
use crate::store::AuditRow;

/// What `actor` reads for a change made from the command line.
pub const COMMAND_LINE: &str = "command line";

/// Who makes a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The `masterpay` command, run by whoever can reach the database.
    CommandLine,
    /// An administrator signed in to the panel, from `address`.
    Administrator {
        id: i64,
        name: String,
        address: Option<String>,
    },
}

impl Actor {
    /// The administrator's name, or [`COMMAND_LINE`].
    pub fn name(&self) -> &str {
        match self {
            Actor::CommandLine => COMMAND_LINE,
            Actor::Administrator { name, .. } => name,
        }
    }
}

/// One change, as it goes into the log.
#[derive(Debug, Clone)]
pub struct Change {
    /// `object.verb`, such as `token.create`.
    pub action: String,
    pub object_kind: &'static str,
    pub object_id: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl Change {
    pub fn new(action: &str, object_kind: &'static str, object_id: impl ToString) -> Self {
        Change {
            action: action.to_owned(),
            object_kind,
            object_id: object_id.to_string(),
            before: None,
            after: None,
        }
    }

    pub fn before(mut self, before: Value) -> Self {
        self.before = Some(before);
        self
    }

    pub fn after(mut self, after: Value) -> Self {
        self.after = Some(after);
        self
    }
}

/// The action of enabling (`on`) or disabling an object of `kind`:
/// `token.enable`, `token.disable`.
pub fn toggle_action(kind: &str, on: bool) -> String {
    format!("{kind}.{}", if on { "enable" } else { "disable" })
}

/// The log's row of `change` by `actor`, made now: what [`record`] writes,
/// and what the store writes with a change it makes itself (an operator's
/// completion).
pub fn row(actor: &Actor, change: Change) -> AuditRow {
    let (administrator_id, address) = match actor {
        Actor::CommandLine => (None, None),
        Actor::Administrator { id, address, .. } => (Some(*id), address.clone()),
    };
    AuditRow {
        at: now(),
        administrator_id,
        actor: actor.name().to_owned(),
        action: change.action,
        object_kind: change.object_kind.to_owned(),
        object_id: change.object_id,
        before: change.before.map(|v| v.to_string()),
        after: change.after.map(|v| v.to_string()),
        address,
    }
}

/// An administrative change in the making: a write transaction (it derefs
/// to it for the change's statements) that commits only with the change's
/// row of the log. Dropped without [`AuditedChange::commit`], it rolls
/// back.
pub struct AuditedChange<'a> {
    txn: DatabaseTransaction,
    actor: &'a Actor,
}

impl<'a> AuditedChange<'a> {
    pub async fn begin(db: &DatabaseConnection, actor: &'a Actor) -> Result<Self, DbErr> {
        Ok(AuditedChange {
            txn: begin_write(db).await?,
            actor,
        })
    }

    /// Writes `change`'s row and commits.
    pub async fn commit(self, change: Change) -> Result<(), DbErr> {
        record(&self.txn, self.actor, change).await?;
        self.txn.commit().await
    }
}

impl Deref for AuditedChange<'_> {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

/// Writes `change` by `actor`, on `txn`: the transaction of the change.
async fn record(txn: &DatabaseTransaction, actor: &Actor, change: Change) -> Result<(), DbErr> {
    let row = row(actor, change);
    admin_audit_entry::ActiveModel {
        at: Set(row.at),
        administrator_id: Set(row.administrator_id),
        actor: Set(row.actor),
        action: Set(row.action),
        object_kind: Set(row.object_kind),
        object_id: Set(row.object_id),
        before: Set(row.before),
        after: Set(row.after),
        address: Set(row.address),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    Ok(())
}

/// Which entries [`list`] keeps; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// An administrator's name, or [`COMMAND_LINE`].
    pub actor: Option<String>,
    /// An exact action (`token.create`) or an object kind's prefix (`token`).
    pub action: Option<String>,
    pub object_kind: Option<String>,
    pub object_id: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// The newest `limit` entries `filter` keeps, newest first.
pub async fn list(
    db: &DatabaseConnection,
    filter: &AuditFilter,
    limit: u64,
) -> Result<Vec<admin_audit_entry::Model>, DbErr> {
    Ok(page(db, filter, Keyset::first(limit)).await?.rows)
}

/// The page `page` of the entries `filter` keeps, newest first.
pub async fn page(
    db: &DatabaseConnection,
    filter: &AuditFilter,
    page: Keyset,
) -> Result<Listed<admin_audit_entry::Model>, DbErr> {
    use admin_audit_entry::Column;
    let query = admin_audit_entry::Entity::find()
        .apply_if(filter.actor.as_deref(), |q, actor| {
            q.filter(Column::Actor.eq(actor))
        })
        .apply_if(filter.action.as_deref(), |q, action| {
            q.filter(if action.contains('.') {
                Column::Action.eq(action)
            } else {
                Column::Action.starts_with(format!("{action}."))
            })
        })
        .apply_if(filter.object_kind.as_deref(), |q, kind| {
            q.filter(Column::ObjectKind.eq(kind))
        })
        .apply_if(filter.object_id.as_deref(), |q, id| {
            q.filter(Column::ObjectId.eq(id))
        })
        .apply_if(filter.from, |q, from| q.filter(Column::At.gte(from)))
        .apply_if(filter.until, |q, until| q.filter(Column::At.lt(until)));
    let rows = page.select(query, Column::Id).all(db).await?;
    Ok(page.cut(rows, |row| row.id))
}
