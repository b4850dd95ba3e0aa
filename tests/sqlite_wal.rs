//! The SQLite store's WAL checkpoints (src/store/sqlite.rs): its write
//! connections never checkpoint inside a commit, its own thread copies the
//! WAL into the database, and a write that leaves the `-wal` file past its
//! bound empties it. These are properties of SQLite's file layout, which
//! PostgreSQL and MariaDB do not have, so they run on SQLite alone; the
//! writes from the command line while a server runs are tested on every
//! backend in tests/cli.rs.

mod common;

use std::{path::PathBuf, str::FromStr, time::Duration};

use common::{Backend, TestDatabase, test_pool};
use masterpay::{
    service::{admin_audit::Actor, projects, users},
    store::{
        NewOrder, OrderInsert, Store, database,
        sqlite::{SqliteStore, WalCheckpoints},
    },
};
use sea_orm::{ConnectionTrait, sqlx::sqlite::SqliteConnectOptions};

/// The database file of a SQLite URL.
fn file_of(url: &str) -> PathBuf {
    SqliteConnectOptions::from_str(url)
        .expect("a SQLite URL")
        .get_filename()
        .to_path_buf()
}

fn wal_size(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |meta| meta.len())
}

/// A migrated SQLite file with a project and a user, and the one store of
/// it (no other store's checkpoints run beside the test's).
struct WalTest {
    db: sea_orm::DatabaseConnection,
    store: SqliteStore,
    file: PathBuf,
    project_id: i64,
    user: i64,
    // Last, so that the file is removed after the store is dropped.
    _database: TestDatabase,
}

impl WalTest {
    async fn open(checkpoints: WalCheckpoints) -> WalTest {
        let database = TestDatabase::create(Backend::Sqlite).await;
        let db = database::connect(&database.url, &test_pool())
            .await
            .expect("connect");
        database::migrate(&db).await.expect("migrate");
        let project_id = projects::create(&db, &Actor::CommandLine, "Test project")
            .await
            .expect("project")
            .id;
        let email = "alice@example.com".parse().expect("an e-mail address");
        let user = users::create(&db, &Actor::CommandLine, project_id, &email)
            .await
            .expect("user")
            .id;
        let store =
            SqliteStore::with_checkpoints(&database.url, Duration::from_secs(5), checkpoints)
                .expect("store");
        WalTest {
            db,
            store,
            file: file_of(&database.url),
            project_id,
            user,
            _database: database,
        }
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db
            .query_one_raw(sea_orm::Statement::from_string(
                self.db.get_database_backend(),
                sql,
            ))
            .await
            .expect("query")
            .expect("a row")
            .try_get_by_index::<i64>(0)
            .expect("a number")
    }

    async fn insert(&self, n: usize) {
        let inserted = self.store.insert_order(&self.order(n)).await;
        assert!(
            matches!(inserted, Ok(OrderInsert::Inserted { .. })),
            "{inserted:?}"
        );
    }

    fn order(&self, n: usize) -> NewOrder {
        NewOrder {
            order_id: format!("Order:wal{n:08}"),
            project_id: self.project_id,
            user_id: Some(self.user),
            email: None,
            server_id: 0,
            amount_cents: 1_025,
            payment_system: "cstm:paygate".into(),
            // A key and a hash make each row (and its index entries) as
            // large as the API's orders.
            idempotency_key: Some(format!("{n:012}-0000-4000-8000-000000000000")),
            request_hash: Some(format!("{n:064}")),
            audit: None,
        }
    }
}

#[tokio::test]
async fn the_pools_connections_never_checkpoint_inside_a_commit() {
    let t = WalTest::open(WalCheckpoints::default()).await;
    assert_eq!(t.count("PRAGMA wal_autocheckpoint").await, 0);
}

#[tokio::test]
async fn a_write_past_the_bound_empties_the_wal_so_it_stays_under_it() {
    let bound = 64 * 1024;
    // No PASSIVE checkpoint during the test: the bound alone holds the WAL.
    let t = WalTest::open(WalCheckpoints {
        interval: Duration::from_secs(3600),
        bound,
    })
    .await;
    let (mut largest, mut emptied, mut before) = (0, 0, wal_size(&t.file));
    for n in 0..400 {
        t.insert(n).await;
        let after = wal_size(&t.file);
        assert!(
            after <= bound,
            "after write {n} the WAL holds {after} bytes"
        );
        largest = largest.max(after);
        if after < before {
            emptied += 1;
        }
        before = after;
    }
    // 400 orders write far more than the bound: it was reached and the WAL
    // emptied again and again, not merely never filled.
    assert!(
        emptied >= 3,
        "emptied {emptied} times, at most {largest} bytes"
    );
    assert_eq!(t.count("SELECT COUNT(*) FROM payment_orders").await, 400);
}

#[tokio::test]
async fn the_stores_thread_copies_the_wal_into_the_database() {
    let t = WalTest::open(WalCheckpoints {
        interval: Duration::from_millis(20),
        bound: u64::MAX,
    })
    .await;
    let settled = std::fs::metadata(&t.file).expect("database file").len();
    for n in 0..200 {
        t.insert(n).await;
    }
    // No connection checkpoints inside its commits, so the database file
    // grows only when the store's thread copies the WAL into it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let grown = loop {
        let len = std::fs::metadata(&t.file).expect("database file").len();
        if len > settled + 100 * 1024 || std::time::Instant::now() > deadline {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        grown > settled + 100 * 1024,
        "the database file stayed at {grown} bytes (from {settled})"
    );
}
