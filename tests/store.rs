//! The `Store` trait's conformance suite: every operation of the request
//! path's storage seam (src/store/mod.rs) run directly against each
//! backend's store, opened as the application opens it, and checked against
//! what the trait and its row types promise. The HTTP tests see the three
//! backends only through the answers; here a change to one backend's SQL
//! meets the same checklist as the other two.
//!
//! The data is seeded with the service functions the command line runs.
//! A case that submits operations at once runs on the test's one thread
//! (`#[tokio::test]`): every operation is then waiting before PostgreSQL's
//! store takes its next group, so there they reach the database together.

mod common;

use std::collections::BTreeMap;

use chrono::Duration;
use common::{Backend, StoreTest};
use entity::{
    balance,
    operation_log::{self, BalanceType, LogKind},
    payment_order::{self, OrderStatus},
    webhook_delivery::{self, DeliveryStatus},
    webhook_event::{self, EventType},
};
use futures::future::join_all;
use masterpay::{
    service::{
        admin_audit::Actor,
        balances, orders, projects, servers,
        tokens::{self, Permission},
        users::{self, UserRef},
        webhook_endpoints,
    },
    store::{
        AccountKey, AccountRow, AuditRow, CompleteError, CompletedOrder, Completion, NewOrder,
        OrderInsert, TokenRow,
    },
};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};

// Each listed `async fn(StoreTest)` runs on every backend, on a store
// without a server in front; the at-once cases on one thread.
on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    common::run_store: [
        // read_token
        an_unknown_hash_reads_no_token,
        a_token_reads_with_its_permissions_and_states,
        a_token_whose_project_is_gone_reads_without_a_project,
        the_account_asked_is_read_with_the_token,
        a_reissued_tokens_old_value_reads_with_its_grace_and_its_expiry,
        // insert_order
        an_order_is_inserted_for_its_user_by_id_by_email_or_both,
        an_order_for_a_user_not_of_the_project_is_not_inserted,
        an_order_for_a_server_not_of_the_project_is_not_inserted,
        an_order_whose_key_or_order_id_is_taken_is_not_inserted,
        // complete
        a_completion_credits_its_order_once_and_logs_it,
        a_completed_order_is_not_credited_again,
        a_cancelled_order_is_never_credited,
        a_completion_finds_only_an_order_of_its_project_and_payment_system,
        racing_completions_of_one_order_credit_it_once,
        a_credit_past_the_balance_ceiling_is_refused_and_changes_nothing,
        an_operators_change_commits_with_its_audit_row_and_a_refusal_writes_none,
        // events recorded with the changes
        an_insert_records_order_created_for_its_subscribed_endpoints_only,
        a_completion_records_order_completed_with_the_credited_account,
        a_refused_or_repeated_change_records_no_event,
        // record_token_use
        a_token_use_is_recorded,
        a_use_is_recorded_on_the_value_used,
    ],
    #[tokio::test]
    common::run_store: [
        inserts_at_once_naming_one_order_id_insert_one_order,
        inserts_at_once_with_one_idempotency_key_insert_one_order,
        completions_at_once_of_two_accounts_are_credited_in_turn,
        changes_at_once_record_one_event_each,
    ],
);

/// The payment system of the test's orders.
const PS: &str = "cstm:paygate";

// ---- read_token ----

async fn an_unknown_hash_reads_no_token(t: StoreTest) {
    let (_, known) = t.token(&Permission::ALL).await;
    let unknown = tokens::hash("no token of this database");
    assert_ne!(unknown, known);
    assert!(t.read(&unknown, None).await.is_none());
    // Nor with an account asked: nothing of the account is read either.
    let alice = t.user("alice@example.com").await;
    let key = account(Some(alice), None, 0);
    assert!(t.read(&unknown, Some(&key)).await.is_none());
}

/// The store reads a token whatever its state and its project's: refusing a
/// disabled one is the service's rule, which needs the flags as stored.
async fn a_token_reads_with_its_permissions_and_states(t: StoreTest) {
    let (full_id, full) = t.token(&Permission::ALL).await;
    let (one_id, one) = t.token(&[Permission::Balance]).await;
    let (_, none) = t.token(&[]).await;

    let row = t.read(&full, None).await.expect("token");
    assert_eq!(
        (row.token_id, row.project_id, row.active, row.project_active),
        (full_id, t.project_id, true, Some(true))
    );
    assert_eq!(row.last_used_at, None, "never used");
    assert_eq!(sorted(row.permissions), names(&Permission::ALL));
    assert!(row.account.is_none(), "no account asked, none read");
    let row = t.read(&one, None).await.expect("token");
    assert_eq!(row.permissions, names(&[Permission::Balance]));
    let row = t.read(&none, None).await.expect("token");
    assert_eq!(row.permissions, Vec::<String>::new());

    tokens::set_active(&t.db, &Actor::CommandLine, one_id, false)
        .await
        .expect("disable the token");
    let row = t.read(&one, None).await.expect("a disabled token is read");
    assert_eq!(
        (row.token_id, row.active, row.project_active),
        (one_id, false, Some(true))
    );
    assert_eq!(row.permissions, names(&[Permission::Balance]));

    let closed = t.project("Closed").await;
    let (closed_id, of_closed) = t.token_in(closed, &[Permission::Complete]).await;
    projects::set_active(&t.db, &Actor::CommandLine, closed, false)
        .await
        .expect("disable the project");
    let row = t.read(&of_closed, None).await.expect("token");
    assert_eq!(
        (row.token_id, row.project_id, row.active, row.project_active),
        (closed_id, closed, true, Some(false))
    );
    assert_eq!(row.permissions, names(&[Permission::Complete]));
    // The other project's token is as it was.
    let row = t.read(&full, None).await.expect("token");
    assert_eq!((row.active, row.project_active), (true, Some(true)));
}

/// Both values of a token in its grace period read as the token; the old
/// one carries the end of its grace, and both the token's expiry. Refusing
/// a value past its grace or an expired token is the service's rule.
async fn a_reissued_tokens_old_value_reads_with_its_grace_and_its_expiry(t: StoreTest) {
    let (id, old) = t.token(&[Permission::Balance]).await;
    let expiry = masterpay::store::now() + Duration::days(30);
    let edit = tokens::TokenEdit {
        expires_at: Some(Some(expiry)),
        ..Default::default()
    };
    tokens::edit(&t.db, &Actor::CommandLine, id, edit)
        .await
        .unwrap();
    let new = t.reissue(id, Duration::hours(1)).await;
    let until = tokens::get_info(&t.db, id)
        .await
        .unwrap()
        .token
        .previous_until;
    assert!(until.is_some());
    let current = t.read(&new, None).await.expect("the new value");
    let previous = t.read(&old, None).await.expect("the old value");
    assert_eq!((current.token_id, previous.token_id), (id, id));
    assert_eq!((current.grace_until, previous.grace_until), (None, until));
    assert_eq!(
        (current.expires_at, previous.expires_at),
        (Some(expiry), Some(expiry))
    );
    // With an account, the old value reads it as the new one does.
    let alice = t.user("alice@example.com").await;
    t.set_balance(alice, 0, "2.50", "0").await;
    let key = account(Some(alice), None, 0);
    let by_old = t.read(&old, Some(&key)).await.expect("token").account;
    let by_new = t.read(&new, Some(&key)).await.expect("token").account;
    assert_eq!(by_old, by_new);
    assert_eq!(by_new.and_then(|a| a.main_cents), Some(250));
    tokens::end_grace(&t.db, &Actor::CommandLine, id)
        .await
        .unwrap();
    assert!(
        t.read(&old, None).await.is_none(),
        "no longer a value of the token"
    );
}

