//! Master-account balances: the lookup behind `GET /v2/master-account/balance`
//! and the `balance set` command.

use entity::{balance, operation_log, project, server, user};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    EntityTrait, QueryFilter, Value,
    sea_query::{DynIden, Expr, ExprTrait, Func, IntoIden, OnConflict, Query, SelectStatement},
};

use super::{AdminError, begin_write, now, servers, users};
use crate::{
    db::{CachedSql, ReadRow, Reader},
    money::Money,
};

/// How the caller names the user: by id, by e-mail, or both (then both must
/// name the same user of the project).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRef {
    pub user_id: Option<i64>,
    /// Already validated as an e-mail address.
    pub email: Option<String>,
}

/// Both balances of one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    Db(#[from] DbErr),
}

/// One balance lookup: whose, and on which server (0 = general account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupRequest {
    pub who: UserRef,
    pub server_id: i64,
}

/// A lookup read in the token's own statement (see
/// [`super::tokens::authenticate`]): the project it was read for, what was
/// asked, and what was found.
#[derive(Debug, Clone)]
pub struct Prefetched {
    project_id: i64,
    request: LookupRequest,
    found: Result<AccountBalance, Missing>,
}

/// Which of the two a lookup did not find.
#[derive(Debug, Clone, Copy)]
enum Missing {
    User,
    Server,
}

impl Prefetched {
    /// The answer to `request` for `project_id`, when this is it.
    fn answer(
        &self,
        project_id: i64,
        request: &LookupRequest,
    ) -> Option<Result<AccountBalance, BalanceLookupError>> {
        (self.project_id == project_id && self.request == *request).then(|| {
            self.found.map_err(|missing| match missing {
                Missing::User => BalanceLookupError::UserNotFound,
                Missing::Server => BalanceLookupError::ServerNotFound,
            })
        })
    }
}

/// The balance of a user of `project_id` on `server_id` (0 = general account).
/// The user is resolved before the server, so USER_NOT_FOUND wins when both
/// are missing. An account that never had a balance reads as zero.
///
/// One statement: the user, left-joined with its balance row and (for a
/// server other than the general account) with the project's server, so a
/// lookup is one round trip instead of three; by user id alone, the balance
/// row first and the user only when there is none ([`join_by_id`]).
/// When `prefetched` holds this very lookup, already read with the token
/// (PostgreSQL and MariaDB), no statement runs at all.
pub async fn lookup(
    db: &Reader,
    project_id: i64,
    request: &LookupRequest,
    prefetched: Option<&Prefetched>,
) -> Result<AccountBalance, BalanceLookupError> {
    if let Some(answer) = prefetched.and_then(|p| p.answer(project_id, request)) {
        return answer;
    }
    let Some((shape, params)) = lookup_params(request) else {
        return Err(BalanceLookupError::UserNotFound);
    };
    let mut all = vec![Value::from(project_id)];
    all.extend(params);
    let stmt = LOOKUP_SQL[shape.index()]
        .statement(db.backend(), all, |params| lookup_query(shape, params));
    match db.one(stmt).await? {
        None => Err(BalanceLookupError::UserNotFound),
        Some(row) => lookup_result(&row, 0, shape.general),
    }
}

/// The shape of `request`'s statement and its parameters after the project:
/// the server id, then the user id and the normalized e-mail when given.
/// `None` when it names no user. Also what joining the lookup to another
/// statement takes ([`join_lookup`]).
pub(crate) fn lookup_params(request: &LookupRequest) -> Option<(LookupShape, Vec<Value>)> {
    let who = &request.who;
    let email = who.email.as_deref().map(super::validate::normalize_email);
    let shape = LookupShape {
        by_id: who.user_id.is_some(),
        by_email: email.is_some(),
        general: request.server_id == balance::GENERAL_ACCOUNT,
    };
    if !shape.by_id && !shape.by_email {
        return None;
    }
    let mut params = vec![Value::from(request.server_id)];
    params.extend(who.user_id.map(Value::from));
    params.extend(email.map(Value::from));
    Some((shape, params))
}

