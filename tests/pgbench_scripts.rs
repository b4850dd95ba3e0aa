//! `bench/pgbench/*.sql`, the database's own ceiling in `bench/run`, run
//! exactly the service's PostgreSQL statements for one request: the scripts
//! are the statements of `store::postgres` with pgbench's variables in place
//! of the bound parameters (a group of one). This test fails when the two
//! drift; `MASTERPAY_WRITE_PGBENCH=1 cargo test --test pgbench_scripts`
//! writes the scripts anew from the code.

use masterpay::store::postgres::{COMPLETE_ORDERS, CREDIT_AND_LOG, INSERT_ORDERS, READ_TOKENS};

/// `sql` with each `$N` replaced by `values[N - 1]`, ended by `end`.
fn bound(sql: &str, values: &[&str], end: &str) -> String {
    let mut text = sql.to_owned();
    // From the last, so that `$1` never eats the start of `$10`.
    for (at, value) in values.iter().enumerate().rev() {
        text = text.replace(&format!("${}", at + 1), value);
    }
    format!("{text}{end}\n")
}

fn balance_script() -> String {
    let mut script = String::from(
        "-- One GET /v2/master-account/balance (server_id 0, by user_id) as the service\n\
         -- runs it on PostgreSQL: the token with the account read in the same statement,\n\
         -- a group of one. Generated from src/store/postgres by tests/pgbench_scripts.rs;\n\
         -- bench/run runs it with pgbench -M prepared (users, tokhash, zero from -D).\n\
         \\set uid random(1, :users)\n",
    );
    script += &bound(
        READ_TOKENS,
        &[
            "ARRAY[:tokhash]",
            "ARRAY[:uid]",
            "ARRAY[NULL]",
            "ARRAY[:zero]",
        ],
        ";",
    );
    script
}

fn complete_script() -> String {
    let mut script = String::from(
        "-- One POST /v2/payment/order/complete that completes a pending order, as the\n\
         -- service runs it on PostgreSQL: the token read, then the completion's\n\
         -- transaction (status update; credit and log row), a group of one. Generated\n\
         -- from src/store/postgres by tests/pgbench_scripts.rs; bench/run runs it with\n\
         -- pgbench -M prepared, each transaction taking a distinct order of\n\
         -- base+1 .. base+pool (a permutation, like complete.lua).\n\
         \\set g :k * :nclients + :client_id\n\
         \\set k :k + 1\n\
         \\set oid :base + (:g * 1000003) % :pool + 1\n",
    );
    script += &bound(
        READ_TOKENS,
        &[
            "ARRAY[:tokhash]",
            "ARRAY[NULL]",
            "ARRAY[NULL]",
            "ARRAY[NULL]",
        ],
        ";",
    );
    script += "BEGIN;\n";
    script += &bound(
        COMPLETE_ORDERS,
        &[
            "ARRAY['Order:' || lpad(:oid::text, 10, '0')]",
            "ARRAY[:project]",
            "ARRAY[:psys]",
            "ARRAY['bench_' || :g::text]",
            ":completed",
            "now()",
            ":pending",
        ],
        " \\gset",
    );
    script += &bound(
        CREDIT_AND_LOG,
        &[
            "ARRAY[:idx]",
            "ARRAY[:order_ref]",
            "ARRAY[:user_id]",
            "ARRAY[:server_id]",
            "ARRAY[:amount_cents]",
            "ARRAY[:project_id]",
            ":kind",
            "now()",
        ],
        ";",
    );
    script += "COMMIT;\n";
    script
}

fn create_script() -> String {
    let key = "lpad(:kg::text, 12, '0') || '-0000-4000-9000-' || lpad(:round::text, 8, '0')";
    let mut script = String::from(
        "-- One POST /v2/payment/order/create with an Idempotency-Key (a random user,\n\
         -- server_id 0, amount 10.25) as the service runs it on PostgreSQL: the token\n\
         -- read, then the order's insert with the user resolved in it (and its event\n\
         -- recorded, which for the bench's project without endpoints records none), each\n\
         -- a group of one. Generated from src/store/postgres by tests/pgbench_scripts.rs; bench/run\n\
         -- runs it with pgbench -M prepared, each transaction with a key and an order id\n\
         -- of its own (request count * clients + client, scattered by a large prime, and\n\
         -- the round; the keys' \"9000\" tells them from create.lua's \"8000\").\n\
         \\set uid random(1, :users)\n\
         \\set g :k * :nclients + :client_id\n\
         \\set k :k + 1\n\
         \\set kg (:g * 1000003) % 1000000000000\n\
         \\set oid (:g * 1000003) % 100000000 * 1000 + :round\n",
    );
    script += &bound(
        READ_TOKENS,
        &[
            "ARRAY[:tokhash]",
            "ARRAY[NULL]",
            "ARRAY[NULL]",
            "ARRAY[NULL]",
        ],
        ";",
    );
    script += &bound(
        INSERT_ORDERS,
        &[
            "ARRAY['Order:' || lpad(:oid::text, 11, '0')]",
            "ARRAY[:project]",
            "ARRAY[:uid]",
            "ARRAY[NULL]",
            "ARRAY[:zero]",
            "ARRAY[:cents]",
            "ARRAY[:psys]",
            &format!("ARRAY[{key}]"),
            "ARRAY[:reqhash]",
            ":pending",
            "now()",
            "ARRAY['msg_' || md5(:g::text)]",
            "ARRAY['{\"user_id\":']",
            "ARRAY['}']",
            "'order.created'",
            ":pending",
        ],
        ";",
    );
    script
}

#[test]
fn pgbench_scripts_run_the_services_statements() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/pgbench");
    for (file, expected) in [
        ("balance.sql", balance_script()),
        ("complete.sql", complete_script()),
        ("create.sql", create_script()),
    ] {
        let path = dir.join(file);
        if std::env::var_os("MASTERPAY_WRITE_PGBENCH").is_some() {
            std::fs::write(&path, &expected).expect("write the script");
        }
        let committed = std::fs::read_to_string(&path).expect("read the script");
        assert!(
            committed == expected,
            "{} is not the service's statements; write it anew with \
             MASTERPAY_WRITE_PGBENCH=1 cargo test --test pgbench_scripts",
            path.display()
        );
    }
}