/// `project_active` is `None` when the project row is gone.
async fn a_token_whose_project_is_gone_reads_without_a_project(t: StoreTest) {
    let gone = t.project("Gone").await;
    let (token_id, token) = t.token_in(gone, &[Permission::Balance]).await;
    let alice = t.user("alice@example.com").await;
    t.set_balance(alice, 0, "1", "1").await;
    t.delete_project_despite_its_tokens(gone).await;

    let row = t
        .read(&token, None)
        .await
        .expect("the token is still there");
    assert_eq!(
        (row.token_id, row.project_id, row.active, row.project_active),
        (token_id, gone, true, None)
    );
    assert_eq!(row.permissions, names(&[Permission::Balance]));
    // Of a project that is gone, no account is found: not even another
    // project's user, server or balance.
    let key = account(Some(alice), Some("alice@example.com"), 0);
    let row = t.read(&token, Some(&key)).await.expect("token");
    assert_eq!(row.account, Some(found(None, None, false, None)));
}

/// Each shape of account a balance request can name, read in the token's
/// statement: what was found of it in the token's project only.
async fn the_account_asked_is_read_with_the_token(t: StoreTest) {
    let (token_id, token) = t.token(&[Permission::Balance]).await;
    let alice = t.user("alice@example.com").await;
    let bob = t.user("bob@example.com").await;
    let dave = t.user("dave@example.com").await;
    let eu = t.server("eu-1").await;
    t.set_balance(alice, 0, "1250.50", "25").await;
    t.set_balance(alice, eu, "7.01", "0").await;
    // A row of zeros is a row: it reads as zeros, not as none.
    t.set_balance(dave, 0, "0", "0").await;
    let other = t.project("Other").await;
    let carol = t.user_in(other, "carol@example.com").await;
    t.set_balance(carol, 0, "9", "9").await;
    let foreign = t.server_in(other, "us-1").await;
    let (no_user, no_server) = (carol + 1000, foreign + 1000);
    let alices = Some((125_050, 2_500));
    let alices_on_eu = Some((701, 0));

    // Server 0 is the general account, no row of `servers`: it is never
    // found as a server (the service knows 0). The balance is the user's by
    // id when an id is given, else by e-mail.
    let cases = [
        (
            "by id",
            account(Some(alice), None, 0),
            found(Some(alice), None, false, alices),
        ),
        (
            "by e-mail",
            account(None, Some("alice@example.com"), 0),
            found(None, Some(alice), false, alices),
        ),
        (
            "by id and e-mail of one user",
            account(Some(alice), Some("alice@example.com"), 0),
            found(Some(alice), Some(alice), false, alices),
        ),
        (
            "by id and e-mail of two users",
            account(Some(alice), Some("bob@example.com"), 0),
            found(Some(alice), Some(bob), false, alices),
        ),
        (
            "by id and e-mail of two users, the id's without a balance row",
            account(Some(bob), Some("alice@example.com"), 0),
            found(Some(bob), Some(alice), false, None),
        ),
        (
            "a user without a balance row",
            account(Some(bob), None, 0),
            found(Some(bob), None, false, None),
        ),
        (
            "a balance row of zeros",
            account(Some(dave), None, 0),
            found(Some(dave), None, false, Some((0, 0))),
        ),
        (
            "a missing user by id",
            account(Some(no_user), None, 0),
            found(None, None, false, None),
        ),
        (
            "a missing user by e-mail",
            account(None, Some("nobody@example.com"), 0),
            found(None, None, false, None),
        ),
        (
            "a missing id with a user's e-mail",
            account(Some(no_user), Some("alice@example.com"), 0),
            found(None, Some(alice), false, None),
        ),
        (
            "another project's user by id",
            account(Some(carol), None, 0),
            found(None, None, false, None),
        ),
        (
            "another project's user by e-mail",
            account(None, Some("carol@example.com"), 0),
            found(None, None, false, None),
        ),
        (
            "a server of the project",
            account(Some(alice), None, eu),
            found(Some(alice), None, true, alices_on_eu),
        ),
        (
            "a server of the project, by e-mail",
            account(None, Some("alice@example.com"), eu),
            found(None, Some(alice), true, alices_on_eu),
        ),
        (
            "a server of the project without a balance row",
            account(Some(bob), None, eu),
            found(Some(bob), None, true, None),
        ),
        (
            "another project's server",
            account(Some(alice), None, foreign),
            found(Some(alice), None, false, None),
        ),
        (
            "a missing server",
            account(Some(alice), None, no_server),
            found(Some(alice), None, false, None),
        ),
    ];
    for (case, key, expected) in cases {
        let row = t.read(&token, Some(&key)).await.expect("token");
        assert_eq!(row.account, Some(expected), "{case}: {key:?}");
        assert_eq!(
            (row.token_id, row.project_id, row.permissions),
            (token_id, t.project_id, names(&[Permission::Balance])),
            "{case}: the token is read as without an account"
        );
    }
}

// ---- insert_order ----

async fn an_order_is_inserted_for_its_user_by_id_by_email_or_both(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    t.user("bob@example.com").await;
    let eu = t.server("eu-1").await;
    let cases = [
        ("Order:byid00001", Some(alice), None, 0),
        ("Order:bymail0001", None, Some("alice@example.com"), eu),
        (
            "Order:byboth0001",
            Some(alice),
            Some("alice@example.com"),
            0,
        ),
    ];
    for (order_id, user_id, email, server_id) in cases {
        let order = NewOrder {
            idempotency_key: Some(format!("key-{order_id}")),
            request_hash: Some(tokens::hash(order_id)),
            ..t.new_order(order_id, user_id, email, server_id, 1_050)
        };
        let OrderInsert::Inserted {
            user_id,
            created_at,
        } = t.insert(&order).await
        else {
            panic!("{order:?} not inserted");
        };
        assert_eq!(user_id, alice, "{order_id}");
        let row = t.order_row(order_id).await;
        assert_eq!(
            (
                row.project_id,
                row.user_id,
                row.server_id,
                row.amount_cents,
                row.payment_system.as_str(),
                row.status,
            ),
            (
                t.project_id,
                alice,
                (server_id != 0).then_some(server_id),
                1_050,
                PS,
                OrderStatus::Pending
            ),
            "{order_id}"
        );
        assert_eq!(row.created_at, created_at, "{order_id}: the time stored");
        assert_eq!(
            (row.idempotency_key, row.request_hash),
            (order.idempotency_key, order.request_hash),
            "{order_id}"
        );
        assert_eq!(
            (row.payment_id, row.completed_at, row.cancelled_at),
            (None, None, None),
            "{order_id}"
        );
    }
    assert_eq!(t.orders_count().await, 3);
}