/// The lookup's columns of `row` from `first` on: the user's id (NULL when
/// no such user), the main and bonus cents (NULL without a balance row) and,
/// unless `general`, the server's id (NULL when the project has no such
/// server).
fn lookup_result(
    row: &ReadRow,
    first: usize,
    general: bool,
) -> Result<AccountBalance, BalanceLookupError> {
    if row.opt_i64(first)?.is_none() {
        return Err(BalanceLookupError::UserNotFound);
    }
    if !general && row.opt_i64(first + 3)?.is_none() {
        return Err(BalanceLookupError::ServerNotFound);
    }
    let main = row.opt_i64(first + 1)?;
    let bonus = row.opt_i64(first + 2)?;
    Ok(AccountBalance {
        main: cents(main.unwrap_or(0))?,
        bonus: cents(bonus.unwrap_or(0))?,
    })
}

/// Reads the lookup's columns, which start at `first`, of a row of a
/// statement that [`join_lookup`] extended.
pub(crate) fn prefetched(
    row: &ReadRow,
    first: usize,
    project_id: i64,
    request: LookupRequest,
) -> Result<Prefetched, DbErr> {
    let general = request.server_id == balance::GENERAL_ACCOUNT;
    let found = match lookup_result(row, first, general) {
        Ok(balance) => Ok(balance),
        Err(BalanceLookupError::UserNotFound) => Err(Missing::User),
        Err(BalanceLookupError::ServerNotFound) => Err(Missing::Server),
        Err(BalanceLookupError::Db(err)) => return Err(err),
    };
    Ok(Prefetched {
        project_id,
        request,
        found,
    })
}

/// The rendered lookup statements, one per [`LookupShape`].
static LOOKUP_SQL: [CachedSql; LookupShape::COUNT] =
    [const { CachedSql::new() }; LookupShape::COUNT];

/// Which conditions a lookup has; each shape is its own SQL text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LookupShape {
    by_id: bool,
    by_email: bool,
    general: bool,
}

impl LookupShape {
    /// How many shapes there are: [`LookupShape::index`] is below it.
    pub(crate) const COUNT: usize = 8;

    pub(crate) fn index(self) -> usize {
        usize::from(self.by_id) | usize::from(self.by_email) << 1 | usize::from(self.general) << 2
    }

    /// Whether the user is named by id.
    pub(crate) fn by_id(self) -> bool {
        self.by_id
    }

    /// Whether the user is named by e-mail.
    pub(crate) fn by_email(self) -> bool {
        self.by_email
    }

    /// Whether the lookup is of the general account (no server to find).
    pub(crate) fn general(self) -> bool {
        self.general
    }
}

/// Joins the lookup to `query`, a statement over one row that has the
/// project's id in its column `project`: the project's user (by id, e-mail or
/// both), its balance row on the server, and unless the shape is the general
/// account the project's server; the same columns, in the same order, as
/// [`lookup_query`]. All left joins, so the row stays when nothing is found.
/// By user id alone, the balance row first and the user only when there is
/// none ([`join_by_id`]).
/// `params`: server id, then the user id and the e-mail when the shape has
/// them.
pub(crate) fn join_lookup(
    query: &mut SelectStatement,
    shape: LookupShape,
    project: (DynIden, DynIden),
    params: Vec<Value>,
) {
    let mut params = params.into_iter();
    let mut next = || params.next().expect("lookup parameter");
    let server_id = next();
    if shape.by_id && !shape.by_email {
        join_by_id(query, shape, project, server_id, next());
        return;
    }
    let mut user = Expr::col((user::Entity, user::Column::ProjectId)).equals(project);
    if shape.by_id {
        user = user.and(Expr::col((user::Entity, user::Column::Id)).eq(next()));
    }
    if shape.by_email {
        user = user.and(Expr::col((user::Entity, user::Column::Email)).eq(next()));
    }
    query
        .column((user::Entity, user::Column::Id))
        .left_join(user::Entity, user);
    join_balance_and_server(query, shape, server_id);
}

