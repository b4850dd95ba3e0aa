//! Token reads on PostgreSQL, many in one statement: every v2 request's,
//! with a balance request's lookup joined.
//!
//! Every v2 request reads its token (`tokens::authenticate`); since step 25
//! a balance request's lookup is joined to that statement, so a request is
//! one statement. What a statement costs is mostly the statement itself
//! (the round trip, the wake-ups of the service and of PostgreSQL, the
//! executor's start), not its few index lookups: pgbench made 27 400 to
//! 30 400 balance statements a second at 64 clients, and 8 800 to 9 300
//! statements of 16 lookups each at 4 clients, 140 000 lookups a second
//! (docs/benchmarks.md, step 27). So the token reads of concurrent requests
//! queue (`service::batching`), and a runner reads up to [`MAX_BATCH`] of
//! them with one statement: the requests as a `VALUES` list, each
//! left-joined to its token, the token's project and permissions and, for a
//! balance request, the requested user, balance and server, exactly as the
//! single statement joins them, one row per request.
//!
//! What does not change: a request's token is read by a statement that
//! starts after the request arrived, so a token change holds from the next
//! request; the endpoint still checks everything itself and uses a lookup's
//! row only for exactly the lookup it validated (`balances::lookup`); a read
//! that finds a runner free goes at once, alone, as the single statement.
//! Reads of one shape (the token alone; or by id, e-mail or both, on the
//! general account or a server) share a statement; another shape waits for
//! the next one.

use sea_orm::{DbBackend, DbErr, QueryResult, Statement, Value};
use std::sync::OnceLock;

use super::{
    balances::{LookupRequest, LookupShape},
    batching::{Admission, BatchKind, Batcher, padded_size},
    tokens::{self, Permission},
};
use crate::db::Reader;

/// Most reads in one statement.
pub const MAX_BATCH: usize = 32;
/// Most statements in flight at once, per instance.
pub const MAX_RUNNING: usize = 2;

/// The queue of token reads waiting for a statement; one per instance.
pub type TokenReadQueue = Batcher<TokenReads>;

/// Token reads (with a balance request's lookup), as a kind of batched
/// request.
pub struct TokenReads;

/// One request's token read: the token's hash and, for a balance request,
/// the lookup it asks, with the lookup's statement shape and values
/// (`balances::lookup_params`) worked out once.
#[derive(Debug, Clone)]
pub struct TokenRead {
    token_hash: String,
    lookup: Option<Lookup>,
}

#[derive(Debug, Clone)]
struct Lookup {
    request: LookupRequest,
    shape: LookupShape,
    values: Vec<Value>,
}

impl TokenRead {
    /// The token alone.
    pub fn token(token_hash: String) -> TokenRead {
        TokenRead {
            token_hash,
            lookup: None,
        }
    }

    /// The token with `request`'s lookup joined, of the `shape` and `values`
    /// `balances::lookup_params` gives it.
    pub(crate) fn with_lookup(
        token_hash: String,
        request: LookupRequest,
        shape: LookupShape,
        values: Vec<Value>,
    ) -> TokenRead {
        TokenRead {
            token_hash,
            lookup: Some(Lookup {
                request,
                shape,
                values,
            }),
        }
    }

    /// The lookup asked, if any.
    pub fn into_request(self) -> Option<LookupRequest> {
        self.lookup.map(|lookup| lookup.request)
    }

    fn shape(&self) -> Option<LookupShape> {
        self.lookup.as_ref().map(|lookup| lookup.shape)
    }
}

/// The index of `shape` among the statements (the token alone last).
fn shape_index(shape: Option<LookupShape>) -> usize {
    shape.map_or(LookupShape::COUNT, LookupShape::index)
}

/// The row of the token's statement (`tokens::auth_statement`'s columns,
/// then those the lookup joins, `tokens::auth_statement_with_lookup`),
/// `None` when no token has that hash, or the error of the statement.
pub type ReadOutcome = Result<Option<QueryResult>, DbErr>;

impl BatchKind for TokenReads {
    type Request = TokenRead;
    type Outcome = ReadOutcome;
    const MAX_BATCH: usize = MAX_BATCH;
    const MAX_RUNNING: usize = MAX_RUNNING;