async fn an_order_for_a_user_not_of_the_project_is_not_inserted(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    t.user("bob@example.com").await;
    let other = t.project("Other").await;
    let carol = t.user_in(other, "carol@example.com").await;
    let foreign = t.server_in(other, "us-1").await;
    let (no_user, no_server) = (carol + 1000, foreign + 1000);
    let cases = [
        ("a missing id", Some(no_user), None, 0),
        ("a missing e-mail", None, Some("nobody@example.com"), 0),
        (
            "an id and another user's e-mail",
            Some(alice),
            Some("bob@example.com"),
            0,
        ),
        (
            "an id and a missing e-mail",
            Some(alice),
            Some("nobody@example.com"),
            0,
        ),
        ("another project's user by id", Some(carol), None, 0),
        (
            "another project's user by e-mail",
            None,
            Some("carol@example.com"),
            0,
        ),
        // The user is judged before the server, as the service promises.
        (
            "a missing user on a missing server",
            Some(no_user),
            None,
            no_server,
        ),
        (
            "a missing user on another project's server",
            Some(no_user),
            None,
            foreign,
        ),
    ];
    for (n, (case, user_id, email, server_id)) in cases.into_iter().enumerate() {
        let order = t.new_order(
            &format!("Order:nouser{n:04}"),
            user_id,
            email,
            server_id,
            100,
        );
        assert_eq!(t.insert(&order).await, OrderInsert::UserNotFound, "{case}");
    }
    assert_eq!(t.orders_count().await, 0, "nothing inserted");
}

async fn an_order_for_a_server_not_of_the_project_is_not_inserted(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let other = t.project("Other").await;
    let foreign = t.server_in(other, "us-1").await;
    let no_server = foreign + 1000;
    let cases = [
        ("a missing server", Some(alice), None, no_server),
        ("another project's server", Some(alice), None, foreign),
        (
            "another project's server, the user by e-mail",
            None,
            Some("alice@example.com"),
            foreign,
        ),
    ];
    for (n, (case, user_id, email, server_id)) in cases.into_iter().enumerate() {
        let order = t.new_order(
            &format!("Order:noserv{n:04}"),
            user_id,
            email,
            server_id,
            100,
        );
        assert_eq!(
            t.insert(&order).await,
            OrderInsert::ServerNotFound,
            "{case}"
        );
    }
    assert_eq!(t.orders_count().await, 0, "nothing inserted");
}

/// An order id is unique across projects, an idempotency key within its
/// project; both compare byte for byte.
async fn an_order_whose_key_or_order_id_is_taken_is_not_inserted(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let bob = t.user("bob@example.com").await;
    let keyed = |order_id: &str, user: i64, key: &str, cents: i64| NewOrder {
        idempotency_key: Some(key.to_owned()),
        request_hash: Some(tokens::hash(order_id)),
        ..t.new_order(order_id, Some(user), None, 0, cents)
    };
    let first = keyed("Order:first0001", alice, "key-1", 500);
    assert!(matches!(
        t.insert(&first).await,
        OrderInsert::Inserted { .. }
    ));

    let taken = [
        (
            "the key taken, another order id",
            keyed("Order:second001", bob, "key-1", 700),
        ),
        (
            "the order id taken, no key",
            t.new_order("Order:first0001", Some(bob), None, 0, 700),
        ),
        (
            "the order id taken, another key",
            keyed("Order:first0001", bob, "key-2", 700),
        ),
    ];
    for (case, order) in &taken {
        assert_eq!(t.insert(order).await, OrderInsert::Conflict, "{case}");
    }
    assert_eq!(t.orders_count().await, 1, "nothing inserted");
    let row = t.order_row("Order:first0001").await;
    assert_eq!(
        (
            row.user_id,
            row.amount_cents,
            row.idempotency_key.as_deref()
        ),
        (alice, 500, Some("key-1")),
        "the first order is as it was"
    );

    // None of these is taken.
    let other = t.project("Other").await;
    let carol = t.user_in(other, "carol@example.com").await;
    let free = [
        (
            "the key the refused insert named",
            keyed("Order:third0001", bob, "key-2", 700),
        ),
        (
            "the key in another project",
            NewOrder {
                project_id: other,
                ..keyed("Order:carol0001", carol, "key-1", 700)
            },
        ),
        (
            "the order id and key in another case",
            keyed("Order:FIRST0001", alice, "KEY-1", 700),
        ),
        (
            "no key",
            t.new_order("Order:nokey0001", Some(alice), None, 0, 700),
        ),
        (
            "no key again",
            t.new_order("Order:nokey0002", Some(alice), None, 0, 700),
        ),
    ];
    for (case, order) in &free {
        assert!(
            matches!(t.insert(order).await, OrderInsert::Inserted { .. }),
            "{case}: {order:?}"
        );
    }
    assert_eq!(t.orders_count().await, 1 + free.len() as u64);
}

/// Orders inserted at once under one order id (on PostgreSQL: one group,
/// one statement): one is inserted, the others conflict, and the one
/// answered `Inserted` is the one stored.
async fn inserts_at_once_naming_one_order_id_insert_one_order(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let orders: Vec<NewOrder> = (1..=4)
        .map(|n| NewOrder {
            idempotency_key: Some(format!("key-{n}")),
            ..t.new_order("Order:shared0001", Some(alice), None, 0, 100 * n)
        })
        .collect();
    let answers = join_all(orders.iter().map(|order| t.store.insert_order(order))).await;
    let answers: Vec<OrderInsert> = answers.into_iter().map(|a| a.expect("insert")).collect();
    let row = t.order_row("Order:shared0001").await;
    assert_one_inserted(&orders, &answers, |order| {
        (order.amount_cents, order.idempotency_key.clone())
            == (row.amount_cents, row.idempotency_key.clone())
    });
    assert_eq!(t.orders_count().await, 1);
}

/// Orders inserted at once under one idempotency key, each with its own
/// order id: one is inserted, the others conflict.
async fn inserts_at_once_with_one_idempotency_key_insert_one_order(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let orders: Vec<NewOrder> = (1..=4)
        .map(|n| NewOrder {
            idempotency_key: Some("key-shared".into()),
            ..t.new_order(&format!("Order:keyed{n:04}"), Some(alice), None, 0, 100 * n)
        })
        .collect();
    let answers = join_all(orders.iter().map(|order| t.store.insert_order(order))).await;
    let answers: Vec<OrderInsert> = answers.into_iter().map(|a| a.expect("insert")).collect();
    let stored = payment_order::Entity::find()
        .one(&t.db)
        .await
        .expect("read")
        .expect("one order");
    assert_one_inserted(&orders, &answers, |order| order.order_id == stored.order_id);
    assert_eq!(t.orders_count().await, 1);
}

