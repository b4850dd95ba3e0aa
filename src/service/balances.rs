//! Master-account balances: the lookup behind `GET /v2/master-account/balance`
//! and the `balance set` command.

use entity::{
    balance,
    operation_log::{self, BalanceType, LogKind},
};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait,
    QueryFilter,
    sea_query::{Expr, ExprTrait, OnConflict, Query},
};

pub use super::users::UserRef;
use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
    auth::Authenticated,
    now, outbox, servers, users, validate,
};
use crate::{
    domain::Email,
    events,
    money::Money,
    store::{AccountKey, Store, StoreError},
};

/// Both balances of one account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountBalance {
    pub main: Money,
    pub bonus: Money,
}

#[derive(Debug, thiserror::Error)]
pub enum BalanceLookupError {
    #[error("user not found")]
    UserNotFound,
    #[error("server not found")]
    ServerNotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One balance lookup: whose, and on which server (0 = general account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupRequest {
    pub who: UserRef,
    pub server_id: i64,
}

/// The balance of a user of the caller's project on `request.server_id`
/// (0 = general account). The user is resolved before the server, so
/// USER_NOT_FOUND wins when both are missing; with both user_id and e-mail,
/// both must name the same user. An account that never had a balance reads
/// as zero.
///
/// The account is usually read already, in the token's statement
/// (`auth::authenticate`); that row answers only exactly the account it was
/// read for, and any other is read again with the caller's token.
pub async fn lookup(
    store: &dyn Store,
    caller: &Authenticated,
    request: &LookupRequest,
) -> Result<AccountBalance, BalanceLookupError> {
    let key = account_key(request);
    let row = match &caller.account {
        Some((read_for, row)) if *read_for == key => *row,
        _ => store
            .read_token(&caller.principal.token_hash, Some(&key))
            .await?
            .and_then(|token| token.account)
            .ok_or(BalanceLookupError::UserNotFound)?,
    };
    let user = match request.who {
        UserRef::Id(_) => row.user_by_id,
        UserRef::Email(_) => row.user_by_email,
        UserRef::Both(..) => row.user_by_id.filter(|&id| row.user_by_email == Some(id)),
    };
    if user.is_none() {
        return Err(BalanceLookupError::UserNotFound);
    }
    if key.server_id != balance::GENERAL_ACCOUNT && !row.server_found {
        return Err(BalanceLookupError::ServerNotFound);
    }
    let balance = AccountBalance::of(row.main_cents.unwrap_or(0), row.bonus_cents.unwrap_or(0));
    Ok(balance.map_err(StoreError::Failed)?)
}

/// The account `request` names, as the store reads it.
pub fn account_key(request: &LookupRequest) -> AccountKey {
    AccountKey {
        user_id: request.who.user_id(),
        email: request.who.email().map(Email::to_string),
        server_id: request.server_id,
    }
}

impl AccountBalance {
    /// The balances stored as `main` and `bonus` cents.
    fn of(main: i64, bonus: i64) -> Result<AccountBalance, String> {
        Ok(AccountBalance {
            main: cents(main)?,
            bonus: cents(bonus)?,
        })
    }
}

fn cents(value: i64) -> Result<Money, String> {
    Money::from_cents(value).map_err(|err| format!("balance out of range in database: {err}"))
}

/// Adds `delta` to the main (or bonus) balance of an account inside `txn`,
/// creating the balance row when missing, and returns the balance before and
/// after. The increment happens in the database (`SET x = x + ?`), and the
/// row stays locked until `txn` ends, so parallel credits never lose one.
/// `project_id` is the user's (a new row carries it; the foreign key
/// refuses any other).
pub(crate) async fn add_in_txn(
    txn: &DatabaseTransaction,
    project_id: i64,
    user_id: i64,
    server_id: i64,
    column: balance::Column,
    delta: i64,
) -> Result<(i64, i64), DbErr> {
    let (main, bonus) = match column {
        balance::Column::BonusCents => (0, delta),
        _ => (delta, 0),
    };
    let stmt = Query::insert()
        .into_table(balance::Entity)
        .columns([
            balance::Column::UserId,
            balance::Column::ServerId,
            balance::Column::MainCents,
            balance::Column::BonusCents,
            balance::Column::UpdatedAt,
            balance::Column::ProjectId,
        ])
        .values_panic([
            user_id.into(),
            server_id.into(),
            main.into(),
            bonus.into(),
            now().into(),
            project_id.into(),
        ])
        .on_conflict(
            OnConflict::columns([balance::Column::UserId, balance::Column::ServerId])
                .value(column, Expr::col((balance::Entity, column)).add(delta))
                .value(balance::Column::UpdatedAt, now())
                .to_owned(),
        )
        .to_owned();
    // Read back rather than RETURNING, which MariaDB's upsert lacks: the
    // row is this transaction's (locked by the upsert) until it ends.
    txn.execute(&stmt).await?;
    let row = balance::Entity::find()
        .filter(balance::Column::UserId.eq(user_id))
        .filter(balance::Column::ServerId.eq(server_id))
        .one(txn)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("balance row after upsert".into()))?;
    let after = match column {
        balance::Column::BonusCents => row.bonus_cents,
        _ => row.main_cents,
    };
    Ok((after - delta, after))
}

/// What `balance set` changed.
#[derive(Debug, Clone, Copy)]
pub struct BalanceChange {
    pub before: AccountBalance,
    pub after: AccountBalance,
}

/// A balance as the audit log shows it.
fn audited(balance: &AccountBalance) -> serde_json::Value {
    serde_json::json!({"main": balance.main.to_string(), "bonus": balance.bonus.to_string()})
}

/// What [`set`] needs of its amounts: a main or a bonus one (or both).
pub fn check_amounts(main: Option<Money>, bonus: Option<Money>) -> Result<(), String> {
    if main.is_none() && bonus.is_none() {
        Err("give a main or a bonus amount (or both)".to_owned())
    } else {
        Ok(())
    }
}

/// Sets the main and/or bonus balance of a user on a server (`None` = the
/// general account), for `reason`. Every change is logged as a
/// `balance_set` row with the difference, in the same transaction, so the
/// ledger always replays to the current balance; the audit log gets one
/// `balance.set` row with the balances before and after and the reason, and
/// each balance changed its `balance.set` event (when the project has an
/// endpoint that receives it).
pub async fn set(
    db: &DatabaseConnection,
    actor: &Actor,
    user_id: i64,
    server_id: Option<i64>,
    main: Option<Money>,
    bonus: Option<Money>,
    reason: &str,
) -> Result<BalanceChange, AdminError> {
    check_amounts(main, bonus).map_err(AdminError::invalid("balance"))?;
    let reason = validate::check_reason(reason).map_err(AdminError::invalid("reason"))?;
    let user = users::get(db, user_id).await?;
    let server_id = match server_id {
        None | Some(0) => balance::GENERAL_ACCOUNT,
        Some(id) => servers::get_in_project(db, user.project_id, id).await?.id,
    };
    let txn = AuditedChange::begin(db, actor).await?;
    let (mut before, mut after) = (AccountBalance::default(), AccountBalance::default());
    // What the events of the change say: one per balance changed.
    let mut changed = Vec::new();
    for (column, target, kind) in [
        (balance::Column::MainCents, main, BalanceType::Main),
        (balance::Column::BonusCents, bonus, BalanceType::Bonus),
    ] {
        // Lock (or create) the row with a zero change, then move it to the target.
        let (current, _) = add_in_txn(&txn, user.project_id, user.id, server_id, column, 0).await?;
        let current = cents(current).map_err(DbErr::Custom)?;
        let new = target.unwrap_or(current);
        match column {
            balance::Column::MainCents => (before.main, after.main) = (current, new),
            _ => (before.bonus, after.bonus) = (current, new),
        }
        if target.is_none() || new == current {
            continue;
        }
        let delta = new.cents() - current.cents();
        // An absolute UPDATE of the row locked above: an upsert with a
        // negative delta would trip the non-negative CHECK on its INSERT half.
        balance::Entity::update_many()
            .col_expr(column, Expr::value(new.cents()))
            .col_expr(balance::Column::UpdatedAt, Expr::value(now()))
            .filter(balance::Column::UserId.eq(user.id))
            .filter(balance::Column::ServerId.eq(server_id))
            .exec(&*txn)
            .await?;
        let at = now();
        let logged = operation_log::ActiveModel {
            kind: Set(LogKind::BalanceSet),
            order_ref: Set(None),
            user_id: Set(user.id),
            server_id: Set(server_id),
            balance_type: Set(kind),
            amount_cents: Set(delta),
            balance_before_cents: Set(current.cents()),
            balance_after_cents: Set(new.cents()),
            created_at: Set(at),
            ..Default::default()
        }
        .insert(&*txn)
        .await?;
        changed.push(events::BalanceSetData {
            user_id: user.id,
            server_id,
            balance_type: kind,
            before: current,
            after: new,
            operation_id: logged.id,
            at,
        });
    }
    outbox::record(&*txn, user.project_id, || {
        changed
            .iter()
            .map(|change| events::balance_set(user.project_id, change))
            .collect()
    })
    .await?;
    let mut logged_after = audited(&after);
    logged_after["reason"] = reason.into();
    let change = Change::new("balance.set", "balance", format!("{}:{server_id}", user.id))
        .before(audited(&before))
        .after(logged_after);
    txn.commit(change).await?;
    Ok(BalanceChange { before, after })
}

/// The balance of a user on a server, for the command line.
pub async fn get(
    db: &DatabaseConnection,
    user_id: i64,
    server_id: i64,
) -> Result<AccountBalance, AdminError> {
    let row = balance::Entity::find()
        .filter(balance::Column::UserId.eq(user_id))
        .filter(balance::Column::ServerId.eq(server_id))
        .one(db)
        .await?;
    Ok(row
        .map_or(Ok(AccountBalance::default()), |row| {
            AccountBalance::of(row.main_cents, row.bonus_cents)
        })
        .map_err(DbErr::Custom)?)
}

/// Every balance row of a user, by server id (0 = the general account);
/// an account without a row has never had a balance and reads as zero.
pub async fn of_user(
    db: &DatabaseConnection,
    user_id: i64,
) -> Result<Vec<(i64, AccountBalance)>, DbErr> {
    use sea_orm::QueryOrder;
    balance::Entity::find()
        .filter(balance::Column::UserId.eq(user_id))
        .order_by_asc(balance::Column::ServerId)
        .all(db)
        .await?
        .into_iter()
        .map(|row| {
            Ok((
                row.server_id,
                AccountBalance::of(row.main_cents, row.bonus_cents).map_err(DbErr::Custom)?,
            ))
        })
        .collect()
}