    /// One shape per statement.
    fn admit(batch: &[&TokenRead], read: &TokenRead) -> Admission {
        match batch.first() {
            Some(first) if shape_index(first.shape()) != shape_index(read.shape()) => {
                Admission::Later
            }
            _ => Admission::Join,
        }
    }

    /// Never asked: [`TokenReads::admit`] lets no read ride along.
    fn rider_outcome(leader: &ReadOutcome) -> ReadOutcome {
        match leader {
            Err(err) => Err(err.clone()),
            Ok(_) => Err(DbErr::Custom("a token read rode along".into())),
        }
    }

    fn failed(outcome: &ReadOutcome) -> bool {
        outcome.is_err()
    }

    async fn run(statements: &Reader, reads: &[&TokenRead]) -> Vec<ReadOutcome> {
        read_batch(statements, reads).await
    }
}

impl Batcher<TokenReads> {
    /// The token row of `read`, with its lookup joined, read together with
    /// other requests' on PostgreSQL; and the lookup it asked.
    pub async fn read(
        self: &std::sync::Arc<Self>,
        statements: &Reader,
        read: TokenRead,
    ) -> (ReadOutcome, Option<LookupRequest>) {
        let mut outcomes = self.enqueue(statements, std::slice::from_ref(&read));
        let outcome = outcomes.pop().expect("one outcome per read");
        let outcome = outcome
            .await
            .unwrap_or_else(|_| Err(DbErr::Custom("the read was not run".into())));
        (outcome, read.into_request())
    }
}

/// Reads `reads` (one shape) with one statement; one outcome each, in
/// their order. One read alone is the single statement (step 25's for a
/// balance request).
async fn read_batch(statements: &Reader, reads: &[&TokenRead]) -> Vec<ReadOutcome> {
    if let [read] = reads {
        let hash = read.token_hash.clone();
        let stmt = match &read.lookup {
            None => tokens::auth_statement(DbBackend::Postgres, hash),
            Some(lookup) => tokens::auth_statement_with_lookup(
                DbBackend::Postgres,
                hash,
                lookup.shape,
                lookup.values.clone(),
            ),
        };
        return vec![statements.autocommit_one(stmt).await];
    }
    let shape = reads[0].shape();
    let size = padded_size(reads.len(), MAX_BATCH);
    let mut values: Vec<Value> = Permission::ALL
        .iter()
        .map(|permission| Value::from(permission.as_str()))
        .collect();
    for read in reads {
        values.push(Value::from(read.token_hash.as_str()));
        if let Some(lookup) = &read.lookup {
            values.extend(lookup.values.iter().cloned());
        }
    }
    // Padding rows of NULLs, which find no token.
    for _ in reads.len()..size {
        values.push(Value::String(None));
        if let Some(shape) = shape {
            values.push(Value::BigInt(None));
            if shape.by_id() {
                values.push(Value::BigInt(None));
            }
            if shape.by_email() {
                values.push(Value::String(None));
            }
        }
    }
    let stmt = Statement::from_sql_and_values(DbBackend::Postgres, batch_sql(shape, size), values);
    let rows = match statements.autocommit_all(stmt).await {
        Ok(rows) => rows,
        Err(err) => return reads.iter().map(|_| Err(err.clone())).collect(),
    };
    // One row per read (every join is on a unique key); the index is the
    // last column. A read without its row is answered with an error, never
    // with another read's row.
    let index_column = shape_columns(shape) - 1;
    let mut outcomes: Vec<ReadOutcome> = reads
        .iter()
        .map(|_| Err(DbErr::Custom("no row for a balance read".into())))
        .collect();
    for row in rows {
        let index = row
            .try_get_by_index::<i32>(index_column)
            .ok()
            .and_then(|index| usize::try_from(index).ok());
        let Some(outcome) = index.and_then(|index| outcomes.get_mut(index)) else {
            continue;
        };
        // A token id of NULL: no token has the hash (the single statement
        // returns no row then).
        *outcome = match row.try_get_by_index::<Option<i64>>(0) {
            Ok(Some(_)) => Ok(Some(row)),
            Ok(None) => Ok(None),
            Err(err) => Err(err),
        };
    }
    outcomes
}