/// Exactly one of `answers` is `Inserted`, the others `Conflict`, and the
/// order answered `Inserted` is the stored one (`is_stored`).
#[track_caller]
fn assert_one_inserted(
    orders: &[NewOrder],
    answers: &[OrderInsert],
    is_stored: impl Fn(&NewOrder) -> bool,
) {
    let inserted: Vec<&NewOrder> = orders
        .iter()
        .zip(answers)
        .filter(|(_, answer)| matches!(answer, OrderInsert::Inserted { .. }))
        .map(|(order, _)| order)
        .collect();
    assert_eq!(inserted.len(), 1, "one inserted: {answers:?}");
    assert!(
        is_stored(inserted[0]),
        "the one answered inserted is stored"
    );
    let conflicts = answers
        .iter()
        .filter(|answer| **answer == OrderInsert::Conflict)
        .count();
    assert_eq!(
        conflicts,
        orders.len() - 1,
        "the others conflict: {answers:?}"
    );
}

// ---- complete ----

async fn a_completion_credits_its_order_once_and_logs_it(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let eu = t.server("eu-1").await;
    t.set_balance(alice, 0, "10", "3").await;
    let order_id = t.order(alice, 0, "5").await;
    let order_ref = t.order_row(&order_id).await.id;

    let done = t
        .complete(&t.completion(&order_id, Some("pay-1")))
        .await
        .expect("completed");
    assert_eq!(
        (
            done.order_id.as_str(),
            done.payment_system.as_str(),
            done.payment_id.as_deref(),
            done.amount.cents(),
            done.user_id,
            done.server_id,
            done.balance_after.cents(),
        ),
        (order_id.as_str(), PS, Some("pay-1"), 500, alice, 0, 1_500)
    );
    let row = t.order_row(&order_id).await;
    assert_eq!(row.status, OrderStatus::Completed);
    assert_eq!(row.completed_at, Some(done.completed_at), "the time stored");
    assert_eq!(row.payment_id.as_deref(), Some("pay-1"));
    assert_eq!(
        t.balance(alice, 0).await,
        Some((1_500, 300)),
        "the main balance credited, the bonus untouched"
    );
    let credits = t.credits().await;
    assert_eq!(credits.len(), 1, "one log row");
    assert_eq!(
        logged(&credits[0]),
        (Some(order_ref), alice, 0, 500, 1_000, 1_500)
    );
    assert_eq!(credits[0].balance_type, BalanceType::Main);
    assert_eq!(credits[0].created_at, done.completed_at);

    // An account without a balance row: the credit creates it. No payment
    // id given, none stored.
    let on_eu = t.order(alice, eu, "2.50").await;
    let on_eu_ref = t.order_row(&on_eu).await.id;
    let done = t
        .complete(&t.completion(&on_eu, None))
        .await
        .expect("completed");
    assert_eq!(
        (done.server_id, done.payment_id, done.balance_after.cents()),
        (eu, None, 250)
    );
    assert_eq!(t.order_row(&on_eu).await.payment_id, None);
    assert_eq!(t.balance(alice, eu).await, Some((250, 0)));
    assert_eq!(t.balance(alice, 0).await, Some((1_500, 300)));
    let credits = t.credits().await;
    assert_eq!(credits.len(), 2);
    assert_eq!(
        logged(&credits[1]),
        (Some(on_eu_ref), alice, eu, 250, 0, 250)
    );
}

async fn a_completed_order_is_not_credited_again(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let order_id = t.order(alice, 0, "5").await;
    let done = t
        .complete(&t.completion(&order_id, Some("pay-1")))
        .await
        .expect("completed");
    for payment_id in [Some("pay-1"), Some("pay-2"), None] {
        let again = t.complete(&t.completion(&order_id, payment_id)).await;
        assert!(
            matches!(again, Err(CompleteError::AlreadyCompleted)),
            "{payment_id:?}: {again:?}"
        );
    }
    assert_eq!(t.balance(alice, 0).await, Some((500, 0)), "credited once");
    assert_eq!(t.credits().await.len(), 1, "logged once");
    let row = t.order_row(&order_id).await;
    assert_eq!(
        (row.completed_at, row.payment_id.as_deref()),
        (Some(done.completed_at), Some("pay-1")),
        "the first completion's"
    );
}

async fn a_cancelled_order_is_never_credited(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let order_id = t.order(alice, 0, "5").await;
    orders::cancel(
        &t.db,
        None,
        &orders::Cancellation {
            project_id: t.project_id,
            order_id: order_id.parse().unwrap(),
            payment_system: PS.parse().unwrap(),
        },
    )
    .await
    .expect("cancelled");
    let answer = t.complete(&t.completion(&order_id, Some("pay-1"))).await;
    assert!(
        matches!(answer, Err(CompleteError::Cancelled)),
        "{answer:?}"
    );
    let row = t.order_row(&order_id).await;
    assert_eq!(
        (row.status, row.completed_at, row.payment_id),
        (OrderStatus::Cancelled, None, None)
    );
    assert_eq!(t.balance(alice, 0).await, None, "no balance row made");
    assert!(t.credits().await.is_empty());
}

/// An order is found by its id, its project and its payment system
/// together; anything else is `OrderNotFound` and changes nothing.
async fn a_completion_finds_only_an_order_of_its_project_and_payment_system(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let order_id = t
        .place_order(t.project_id, alice, 0, "5", Some("Order:CaseTest01"))
        .await;
    let other = t.project("Other").await;
    let carol = t.user_in(other, "carol@example.com").await;
    let carols = t.place_order(other, carol, 0, "7", None).await;
    let right = t.completion(&order_id, Some("pay-1"));
    let cases = [
        (
            "another project",
            Completion {
                project_id: other,
                ..right.clone()
            },
        ),
        (
            "another payment system",
            Completion {
                payment_system: "cstm:othergate".into(),
                ..right.clone()
            },
        ),
        (
            "an unknown order id",
            Completion {
                order_id: "Order:unknown0001".into(),
                ..right.clone()
            },
        ),
        (
            "the order id in another case",
            Completion {
                order_id: order_id.to_lowercase(),
                ..right.clone()
            },
        ),
        (
            "another project's order",
            Completion {
                order_id: carols.clone(),
                ..right.clone()
            },
        ),
    ];
    for (case, completion) in &cases {
        let answer = t.complete(completion).await;
        assert!(
            matches!(answer, Err(CompleteError::OrderNotFound)),
            "{case}: {answer:?}"
        );
    }
    for pending in [&order_id, &carols] {
        assert_eq!(t.order_row(pending).await.status, OrderStatus::Pending);
    }
    assert_eq!(t.balance(alice, 0).await, None);
    assert_eq!(t.balance(carol, 0).await, None);
    assert!(t.credits().await.is_empty());

    let done = t.complete(&right).await.expect("the right completion");
    assert_eq!(done.balance_after.cents(), 500);
}

