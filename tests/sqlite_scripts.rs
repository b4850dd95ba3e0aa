//! `bench/sqlite/*.sql`, SQLite's own write ceiling in `bench/run`, hold
//! exactly the SQLite store's statements of one request's transaction, as
//! `bench/pgbench/*.sql` do for PostgreSQL: bench/sqlite_writes.py runs
//! them in a loop on one connection, binding what the store binds. This test
//! fails when the scripts and `store::sqlite` drift;
//! `MASTERPAY_WRITE_SQLITE_BENCH=1 cargo test --test sqlite_scripts` writes
//! them anew from the code.

use masterpay::store::sqlite::{
    COMPLETE_ORDER, CONVERGING_PASSES, CREDIT_MAIN, HELD_FRAMES, INSERT_ORDER, LOG_CREDIT,
    SUBSCRIBERS, WRITER_PRAGMAS, WalCheckpoints,
};

/// A script: its header, the write connection's set-up, how the store
/// checkpoints, then each named statement of the transaction in the order
/// the store runs them.
fn script(header: &str, statements: &[(&str, &str)]) -> String {
    let mut text = String::new();
    for line in header.lines() {
        text += &format!("-- {line}\n");
    }
    text += &format!("-- connection\n{WRITER_PRAGMAS}\n");
    let interval = WalCheckpoints::default().interval.as_millis();
    text += &format!("-- checkpoint interval ms: {interval}\n");
    text += &format!("-- checkpoint passes: {CONVERGING_PASSES}\n");
    text += &format!("-- checkpoint held frames: {HELD_FRAMES}\n");
    let all = [("begin", "BEGIN IMMEDIATE")]
        .iter()
        .chain(statements)
        .chain(&[("commit", "COMMIT")]);
    for (name, sql) in all {
        text += &format!("-- statement: {name}\n{sql};\n");
    }
    text
}

fn complete_script() -> String {
    script(
        "One POST /v2/payment/order/complete that completes a pending order, as the SQLite\n\
         store runs its transaction (a project without webhook endpoints, so no event is\n\
         recorded). Generated from src/store/sqlite.rs by tests/sqlite_scripts.rs;\n\
         bench/sqlite_writes.py runs it.",
        &[
            ("complete_order", COMPLETE_ORDER),
            ("credit_main", CREDIT_MAIN),
            ("log_credit", LOG_CREDIT),
            ("subscribers", SUBSCRIBERS),
        ],
    )
}

fn create_script() -> String {
    script(
        "One POST /v2/payment/order/create with an Idempotency-Key, as the SQLite store\n\
         runs its transaction (a project without webhook endpoints, so no event is\n\
         recorded). Generated from src/store/sqlite.rs by tests/sqlite_scripts.rs;\n\
         bench/sqlite_writes.py runs it.",
        &[
            ("insert_order", &INSERT_ORDER),
            ("subscribers", SUBSCRIBERS),
        ],
    )
}

#[test]
fn sqlite_bench_scripts_run_the_stores_statements() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/sqlite");
    for (file, expected) in [
        ("complete.sql", complete_script()),
        ("create.sql", create_script()),
    ] {
        let path = dir.join(file);
        if std::env::var_os("MASTERPAY_WRITE_SQLITE_BENCH").is_some() {
            std::fs::write(&path, &expected).expect("write the script");
        }
        let committed = std::fs::read_to_string(&path).expect("read the script");
        assert!(
            committed == expected,
            "{} is not the store's statements; write it anew with \
             MASTERPAY_WRITE_SQLITE_BENCH=1 cargo test --test sqlite_scripts",
            path.display()
        );
    }
}