/// What a lookup reads after the user, in the general form: the main and
/// bonus cents of the user's balance row on `server_id`, and unless the
/// shape is the general account the id of the user's project's server.
fn join_balance_and_server(query: &mut SelectStatement, shape: LookupShape, server_id: Value) {
    let balance_row = Expr::col((balance::Entity, balance::Column::UserId))
        .equals((user::Entity, user::Column::Id))
        .and(Expr::col((balance::Entity, balance::Column::ServerId)).eq(server_id.clone()));
    let project = Expr::col((user::Entity, user::Column::ProjectId));
    join_amounts_and_server(query, shape, balance_row, server_id, project);
}

/// The columns every lookup ends with: the main and bonus cents of the
/// balance row `balance_row` picks, and unless the shape is the general
/// account the id of server `server_id` of `project`. Left joins.
fn join_amounts_and_server(
    query: &mut SelectStatement,
    shape: LookupShape,
    balance_row: Expr,
    server_id: Value,
    project: Expr,
) {
    query
        .column((balance::Entity, balance::Column::MainCents))
        .column((balance::Entity, balance::Column::BonusCents))
        .left_join(balance::Entity, balance_row);
    if !shape.general {
        query
            .column((server::Entity, server::Column::Id))
            .left_join(
                server::Entity,
                Expr::col((server::Entity, server::Column::Id))
                    .eq(server_id)
                    .and(Expr::col((server::Entity, server::Column::ProjectId)).eq(project)),
            );
    }
}

/// `params`: project id, server id, then the user id and the e-mail when
/// the shape has them.
fn lookup_query(shape: LookupShape, params: Vec<Value>) -> SelectStatement {
    let mut params = params.into_iter();
    let mut next = || params.next().expect("lookup parameter");
    let (project_id, server_id) = (next(), next());
    if shape.by_id && !shape.by_email {
        return lookup_by_id_query(shape, project_id, server_id, next());
    }
    let mut query = Query::select();
    query
        .column((user::Entity, user::Column::Id))
        .from(user::Entity);
    join_balance_and_server(&mut query, shape, server_id);
    query.and_where(Expr::col((user::Entity, user::Column::ProjectId)).eq(project_id));
    if shape.by_id {
        query.and_where(Expr::col((user::Entity, user::Column::Id)).eq(next()));
    }
    if shape.by_email {
        query.and_where(Expr::col((user::Entity, user::Column::Email)).eq(next()));
    }
    query
}

/// [`lookup_query`] of a user named by id alone: [`join_by_id`] on the
/// project's own row (the token's project, so it exists).
fn lookup_by_id_query(
    shape: LookupShape,
    project_id: Value,
    server_id: Value,
    user_id: Value,
) -> SelectStatement {
    let mut query = Query::select();
    query.from(project::Entity);
    let project = (project::Entity.into_iden(), project::Column::Id.into_iden());
    join_by_id(&mut query, shape, project, server_id, user_id);
    query.and_where(Expr::col((project::Entity, project::Column::Id)).eq(project_id));
    query
}

/// The lookup of a user named by id alone, joined to `query` as
/// [`join_lookup`] does: the balance row first, by its key and the project
/// it carries (migration `m20261124_000004_balances_carry_their_project`),
/// and the user's row only when there is no balance row, to tell a user
/// with nothing yet (zero) from no such user of the project. A lookup of an
/// account with a balance thus reads one row of a large table instead of
/// two: the first column is `COALESCE(balance's user, (user subquery))`,
/// and SQLite, PostgreSQL and MariaDB evaluate the subquery only when the
/// balance row is missing. The columns are those of the general form.
fn join_by_id(
    query: &mut SelectStatement,
    shape: LookupShape,
    project: (DynIden, DynIden),
    server_id: Value,
    user_id: Value,
) {
    let project = || Expr::col(project.clone());
    let user = Query::select()
        .column((user::Entity, user::Column::Id))
        .from(user::Entity)
        .and_where(Expr::col((user::Entity, user::Column::ProjectId)).eq(project()))
        .and_where(Expr::col((user::Entity, user::Column::Id)).eq(user_id.clone()))
        .to_owned();
    query.expr(Func::coalesce([
        Expr::col((balance::Entity, balance::Column::UserId)),
        Expr::from(user),
    ]));
    let balance_row = Expr::col((balance::Entity, balance::Column::UserId))
        .eq(user_id)
        .and(Expr::col((balance::Entity, balance::Column::ServerId)).eq(server_id.clone()))
        .and(Expr::col((balance::Entity, balance::Column::ProjectId)).eq(project()));
    join_amounts_and_server(query, shape, balance_row, server_id, project());
}