/// Completions of one order racing on many tasks: exactly one completes
/// it, every other finds it completed, and it is credited once.
async fn racing_completions_of_one_order_credit_it_once(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let order_id = t.order(alice, 0, "5").await;
    let completion = t.completion(&order_id, Some("pay-1"));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, completion) = (t.store.clone(), completion.clone());
            tokio::spawn(async move { store.complete(&completion).await })
        })
        .collect();
    let mut completed = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(done) => {
                completed += 1;
                assert_eq!(done.balance_after.cents(), 500);
            }
            Err(CompleteError::AlreadyCompleted) => {}
            Err(err) => panic!("neither completed nor already completed: {err:?}"),
        }
    }
    assert_eq!(completed, 1, "exactly one completion");
    assert_eq!(t.balance(alice, 0).await, Some((500, 0)));
    assert_eq!(t.credits().await.len(), 1);
}

/// A credit that would take the main balance past the largest balance kept
/// breaks the balances' CHECK: the order is refused for good
/// (`BalanceCeiling`, not a failure to retry), and nothing changed. On
/// PostgreSQL it shares a group with an order that can be credited, which
/// is completed all the same.
async fn a_credit_past_the_balance_ceiling_is_refused_and_changes_nothing(t: StoreTest) {
    let whale = t.user("whale@example.com").await;
    let bob = t.user("bob@example.com").await;
    t.set_balance(whale, 0, "999999999999999.50", "0").await;
    let too_much = t.order(whale, 0, "1").await;
    let fits = t.order(bob, 0, "1").await;

    let (refusing, fitting) = (t.completion(&too_much, None), t.completion(&fits, None));
    let (refused, done) = tokio::join!(t.complete(&refusing), t.complete(&fitting));
    assert!(
        matches!(refused, Err(CompleteError::BalanceCeiling)),
        "{refused:?}"
    );
    assert_eq!(
        done.expect("the other order completed")
            .balance_after
            .cents(),
        100
    );
    assert_eq!(t.order_row(&too_much).await.status, OrderStatus::Pending);
    assert_eq!(t.balance(whale, 0).await, Some((99_999_999_999_999_950, 0)));
    assert_eq!(t.credits().await.len(), 1, "only the other order's credit");
    // Once the balance allows, the same order completes.
    t.set_balance(whale, 0, "0", "0").await;
    let done = t
        .complete(&t.completion(&too_much, None))
        .await
        .expect("completed once the balance allows");
    assert_eq!(done.balance_after.cents(), 100);
}