/// How many columns a row of [`batch_sql`] has for `shape`: the token's,
/// one per permission, the lookup's (user, main, bonus, and the server
/// unless it is the general account), and the read's index.
fn shape_columns(shape: Option<LookupShape>) -> usize {
    let lookup = shape.map_or(0, |shape| 3 + usize::from(!shape.general()));
    tokens::AUTH_PERMISSION_COLUMNS + Permission::ALL.len() + lookup + 1
}

/// The statement for `count` reads of `shape` (2 ..= [`MAX_BATCH`]), built
/// once per shape and count (only the padded sizes are used,
/// `batching::padded_size`). Its columns are those of
/// `tokens::auth_statement`, then, with a lookup, those
/// `tokens::auth_statement_with_lookup` adds, in the same order, then the
/// read's index. Parameters: the name of each of [`Permission::ALL`], then
/// per read its token's hash and, with a lookup, the server id, and the
/// user id and e-mail when the shape has them (`balances::lookup_params`).
fn batch_sql(shape: Option<LookupShape>, count: usize) -> &'static str {
    debug_assert!((2..=MAX_BATCH).contains(&count), "batch of {count}");
    static SQL: [OnceLock<Vec<String>>; LookupShape::COUNT + 1] =
        [const { OnceLock::new() }; LookupShape::COUNT + 1];
    let all = SQL[shape_index(shape)].get_or_init(|| {
        (0..=MAX_BATCH)
            .map(|count| build_batch_sql(shape, count))
            .collect()
    });
    all[count.min(MAX_BATCH)].as_str()
}

fn build_batch_sql(shape: Option<LookupShape>, count: usize) -> String {
    let permissions = Permission::ALL.len();
    // Each value is cast to its column's type, so that the statement means
    // the same however its parameters are sent.
    let mut columns = vec![("\"token_hash\"", "text")];
    if let Some(shape) = shape {
        columns.push(("\"server_id\"", "int8"));
        if shape.by_id() {
            columns.push(("\"user_id\"", "int8"));
        }
        if shape.by_email() {
            columns.push(("\"email\"", "text"));
        }
    }
    let rows: Vec<String> = (0..count)
        .map(|index| {
            let first = permissions + 1 + index * columns.len();
            let params: Vec<String> = columns
                .iter()
                .enumerate()
                .map(|(i, (_, ty))| format!("${}::{ty}", first + i))
                .collect();
            format!("({index}, {})", params.join(", "))
        })
        .collect();
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let granted: Vec<String> = (1..=permissions)
        .map(|i| {
            format!(
                "(SELECT COUNT(*) FROM \"token_permissions\" \
                 WHERE \"token_permissions\".\"token_id\" = \"app_tokens\".\"id\" \
                 AND \"token_permissions\".\"permission\" = ${i})"
            )
        })
        .collect();
    let (lookup_columns, lookup_joins) = match shape {
        None => (String::new(), String::new()),
        Some(shape) => lookup_sql(shape),
    };
    format!(
        "WITH \"r\" (\"idx\", {names}) AS (VALUES {rows}) \
         SELECT \"app_tokens\".\"id\", \"app_tokens\".\"project_id\", \"app_tokens\".\"active\", \
         \"app_tokens\".\"last_used_at\", \"projects\".\"active\", {granted}{lookup_columns}, \
         \"r\".\"idx\" \
         FROM \"r\" \
         LEFT JOIN \"app_tokens\" ON \"app_tokens\".\"token_hash\" = \"r\".\"token_hash\" \
         LEFT JOIN \"projects\" ON \"projects\".\"id\" = \"app_tokens\".\"project_id\"{lookup_joins}",
        names = names.join(", "),
        rows = rows.join(", "),
        granted = granted.join(", "),
    )
}