async fn read<C: ConnectionTrait>(
    db: &C,
    user_id: i64,
    server_id: i64,
) -> Result<AccountBalance, DbErr> {
    let row = balance::Entity::find()
        .filter(balance::Column::UserId.eq(user_id))
        .filter(balance::Column::ServerId.eq(server_id))
        .one(db)
        .await?;
    Ok(match row {
        Some(row) => AccountBalance {
            main: cents(row.main_cents)?,
            bonus: cents(row.bonus_cents)?,
        },
        None => AccountBalance {
            main: Money::ZERO,
            bonus: Money::ZERO,
        },
    })
}

fn cents(value: i64) -> Result<Money, DbErr> {
    Money::from_cents(value)
        .map_err(|err| DbErr::Custom(format!("balance out of range in database: {err}")))
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
    if txn.get_database_backend() != DbBackend::MySql {
        // PostgreSQL and SQLite return the new value from the upsert itself.
        let mut stmt = stmt;
        stmt.returning_col(column);
        let row = txn
            .query_one(&stmt)
            .await?
            .ok_or_else(|| DbErr::RecordNotFound("balance row after upsert".into()))?;
        let after: i64 = row.try_get_by_index(0)?;
        return Ok((after - delta, after));
    }
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

/// Sets the main and/or bonus balance of a user on a server (`None` = the
/// general account). Every change is logged as a `balance_set` row with the
/// difference, in the same transaction, so the ledger always replays to the
/// current balance.
pub async fn set(
    db: &DatabaseConnection,
    user_id: i64,
    server_id: Option<i64>,
    main: Option<Money>,
    bonus: Option<Money>,
) -> Result<BalanceChange, AdminError> {
    if main.is_none() && bonus.is_none() {
        return Err(AdminError::Invalid(
            "give --main, --bonus or both".to_owned(),
        ));
    }
    let user = users::get(db, user_id).await?;
    let server_id = match server_id {
        None | Some(0) => balance::GENERAL_ACCOUNT,
        Some(id) => servers::get_in_project(db, user.project_id, id).await?.id,
    };
    let txn = begin_write(db).await?;
    let mut before = AccountBalance {
        main: Money::ZERO,
        bonus: Money::ZERO,
    };
    let mut after = before;
    for (column, target, kind) in [
        (balance::Column::MainCents, main, "main"),
        (balance::Column::BonusCents, bonus, "bonus"),
    ] {
        // Lock (or create) the row with a zero change, then move it to the target.
        let (current, _) = add_in_txn(&txn, user.project_id, user.id, server_id, column, 0).await?;
        let current = cents(current)?;
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
            .exec(&txn)
            .await?;
        operation_log::ActiveModel {
            kind: Set(operation_log::KIND_BALANCE_SET.to_owned()),
            order_ref: Set(None),
            user_id: Set(user.id),
            server_id: Set(server_id),
            balance_type: Set(kind.to_owned()),
            amount_cents: Set(delta),
            balance_before_cents: Set(current.cents()),
            balance_after_cents: Set(new.cents()),
            created_at: Set(now()),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(BalanceChange { before, after })
}

/// The balance of a user on a server, for the command line.
pub async fn get(
    db: &DatabaseConnection,
    user_id: i64,
    server_id: i64,
) -> Result<AccountBalance, AdminError> {
    Ok(read(db, user_id, server_id).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached lookup statements are exactly what the builder renders.
    #[test]
    fn cached_lookup_statements_match_the_builder() {
        for backend in [DbBackend::Sqlite, DbBackend::Postgres, DbBackend::MySql] {
            for (index, cache) in LOOKUP_SQL.iter().enumerate() {
                let shape = LookupShape {
                    by_id: index & 1 != 0,
                    by_email: index & 2 != 0,
                    general: index & 4 != 0,
                };
                assert_eq!(shape.index(), index);
                for (project, server, user) in [(1_i64, 0_i64, 5_i64), (2, 7, 9)] {
                    let mut params = vec![Value::from(project), Value::from(server)];
                    if shape.by_id {
                        params.push(Value::from(user));
                    }
                    if shape.by_email {
                        params.push(Value::from(format!("u{user}@example.com")));
                    }
                    let cached =
                        cache.statement(backend, params.clone(), |p| lookup_query(shape, p));
                    let fresh = backend.build(&lookup_query(shape, params));
                    assert_eq!(cached.sql, fresh.sql);
                    assert_eq!(cached.values, fresh.values);
                }
            }
        }
    }

    /// On SQLite every lookup statement, alone or in its token's statement
    /// (`tokens::auth_statement_with_lookup`), of every shape, reads the
    /// balance by the table's own key: one B-tree (migration
    /// `m20261124_000002_balances_keyed_by_account`), where it read the
    /// unique index and then the row by its rowid.
    #[tokio::test]
    async fn sqlite_lookups_read_balances_by_their_key() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("plans.db").display());
        let (db, project, user) = crate::service::testing::shop(&url, "plan@example.com").await;
        let backend = DbBackend::Sqlite;
        let mut checked = 0;
        for by_id in [false, true] {
            for email in [None, Some("plan@example.com".to_owned())] {
                for server_id in [0, 7] {
                    let request = LookupRequest {
                        who: UserRef {
                            user_id: by_id.then_some(user),
                            email: email.clone(),
                        },
                        server_id,
                    };
                    let Some((shape, params)) = lookup_params(&request) else {
                        continue;
                    };
                    let mut all = vec![Value::from(project)];
                    all.extend(params.clone());
                    let alone = LOOKUP_SQL[shape.index()]
                        .statement(backend, all, |params| lookup_query(shape, params));
                    let with_token = super::super::tokens::auth_statement_with_lookup(
                        backend,
                        "0".repeat(64),
                        shape,
                        params,
                    );
                    let by_id_alone = shape.by_id && !shape.by_email;
                    for (stmt, lazy_user) in [(alone, by_id_alone), (with_token, by_id_alone)] {
                        let plan = db
                            .query_all_raw(sea_orm::Statement::from_sql_and_values(
                                backend,
                                format!("EXPLAIN QUERY PLAN {}", stmt.sql),
                                stmt.values.map(|v| v.0).unwrap_or_default(),
                            ))
                            .await
                            .expect("plan");
                        let steps: Vec<String> = plan
                            .iter()
                            .map(|row| row.try_get_by_index(3).expect("plan detail"))
                            .collect();
                        if lazy_user {
                            // The user's row is read only in the subquery
                            // that runs when there is no balance row.
                            let step = |detail: &str| {
                                plan.iter()
                                    .find(|row| {
                                        row.try_get_by_index::<String>(3)
                                            .is_ok_and(|d| d.starts_with(detail))
                                    })
                                    .unwrap_or_else(|| panic!("{detail}: {steps:?}"))
                            };
                            let id = |row: &sea_orm::QueryResult, at| -> i64 {
                                row.try_get_by_index(at).expect("plan id")
                            };
                            let parent = id(step("SEARCH users"), 1);
                            let within = plan
                                .iter()
                                .find(|row| id(row, 0) == parent)
                                .and_then(|row| row.try_get_by_index::<String>(3).ok());
                            assert!(
                                within.is_some_and(|d| d.starts_with("CORRELATED SCALAR SUBQUERY")),
                                "{steps:?}"
                            );
                        }
                        let balance_steps: Vec<&String> =
                            steps.iter().filter(|s| s.contains("balances")).collect();
                        assert_eq!(
                            balance_steps,
                            [
                                &"SEARCH balances USING PRIMARY KEY (user_id=? AND server_id=?) \
                               LEFT-JOIN"
                                    .to_owned()
                            ],
                            "{steps:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 12, "three user forms, two servers, two statements");
    }
}