/// An operator's completion or creation carries its admin audit row, which
/// the store writes in the change's own transaction: there with the change,
/// absent without it (a refusal, a conflict).
async fn an_operators_change_commits_with_its_audit_row_and_a_refusal_writes_none(t: StoreTest) {
    use entity::admin_audit_entry;
    let audit = |action: &str, object_id: &str| AuditRow {
        at: masterpay::store::now(),
        administrator_id: None,
        actor: "command line".into(),
        action: action.into(),
        object_kind: "order".into(),
        object_id: object_id.into(),
        before: None,
        after: Some(r#"{"status":"pending"}"#.into()),
        address: None,
    };
    let rows = |action: &'static str| {
        admin_audit_entry::Entity::find()
            .filter(admin_audit_entry::Column::Action.eq(action))
            .count(&t.db)
    };
    let alice = t.user("alice@example.com").await;
    let mut order = t.new_order("Order:Audited01", Some(alice), None, 0, 700);
    order.audit = Some(audit("order.create", "Order:Audited01"));
    assert!(matches!(
        t.insert(&order).await,
        OrderInsert::Inserted { .. }
    ));
    assert_eq!(rows("order.create").await.unwrap(), 1);
    // The same order id again: nothing inserted, no row.
    assert_eq!(t.insert(&order).await, OrderInsert::Conflict);
    assert_eq!(rows("order.create").await.unwrap(), 1);

    let mut completion = t.completion("Order:Audited01", None);
    completion.audit = Some(audit("order.complete", "Order:Audited01"));
    t.complete(&completion).await.expect("completed");
    assert_eq!(rows("order.complete").await.unwrap(), 1);
    // Completed already: refused, no second row.
    let again = t.complete(&completion).await;
    assert!(
        matches!(again, Err(CompleteError::AlreadyCompleted)),
        "{again:?}"
    );
    assert_eq!(rows("order.complete").await.unwrap(), 1);
    let stored = admin_audit_entry::Entity::find()
        .filter(admin_audit_entry::Column::Action.eq("order.complete"))
        .one(&t.db)
        .await
        .unwrap()
        .expect("the row");
    assert_eq!(
        (
            stored.object_id.as_str(),
            stored.actor.as_str(),
            stored.after.as_deref()
        ),
        (
            "Order:Audited01",
            "command line",
            Some(r#"{"status":"pending"}"#)
        )
    );
}

/// Orders of two accounts completed at once, interleaved (on PostgreSQL:
/// one group, their credits summed per account in one statement). Each
/// account ends at its start plus its orders, and its log rows chain from
/// one balance to the next, each answer's balance after being its row's.
async fn completions_at_once_of_two_accounts_are_credited_in_turn(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let bob = t.user("bob@example.com").await;
    let eu = t.server("eu-1").await;
    t.set_balance(alice, 0, "1", "0").await;
    let mut orders = Vec::new();
    for n in 1..=6 {
        orders.push(t.order(alice, 0, &format!("{n}")).await);
        if n % 2 == 0 {
            orders.push(t.order(bob, eu, &format!("0.{n}")).await);
        }
    }
    let completions: Vec<Completion> = orders
        .iter()
        .map(|order_id| t.completion(order_id, Some("pay")))
        .collect();
    let answers = join_all(completions.iter().map(|c| t.store.complete(c))).await;
    let mut after_of = BTreeMap::new();
    for (order_id, answer) in orders.iter().zip(answers) {
        let done = answer.unwrap_or_else(|err| panic!("{order_id}: {err:?}"));
        let order_ref = t.order_row(order_id).await.id;
        after_of.insert(order_ref, done.balance_after.cents());
    }

    let credits = t.credits().await;
    assert_eq!(credits.len(), orders.len(), "one log row per order");
    for row in &credits {
        let order_ref = row.order_ref.expect("an order's row");
        assert_eq!(
            Some(&row.balance_after_cents),
            after_of.get(&order_ref),
            "the answer's balance after is its log row's"
        );
    }
    for (user, server, start, total) in [(alice, 0, 100, 2_100), (bob, eu, 0, 120)] {
        assert_eq!(
            t.balance(user, server).await,
            Some((start + total, 0)),
            "{user}/{server}: the start plus every order"
        );
        let mut chain: Vec<_> = credits
            .iter()
            .filter(|row| (row.user_id, row.server_id) == (user, server))
            .collect();
        chain.sort_by_key(|row| row.balance_before_cents);
        let mut balance = start;
        for row in chain {
            assert_eq!(
                (row.balance_before_cents, row.balance_after_cents),
                (balance, balance + row.amount_cents),
                "{user}/{server}: each credit starts where the last ended"
            );
            balance = row.balance_after_cents;
        }
        assert_eq!(balance, start + total);
    }
}

// ---- record_token_use ----

// ---- events recorded with the changes ----

/// An order inserted records its `order.created` only when an enabled
/// endpoint of its project receives the type, with one pending delivery
/// per such endpoint, due at once; its body is the order as created.
async fn an_insert_records_order_created_for_its_subscribed_endpoints_only(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let inserted = t
        .insert(&t.new_order("Order:NoEndpoint1", Some(alice), None, 0, 100))
        .await;
    assert!(matches!(inserted, OrderInsert::Inserted { .. }));
    assert!(t.events().await.is_empty(), "no endpoint: no event");

    let other = t.project("Other").await;
    t.endpoint_in(other, None).await;
    t.endpoint(Some(&[EventType::BalanceSet])).await;
    let disabled = t.endpoint(None).await;
    webhook_endpoints::set_enabled(&t.db, &Actor::CommandLine, disabled, false)
        .await
        .expect("disabled");
    let inserted = t
        .insert(&t.new_order("Order:NoEndpoint2", Some(alice), None, 0, 100))
        .await;
    assert!(matches!(inserted, OrderInsert::Inserted { .. }));
    assert!(
        t.events().await.is_empty(),
        "another project's, an unsubscribed and a disabled endpoint: no event"
    );

    let all = t.endpoint(None).await;
    let created = t.endpoint(Some(&[EventType::OrderCreated])).await;
    let mut order = t.new_order(
        "Order:Recorded01",
        None,
        Some("alice@example.com"),
        0,
        1_025,
    );
    order.idempotency_key = Some("key-1".into());
    let OrderInsert::Inserted { created_at, .. } = t.insert(&order).await else {
        panic!("not inserted");
    };
    let events = t.events().await;
    assert_eq!(events.len(), 1, "one event");
    let event = &events[0];
    assert_eq!(
        (
            event.project_id,
            event.event_type,
            event.order_id.as_deref()
        ),
        (
            t.project_id,
            EventType::OrderCreated,
            Some("Order:Recorded01")
        )
    );
    assert_eq!(event.created_at, created_at);
    assert!(event.webhook_id.starts_with("msg_") && event.webhook_id.len() == 36);
    let body: Value = serde_json::from_str(&event.payload).expect("JSON body");
    assert_eq!(
        body,
        json!({
            "type": "order.created",
            "timestamp": created_at.to_rfc3339(),
            "data": {
                "order_id": "Order:Recorded01", "status": "pending", "user_id": alice,
                "server_id": 0, "amount": "10.25", "payment_system": PS, "payment_id": null,
                "created_at": created_at.to_rfc3339(), "completed_at": null,
                "cancelled_at": null, "idempotency_key": "key-1",
            },
        })
    );
    let deliveries = t.deliveries().await;
    let mut to: Vec<i64> = deliveries.iter().map(|d| d.endpoint_id).collect();
    to.sort_unstable();
    assert_eq!(to, [all, created], "one delivery per subscribed endpoint");
    for delivery in &deliveries {
        assert_eq!(delivery.event_id, event.id);
        assert_eq!(
            (delivery.status, delivery.attempts),
            (DeliveryStatus::Pending, 0)
        );
        assert!(delivery.next_attempt_at.is_some(), "due");
        assert_eq!(delivery.leased_until, None);
    }
}

/// A completion records its `order.completed`: the order as completed and
/// the credited account with its main balance after the credit.
async fn a_completion_records_order_completed_with_the_credited_account(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let eu = t.server("eu-1").await;
    t.set_balance(alice, eu, "10", "3").await;
    let endpoint = t.endpoint(Some(&[EventType::OrderCompleted])).await;
    let order_id = t.order(alice, eu, "5").await;
    assert!(
        t.events().await.is_empty(),
        "not subscribed to order.created"
    );
    let done = t
        .complete(&t.completion(&order_id, Some("pay-1")))
        .await
        .expect("completed");
    let row = t.order_row(&order_id).await;
    let events = t.events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, EventType::OrderCompleted);
    assert_eq!(events[0].order_id.as_deref(), Some(order_id.as_str()));
    let body: Value = serde_json::from_str(&events[0].payload).unwrap();
    let at = done.completed_at.to_rfc3339();
    assert_eq!(
        body,
        json!({
            "type": "order.completed",
            "timestamp": at,
            "data": {
                "order_id": order_id, "status": "completed", "user_id": alice,
                "server_id": eu, "amount": "5.00", "payment_system": PS,
                "payment_id": "pay-1", "created_at": row.created_at.to_rfc3339(),
                "completed_at": at, "cancelled_at": null,
                "account": {"user_id": alice, "server_id": eu, "main": "15.00"},
            },
        })
    );
    let deliveries = t.deliveries().await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        (deliveries[0].event_id, deliveries[0].endpoint_id),
        (events[0].id, endpoint)
    );
}

/// A change that does not happen records nothing: a conflicting insert, a
/// completion of a completed or cancelled order, a credit refused at the
/// balance's ceiling (its transaction rolled back after the update).
async fn a_refused_or_repeated_change_records_no_event(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    t.endpoint(None).await;
    let order_id = t.order(alice, 0, "5").await;
    t.complete(&t.completion(&order_id, None))
        .await
        .expect("completed");
    assert_eq!(t.event_types().await, ["order.created", "order.completed"]);

    let taken = t
        .insert(&t.new_order(&order_id, Some(alice), None, 0, 100))
        .await;
    assert_eq!(taken, OrderInsert::Conflict);
    let again = t.complete(&t.completion(&order_id, None)).await;
    assert!(matches!(again, Err(CompleteError::AlreadyCompleted)));

    let cancelled = t.order(alice, 0, "1").await;
    orders::cancel(
        &t.db,
        None,
        &orders::Cancellation {
            project_id: t.project_id,
            order_id: cancelled.parse().unwrap(),
            payment_system: PS.parse().unwrap(),
        },
    )
    .await
    .expect("cancelled");
    let answer = t.complete(&t.completion(&cancelled, None)).await;
    assert!(matches!(answer, Err(CompleteError::Cancelled)));

    t.set_balance(alice, 0, "999999999999999.00", "0").await;
    let too_much = t.order(alice, 0, "1.00").await;
    let answer = t.complete(&t.completion(&too_much, None)).await;
    assert!(
        matches!(answer, Err(CompleteError::BalanceCeiling)),
        "{answer:?}"
    );
    assert_eq!(
        t.event_types().await,
        [
            "order.created",
            "order.completed",
            "order.created",
            "order.cancelled",
            "balance.set",
            "order.created",
        ],
        "only the changes that happened"
    );
}