/// The columns and joins a lookup of `shape` adds (`balances::join_lookup`;
/// by user id alone, the balance row first and the user only when there is
/// none, as `balances::join_by_id`).
fn lookup_sql(shape: LookupShape) -> (String, String) {
    if shape.by_id() && !shape.by_email() {
        let (server_column, server_join) = server_sql(shape, "\"app_tokens\".\"project_id\"");
        return (
            format!(
                ", COALESCE(\"balances\".\"user_id\", (SELECT \"users\".\"id\" FROM \"users\" \
                 WHERE \"users\".\"project_id\" = \"app_tokens\".\"project_id\" \
                 AND \"users\".\"id\" = \"r\".\"user_id\")), \
                 \"balances\".\"main_cents\", \"balances\".\"bonus_cents\"{server_column}"
            ),
            format!(
                " LEFT JOIN \"balances\" ON \"balances\".\"user_id\" = \"r\".\"user_id\" \
                 AND \"balances\".\"server_id\" = \"r\".\"server_id\" \
                 AND \"balances\".\"project_id\" = \"app_tokens\".\"project_id\"{server_join}"
            ),
        );
    }
    let mut user = String::from("\"users\".\"project_id\" = \"app_tokens\".\"project_id\"");
    if shape.by_id() {
        user.push_str(" AND \"users\".\"id\" = \"r\".\"user_id\"");
    }
    if shape.by_email() {
        user.push_str(" AND \"users\".\"email\" = \"r\".\"email\"");
    }
    let (server_column, server_join) = server_sql(shape, "\"users\".\"project_id\"");
    (
        format!(
            ", \"users\".\"id\", \"balances\".\"main_cents\", \"balances\".\"bonus_cents\"{server_column}"
        ),
        format!(
            " LEFT JOIN \"users\" ON {user} \
             LEFT JOIN \"balances\" ON \"balances\".\"user_id\" = \"users\".\"id\" \
             AND \"balances\".\"server_id\" = \"r\".\"server_id\"{server_join}"
        ),
    )
}

/// The server column and join a lookup of `shape` adds unless it is the
/// general account: server `r.server_id` of `project` (an SQL expression).
fn server_sql(shape: LookupShape, project: &str) -> (&'static str, String) {
    if shape.general() {
        return ("", String::new());
    }
    (
        ", \"servers\".\"id\"",
        format!(
            " LEFT JOIN \"servers\" ON \"servers\".\"id\" = \"r\".\"server_id\" \
             AND \"servers\".\"project_id\" = {project}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::balances::{self, UserRef};

    fn read(user_id: Option<i64>, email: Option<&str>, server_id: i64) -> TokenRead {
        let request = LookupRequest {
            who: UserRef {
                user_id,
                email: email.map(str::to_owned),
            },
            server_id,
        };
        let (shape, values) = balances::lookup_params(&request).expect("a user");
        TokenRead::with_lookup("h".into(), request, shape, values)
    }

    #[test]
    fn a_statement_holds_one_shape() {
        let by_id = read(Some(1), None, 0);
        let batch = [&by_id];
        assert!(matches!(
            TokenReads::admit(&batch, &read(Some(2), None, 0)),
            Admission::Join
        ));
        for other in [
            read(Some(2), None, 5),
            read(None, Some("a@example.com"), 0),
            read(Some(2), Some("a@example.com"), 0),
            TokenRead::token("h".into()),
        ] {
            assert!(matches!(
                TokenReads::admit(&batch, &other),
                Admission::Later
            ));
        }
        let alone = TokenRead::token("h".into());
        assert!(matches!(
            TokenReads::admit(&[&alone], &TokenRead::token("g".into())),
            Admission::Join
        ));
    }

    #[test]
    fn the_statement_numbers_its_parameters_per_read() {
        let shape = read(Some(1), Some("a@example.com"), 3).shape();
        let sql = batch_sql(shape, 2);
        assert!(sql.contains(
            "VALUES (0, $3::text, $4::int8, $5::int8, $6::text), (1, $7::text, $8::int8, $9::int8, $10::text)"
        ));
        assert!(!sql.contains("$11"));
        assert!(sql.contains("\"servers\".\"id\", \"r\".\"idx\""));
        assert_eq!(shape_columns(shape), 12);
        let alone = batch_sql(None, 2);
        assert!(alone.contains("VALUES (0, $3::text), (1, $4::text)"));
        assert!(!alone.contains("users"));
        assert_eq!(shape_columns(None), 8);
    }
}