/// Orders inserted, then completed, at once (on PostgreSQL: one group
/// each): one event per order, each with its own order's body.
async fn changes_at_once_record_one_event_each(t: StoreTest) {
    let alice = t.user("alice@example.com").await;
    let bob = t.user("bob@example.com").await;
    t.endpoint(None).await;
    let orders: Vec<NewOrder> = (0..6)
        .map(|i| {
            let user = if i % 2 == 0 { alice } else { bob };
            t.new_order(&format!("Order:AtOnce{i:05}"), Some(user), None, 0, 100 + i)
        })
        .collect();
    let answers = join_all(orders.iter().map(|o| t.insert(o))).await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, OrderInsert::Inserted { .. }))
    );
    let completions: Vec<Completion> = orders
        .iter()
        .map(|o| t.completion(&o.order_id, None))
        .collect();
    let done = join_all(completions.iter().map(|c| t.complete(c))).await;
    assert!(done.iter().all(Result::is_ok), "{done:?}");
    let events = t.events().await;
    assert_eq!(events.len(), 12);
    for order in &orders {
        let of_order: Vec<&webhook_event::Model> = events
            .iter()
            .filter(|e| e.order_id.as_deref() == Some(order.order_id.as_str()))
            .collect();
        let types: Vec<EventType> = of_order.iter().map(|e| e.event_type).collect();
        assert_eq!(types, [EventType::OrderCreated, EventType::OrderCompleted]);
        for event in of_order {
            let body: Value = serde_json::from_str(&event.payload).unwrap();
            assert_eq!(body["data"]["order_id"], order.order_id.as_str());
            assert_eq!(body["data"]["user_id"], order.user_id.unwrap());
            assert_eq!(
                body["data"]["amount"],
                format!(
                    "{}.{:02}",
                    order.amount_cents / 100,
                    order.amount_cents % 100
                )
            );
        }
    }
    // Each account's balances after, one per credit, in cents: distinct,
    // the last its total (1.00 + 1.02 + 1.04 for alice, 1.01 + 1.03 + 1.05
    // for bob).
    let mut mains: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for event in events
        .iter()
        .filter(|e| e.event_type == EventType::OrderCompleted)
    {
        let body: Value = serde_json::from_str(&event.payload).unwrap();
        let main = body["data"]["account"]["main"]
            .as_str()
            .unwrap()
            .replace('.', "");
        mains
            .entry(body["data"]["user_id"].as_i64().unwrap())
            .or_default()
            .push(main.parse().unwrap());
    }
    for (user, total) in [(alice, 306), (bob, 309)] {
        let mut afters = mains[&user].clone();
        afters.sort_unstable();
        afters.dedup();
        assert_eq!((afters.len(), afters.last()), (3, Some(&total)), "{user}");
    }
    assert_eq!(t.deliveries().await.len(), 12);
}

async fn a_token_use_is_recorded(t: StoreTest) {
    let (used_id, used) = t.token(&[Permission::Balance]).await;
    let (_, unused) = t.token(&[Permission::Balance]).await;
    let first = masterpay::store::now();
    t.store
        .record_token_use(used_id, &used, first)
        .await
        .expect("recorded");
    assert_eq!(t.read(&used, None).await.unwrap().last_used_at, Some(first));
    let later = first + Duration::seconds(90);
    t.store
        .record_token_use(used_id, &used, later)
        .await
        .expect("recorded");
    assert_eq!(t.read(&used, None).await.unwrap().last_used_at, Some(later));
    assert_eq!(
        t.read(&unused, None).await.unwrap().last_used_at,
        None,
        "only the token named"
    );
}

/// The value a reissue replaced is recorded apart from the current one; a
/// hash the token no longer has records nothing.
async fn a_use_is_recorded_on_the_value_used(t: StoreTest) {
    let (id, old) = t.token(&[Permission::Balance]).await;
    let new = t.reissue(id, Duration::hours(1)).await;
    let at = masterpay::store::now();
    t.store
        .record_token_use(id, &old, at)
        .await
        .expect("recorded");
    assert_eq!(t.read(&old, None).await.unwrap().last_used_at, Some(at));
    assert_eq!(t.read(&new, None).await.unwrap().last_used_at, None);
    let later = at + Duration::seconds(90);
    t.store
        .record_token_use(id, &new, later)
        .await
        .expect("recorded");
    assert_eq!(t.read(&new, None).await.unwrap().last_used_at, Some(later));
    assert_eq!(t.read(&old, None).await.unwrap().last_used_at, Some(at));
    tokens::end_grace(&t.db, &Actor::CommandLine, id)
        .await
        .unwrap();
    let gone = tokens::hash("a value this token never had");
    t.store
        .record_token_use(id, &gone, later + Duration::seconds(90))
        .await
        .expect("nothing to record");
    assert_eq!(t.read(&new, None).await.unwrap().last_used_at, Some(later));
}

// ---- helpers ----

fn account(user_id: Option<i64>, email: Option<&str>, server_id: i64) -> AccountKey {
    AccountKey {
        user_id,
        email: email.map(str::to_owned),
        server_id,
    }
}

/// What a read found of an account; `balance` is (main, bonus) in cents.
fn found(
    user_by_id: Option<i64>,
    user_by_email: Option<i64>,
    server_found: bool,
    balance: Option<(i64, i64)>,
) -> AccountRow {
    AccountRow {
        user_by_id,
        user_by_email,
        server_found,
        main_cents: balance.map(|(main, _)| main),
        bonus_cents: balance.map(|(_, bonus)| bonus),
    }
}

/// The permission names, sorted.
fn names(permissions: &[Permission]) -> Vec<String> {
    sorted(permissions.iter().map(|p| p.as_str().to_owned()).collect())
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// A log row's (order, user, server, amount, before, after).
fn logged(row: &operation_log::Model) -> (Option<i64>, i64, i64, i64, i64, i64) {
    (
        row.order_ref,
        row.user_id,
        row.server_id,
        row.amount_cents,
        row.balance_before_cents,
        row.balance_after_cents,
    )
}

/// Seeding through the service layer (the code the command line runs), and
/// reading what the store wrote.
impl StoreTest {
    async fn project(&self, name: &str) -> i64 {
        projects::create(&self.db, &Actor::CommandLine, name)
            .await
            .expect("project")
            .id
    }

    async fn user(&self, email: &str) -> i64 {
        self.user_in(self.project_id, email).await
    }

    async fn user_in(&self, project_id: i64, email: &str) -> i64 {
        let email = email.parse().expect("an e-mail address");
        users::create(&self.db, &Actor::CommandLine, project_id, &email)
            .await
            .expect("user")
            .id
    }

    async fn server(&self, name: &str) -> i64 {
        self.server_in(self.project_id, name).await
    }

    async fn server_in(&self, project_id: i64, name: &str) -> i64 {
        servers::create(&self.db, &Actor::CommandLine, project_id, name)
            .await
            .expect("server")
            .id
    }

    /// Sets a balance (`server` 0: the general account).
    async fn set_balance(&self, user: i64, server: i64, main: &str, bonus: &str) {
        balances::set(
            &self.db,
            &Actor::CommandLine,
            user,
            Some(server),
            Some(main.parse().unwrap()),
            Some(bonus.parse().unwrap()),
            "set by the test",
        )
        .await
        .expect("balance set");
    }

    /// A token of the test project: its id and its hash, which the store
    /// reads it by.
    async fn token(&self, permissions: &[Permission]) -> (i64, String) {
        self.token_in(self.project_id, permissions).await
    }

    async fn token_in(&self, project_id: i64, permissions: &[Permission]) -> (i64, String) {
        let (info, value) = tokens::create(
            &self.db,
            &Actor::CommandLine,
            project_id,
            "test",
            None,
            permissions,
            None,
        )
        .await
        .expect("token");
        (info.token.id, tokens::hash(value.expose()))
    }

    /// Reissues the token `id` with `grace`; returns the new value's hash.
    async fn reissue(&self, id: i64, grace: Duration) -> String {
        let (_, value) = tokens::reissue(&self.db, &Actor::CommandLine, id, grace)
            .await
            .expect("reissue");
        tokens::hash(value.expose())
    }

    /// A pending order of the test project by `PS`; returns its order id.
    async fn order(&self, user: i64, server: i64, amount: &str) -> String {
        self.place_order(self.project_id, user, server, amount, None)
            .await
    }

    /// A pending order by `PS`, under `order_id` or a drawn one.
    async fn place_order(
        &self,
        project_id: i64,
        user: i64,
        server: i64,
        amount: &str,
        order_id: Option<&str>,
    ) -> String {
        let request = orders::OrderRequest {
            project_id,
            who: UserRef::Id(user),
            server_id: server,
            amount: amount.parse().unwrap(),
            payment_system: PS.parse().unwrap(),
            order_id: order_id.map(|id| id.parse().unwrap()),
        };
        orders::create(&self.db, &*self.store, &request, None)
            .await
            .expect("order")
            .order
            .order_id
            .into()
    }

    /// Deletes a project that still has tokens, which its foreign key
    /// forbids: the only way a token's project row can be gone. One
    /// `execute_unprepared` runs on one connection, so the key checks are
    /// off for this delete alone.
    async fn delete_project_despite_its_tokens(&self, id: i64) {
        let (off, on) = match self.backend {
            Backend::Sqlite => ("PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys = ON"),
            Backend::Postgres => (
                "SET session_replication_role = replica",
                "SET session_replication_role = DEFAULT",
            ),
            Backend::MySql => ("SET foreign_key_checks = 0", "SET foreign_key_checks = 1"),
        };
        let sql = format!("{off}; DELETE FROM projects WHERE id = {id}; {on}");
        self.db
            .execute_unprepared(&sql)
            .await
            .unwrap_or_else(|err| panic!("{sql}: {err}"));
        assert!(projects::get(&self.db, id).await.is_err(), "project gone");
    }

    /// A new order of the test project by `PS`, without a key.
    fn new_order(
        &self,
        order_id: &str,
        user_id: Option<i64>,
        email: Option<&str>,
        server_id: i64,
        amount_cents: i64,
    ) -> NewOrder {
        NewOrder {
            order_id: order_id.to_owned(),
            project_id: self.project_id,
            user_id,
            email: email.map(str::to_owned),
            server_id,
            amount_cents,
            payment_system: PS.into(),
            idempotency_key: None,
            request_hash: None,
            audit: None,
        }
    }

    fn completion(&self, order_id: &str, payment_id: Option<&str>) -> Completion {
        Completion {
            project_id: self.project_id,
            order_id: order_id.to_owned(),
            payment_system: PS.into(),
            payment_id: payment_id.map(str::to_owned),
            audit: None,
        }
    }

    async fn read(&self, token_hash: &str, account: Option<&AccountKey>) -> Option<TokenRow> {
        self.store
            .read_token(token_hash, account)
            .await
            .expect("token read")
    }

    async fn insert(&self, order: &NewOrder) -> OrderInsert {
        self.store.insert_order(order).await.expect("order insert")
    }

    async fn complete(&self, completion: &Completion) -> Result<CompletedOrder, CompleteError> {
        self.store.complete(completion).await
    }

    async fn order_row(&self, order_id: &str) -> payment_order::Model {
        payment_order::Entity::find()
            .filter(payment_order::Column::OrderId.eq(order_id))
            .one(&self.db)
            .await
            .expect("read order")
            .unwrap_or_else(|| panic!("no order {order_id}"))
    }

    async fn orders_count(&self) -> u64 {
        payment_order::Entity::find()
            .count(&self.db)
            .await
            .expect("count orders")
    }

    /// The (main, bonus) cents of an account's balance row, if it has one.
    async fn balance(&self, user: i64, server: i64) -> Option<(i64, i64)> {
        balance::Entity::find_by_id((user, server))
            .one(&self.db)
            .await
            .expect("read balance")
            .map(|row| (row.main_cents, row.bonus_cents))
    }

    /// An endpoint of the test project receiving `types` (`None`: every
    /// type); its id.
    async fn endpoint(&self, types: Option<&[EventType]>) -> i64 {
        self.endpoint_in(self.project_id, types).await
    }

    async fn endpoint_in(&self, project_id: i64, types: Option<&[EventType]>) -> i64 {
        webhook_endpoints::create(
            &self.db,
            None,
            &Default::default(),
            &Actor::CommandLine,
            project_id,
            "https://hooks.example.com/in",
            types,
            None,
        )
        .await
        .expect("endpoint")
        .0
        .id
    }

    /// Every event recorded, in the order recorded.
    async fn events(&self) -> Vec<webhook_event::Model> {
        webhook_event::Entity::find()
            .order_by_asc(webhook_event::Column::Id)
            .all(&self.db)
            .await
            .expect("read events")
    }

    async fn event_types(&self) -> Vec<String> {
        let events = self.events().await;
        events
            .iter()
            .map(|e| {
                serde_json::from_str::<Value>(&e.payload).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// Every delivery, in the order recorded.
    async fn deliveries(&self) -> Vec<webhook_delivery::Model> {
        webhook_delivery::Entity::find()
            .order_by_asc(webhook_delivery::Column::Id)
            .all(&self.db)
            .await
            .expect("read deliveries")
    }

    /// The log rows of credited orders, in the order they were written.
    async fn credits(&self) -> Vec<operation_log::Model> {
        operation_log::Entity::find()
            .filter(operation_log::Column::Kind.eq(LogKind::OrderCredit))
            .order_by_asc(operation_log::Column::Id)
            .all(&self.db)
            .await
            .expect("read log")
    }
}
