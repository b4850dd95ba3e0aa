//! GET /v2/master-account/balance as docs/api.md describes it, on every
//! backend, through real HTTP.

mod common;

use common::{Backend, TestApp};
use masterpay::service::{
    admin_audit::Actor,
    auth::{self, Authenticated, UsageRecorder},
    balances::{self, LookupRequest, UserRef},
    projects, servers,
    tokens::{self, Permission},
};
use serde_json::json;

on_every_backend!(
    omitted_balance_type_returns_success_main_and_bonus,
    balance_type_main_returns_only_main_balance,
    balance_type_bonus_returns_only_bonus_balance,
    server_balance_is_separate_from_general_balance,
    email_finds_the_user_case_insensitively,
    neither_user_id_nor_email_is_validation_error_under_user_id,
    empty_user_id_and_email_count_as_absent,
    invalid_email_is_validation_error_under_email,
    server_id_missing_negative_or_not_an_integer_is_validation_error,
    every_invalid_parameter_is_reported_at_once,
    balance_type_other_than_main_or_bonus_is_validation_error,
    repeated_parameter_is_validation_error,
    user_id_that_is_not_a_positive_integer_is_validation_error,
    unknown_user_is_user_not_found,
    user_of_another_project_is_user_not_found,
    user_id_and_email_must_name_the_same_user,
    unknown_server_is_server_not_found,
    server_of_another_project_is_server_not_found,
    user_is_resolved_before_server,
    account_without_balance_row_reads_zero,
    large_balances_are_exact_decimal_strings,
    the_lookup_read_with_the_token_is_the_lookup_read_alone,
    a_prefetched_lookup_answers_only_the_same_lookup,
);

async fn omitted_balance_type_returns_success_main_and_bonus(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "1250.5", "25").await;
    let r = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"success": true, "main_balance": "1250.50", "bonus_balance": "25.00"})
    );
    assert!(r.content_type.starts_with("application/json"));
}

async fn balance_type_main_returns_only_main_balance(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "7.01", "3").await;
    let r = app
        .get_balance(
            Some(&token),
            &format!("server_id=0&user_id={user}&balance_type=main"),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"success": true, "main_balance": "7.01"}));
}

async fn balance_type_bonus_returns_only_bonus_balance(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "7.01", "3").await;
    let r = app
        .get_balance(
            Some(&token),
            &format!("server_id=0&user_id={user}&balance_type=bonus"),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"success": true, "bonus_balance": "3.00"}));
}

async fn server_balance_is_separate_from_general_balance(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Survival").await;
    app.set_balance(user, None, "1", "2").await;
    app.set_balance(user, Some(server), "30", "40").await;
    let general = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    let on_server = app
        .get_balance(Some(&token), &format!("server_id={server}&user_id={user}"))
        .await;
    assert_eq!(general.body["main_balance"], "1.00");
    assert_eq!(general.body["bonus_balance"], "2.00");
    assert_eq!(on_server.body["main_balance"], "30.00");
    assert_eq!(on_server.body["bonus_balance"], "40.00");
}

async fn email_finds_the_user_case_insensitively(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("Alice@Example.com").await;
    app.set_balance(user, None, "5", "0").await;
    for email in ["alice@example.com", "ALICE%40EXAMPLE.COM"] {
        let r = app
            .get_balance(Some(&token), &format!("server_id=0&email={email}"))
            .await;
        assert_eq!(r.status, 200, "{email}: {}", r.text);
        assert_eq!(r.body["main_balance"], "5.00");
    }
}

async fn neither_user_id_nor_email_is_validation_error_under_user_id(app: TestApp) {
    let token = app.full_token().await;
    let r = app.get_balance(Some(&token), "server_id=0").await;
    r.assert_validation(&["user_id"]);
}

async fn empty_user_id_and_email_count_as_absent(app: TestApp) {
    let token = app.full_token().await;
    let r = app
        .get_balance(Some(&token), "server_id=0&user_id=&email=")
        .await;
    r.assert_validation(&["user_id"]);
}

async fn invalid_email_is_validation_error_under_email(app: TestApp) {
    let token = app.full_token().await;
    for email in ["not-an-email", "a@", "@example.com", "a%20b@example.com"] {
        let r = app
            .get_balance(Some(&token), &format!("server_id=0&email={email}"))
            .await;
        r.assert_validation(&["email"]);
    }
}

async fn server_id_missing_negative_or_not_an_integer_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for server in [
        "",
        "server_id=&",
        "server_id=-1&",
        "server_id=abc&",
        "server_id=1.5&",
        "server_id=%2B1&",
        "server_id=1e3&",
        "server_id=99999999999999999999999&",
        "server_id=%201&",
    ] {
        let r = app
            .get_balance(Some(&token), &format!("{server}user_id={user}"))
            .await;
        r.assert_validation(&["server_id"]);
    }
}

async fn every_invalid_parameter_is_reported_at_once(app: TestApp) {
    let token = app.full_token().await;
    let r = app
        .get_balance(Some(&token), "server_id=-5&email=nope&balance_type=gold")
        .await;
    r.assert_validation(&["balance_type", "email", "server_id"]);
}

async fn balance_type_other_than_main_or_bonus_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for kind in ["", "MAIN", "both", "main,bonus"] {
        let r = app
            .get_balance(
                Some(&token),
                &format!("server_id=0&user_id={user}&balance_type={kind}"),
            )
            .await;
        r.assert_validation(&["balance_type"]);
    }
}

async fn repeated_parameter_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let r = app
        .get_balance(
            Some(&token),
            &format!("server_id=0&server_id=0&user_id={user}"),
        )
        .await;
    r.assert_validation(&["server_id"]);
}

async fn user_id_that_is_not_a_positive_integer_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    for id in ["0", "-3", "x", "1.0"] {
        let r = app
            .get_balance(Some(&token), &format!("server_id=0&user_id={id}"))
            .await;
        r.assert_validation(&["user_id"]);
    }
}

async fn unknown_user_is_user_not_found(app: TestApp) {
    let token = app.full_token().await;
    app.get_balance(Some(&token), "server_id=0&user_id=424242")
        .await
        .assert_error(404, "USER_NOT_FOUND");
    app.get_balance(Some(&token), "server_id=0&email=ghost@example.com")
        .await
        .assert_error(404, "USER_NOT_FOUND");
}

async fn user_of_another_project_is_user_not_found(app: TestApp) {
    let token = app.full_token().await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    app.get_balance(Some(&token), &format!("server_id=0&user_id={stranger}"))
        .await
        .assert_error(404, "USER_NOT_FOUND");
    app.get_balance(Some(&token), "server_id=0&email=stranger@example.com")
        .await
        .assert_error(404, "USER_NOT_FOUND");
}

async fn user_id_and_email_must_name_the_same_user(app: TestApp) {
    let token = app.full_token().await;
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    app.set_balance(alice, None, "9", "0").await;
    let same = app
        .get_balance(
            Some(&token),
            &format!("server_id=0&user_id={alice}&email=alice@example.com"),
        )
        .await;
    assert_eq!(same.status, 200);
    assert_eq!(same.body["main_balance"], "9.00");
    app.get_balance(
        Some(&token),
        &format!("server_id=0&user_id={bob}&email=alice@example.com"),
    )
    .await
    .assert_error(404, "USER_NOT_FOUND");
}

async fn unknown_server_is_server_not_found(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.get_balance(Some(&token), &format!("server_id=987654&user_id={user}"))
        .await
        .assert_error(404, "SERVER_NOT_FOUND");
}

async fn server_of_another_project_is_server_not_found(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let other = app.project("Other").await;
    let foreign =
        masterpay::service::servers::create(&app.db, &Actor::CommandLine, other, "Foreign")
            .await
            .unwrap()
            .id;
    app.get_balance(Some(&token), &format!("server_id={foreign}&user_id={user}"))
        .await
        .assert_error(404, "SERVER_NOT_FOUND");
}

async fn user_is_resolved_before_server(app: TestApp) {
    let token = app.full_token().await;
    app.get_balance(Some(&token), "server_id=987654&user_id=424242")
        .await
        .assert_error(404, "USER_NOT_FOUND");
}

async fn account_without_balance_row_reads_zero(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Empty").await;
    for server_id in [0, server] {
        let r = app
            .get_balance(
                Some(&token),
                &format!("server_id={server_id}&user_id={user}"),
            )
            .await;
        assert_eq!(
            r.body,
            json!({"success": true, "main_balance": "0.00", "bonus_balance": "0.00"})
        );
    }
}

async fn large_balances_are_exact_decimal_strings(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("whale@example.com").await;
    app.set_balance(user, None, "123456789012345.67", "999999999999999.99")
        .await;
    let r = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.body["main_balance"], "123456789012345.67");
    assert_eq!(r.body["bonus_balance"], "999999999999999.99");
    assert!(
        r.text.contains("\"123456789012345.67\""),
        "a string, not a number"
    );
}

/// A balance request's account is read in the token's own statement
/// (`auth::authenticate` with an account). That row must answer exactly what
/// the account read on its own answers, for every shape: by id, by e-mail,
/// both, the general account or a server, found or not, and another
/// project's user or server.
async fn the_lookup_read_with_the_token_is_the_lookup_read_alone(app: TestApp) {
    let token = app.full_token().await;
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let server = app.server("eu-1").await;
    app.set_balance(alice, None, "1250.5", "25").await;
    app.set_balance(alice, Some(server), "7.01", "0").await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "carol@example.com").await;
    let foreign_server = servers::create(&app.db, &Actor::CommandLine, other, "us-1")
        .await
        .expect("server")
        .id;

    let store = app.store();
    let usage = UsageRecorder::default();
    let who = |user_id: Option<i64>, email: Option<&str>| {
        UserRef::new(user_id, email.map(|e| e.parse().unwrap())).unwrap()
    };
    let mut cases = Vec::new();
    for server_id in [0, server, foreign_server, 987_654] {
        for person in [
            who(Some(alice), None),
            who(None, Some("ALICE@example.com")),
            who(Some(alice), Some("alice@example.com")),
            who(Some(alice), Some("bob@example.com")),
            who(Some(bob), None),
            who(Some(stranger), None),
            who(None, Some("carol@example.com")),
            who(Some(987_654), None),
        ] {
            cases.push(LookupRequest {
                who: person,
                server_id,
            });
        }
    }
    let mut outcomes = std::collections::BTreeSet::new();
    for request in &cases {
        let key = balances::account_key(request);
        let caller = auth::authenticate(&store, &usage, &token, Some(key.clone()))
            .await
            .expect("token");
        assert_eq!(caller.principal.project_id, app.project_id);
        assert!(caller.account.is_some(), "the account read with the token");
        let joined = outcome(&balances::lookup(&*store, &caller, request).await);
        let alone = outcome(&balances::lookup(&*store, &without_account(&caller), request).await);
        assert_eq!(joined, alone, "{request:?}");
        outcomes.insert(alone);
    }
    // The cases are not all alike: both answers and both misses occur.
    assert!(outcomes.contains("1250.50/25.00"), "{outcomes:?}");
    assert!(outcomes.contains("7.01/0.00"), "{outcomes:?}");
    assert!(outcomes.contains("0.00/0.00"), "{outcomes:?}");
    assert!(outcomes.contains("user not found"), "{outcomes:?}");
    assert!(outcomes.contains("server not found"), "{outcomes:?}");
}

/// `caller` as if no account had been read with its token.
fn without_account(caller: &Authenticated) -> Authenticated {
    Authenticated {
        principal: caller.principal.clone(),
        account: None,
    }
}

/// An account read with the token answers only that account: another
/// user makes the endpoint read for itself.
async fn a_prefetched_lookup_answers_only_the_same_lookup(app: TestApp) {
    let token = app.full_token().await;
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    app.set_balance(alice, None, "1", "2").await;
    app.set_balance(bob, None, "3", "4").await;
    let store = app.store();
    let usage = UsageRecorder::default();
    let lookup = |user_id| LookupRequest {
        who: UserRef::Id(user_id),
        server_id: 0,
    };
    let (for_alice, for_bob) = (lookup(alice), lookup(bob));
    let key = balances::account_key(&for_alice);
    let caller = auth::authenticate(&store, &usage, &token, Some(key))
        .await
        .expect("token");
    let read = |request| {
        let (store, caller) = (&store, &caller);
        async move { outcome(&balances::lookup(&**store, caller, &request).await) }
    };
    assert_eq!(read(for_alice).await, "1.00/2.00");
    assert_eq!(read(for_bob).await, "3.00/4.00");
    // No account asked, none read.
    let caller = auth::authenticate(&store, &usage, &token, None)
        .await
        .expect("token");
    assert!(caller.account.is_none());
}

/// Token reads made at once, with and without an account, as concurrent
/// requests' are: on PostgreSQL they go to the database in groups. Each must
/// authenticate exactly as it does alone (the token, its permissions, its
/// project, or the refusal) and find exactly what its account read alone
/// finds, with tokens of every kind and two projects mixed in one group.
///
/// On one thread (`current_thread`), so that every read is waiting before a
/// group is taken.
async fn lookups_read_together_are_each_the_lookup_read_alone(app: TestApp) {
    let full = app.full_token().await;
    let (_, balance_only) = app.token(&[Permission::Balance]).await;
    let (_, complete_only) = app.token(&[Permission::Complete]).await;
    let (disabled_id, disabled) = app.token(&[Permission::Balance]).await;
    tokens::set_active(&app.db, &Actor::CommandLine, disabled_id, false)
        .await
        .expect("disable");
    let unknown = "Z".repeat(64);
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let server = app.server("eu-1").await;
    app.set_balance(alice, None, "1250.5", "25").await;
    app.set_balance(alice, Some(server), "7.01", "0").await;
    app.set_balance(bob, None, "3", "4").await;
    // Leaked so that the reads may borrow them for as long as they wait.
    let leak = |token: String| -> &'static str { Box::leak(token.into_boxed_str()) };
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "carol@example.com").await;
    app.set_balance(stranger, None, "9", "0").await;
    let (_, others) = app.token_in(other, &[Permission::Balance]).await;
    let closed = app.project("Closed").await;
    let (_, of_closed) = app.token_in(closed, &Permission::ALL).await;
    projects::set_active(&app.db, &Actor::CommandLine, closed, false)
        .await
        .expect("close");

    let (store, groups) = app.recorded_store();
    let usage = UsageRecorder::default();
    let who = |user_id: Option<i64>, email: Option<&str>| {
        UserRef::new(user_id, email.map(|e| e.parse().unwrap())).unwrap()
    };
    let tokens_used = [
        full,
        balance_only,
        complete_only,
        disabled,
        unknown,
        others,
        of_closed,
    ]
    .map(leak);
    let mut cases = Vec::new();
    for server_id in [0, server] {
        for person in [
            who(Some(alice), None),
            who(Some(stranger), None),
            who(None, Some("ALICE@example.com")),
            who(None, Some("carol@example.com")),
            who(Some(alice), Some("alice@example.com")),
            who(Some(bob), Some("alice@example.com")),
            // Bob has no balance on the server (zero), and nobody has this id.
            who(Some(bob), None),
            who(Some(stranger + 1000), None),
        ] {
            for token in tokens_used {
                cases.push((
                    token,
                    Some(LookupRequest {
                        who: person.clone(),
                        server_id,
                    }),
                ));
            }
        }
    }
    // And the token alone, as a completion request reads it.
    for token in tokens_used {
        cases.push((token, None));
    }
    let authenticate = |token: &'static str, request: &Option<LookupRequest>| {
        let key = request.as_ref().map(balances::account_key);
        auth::authenticate(&store, &usage, token, key)
    };
    let together = futures::future::join_all(
        cases
            .iter()
            .map(|(token, request)| authenticate(token, request)),
    )
    .await;
    let together_groups = groups.token_reads.lock().unwrap().clone();
    let mut outcomes = std::collections::BTreeSet::new();
    for ((token, request), read) in cases.iter().zip(together) {
        let alone = authenticate(token, request).await;
        let caller = match (read, alone) {
            (Ok(read), Ok(alone)) => {
                assert_eq!(
                    described(&read.principal),
                    described(&alone.principal),
                    "{token} {request:?}"
                );
                read
            }
            (Err(read), Err(alone)) => {
                assert_eq!(read.to_string(), alone.to_string(), "{request:?}");
                outcomes.insert(read.to_string());
                continue;
            }
            (read, alone) => panic!("{request:?}: together {read:?}, alone {alone:?}"),
        };
        let Some(request) = request else {
            assert!(caller.account.is_none(), "no account asked, none read");
            outcomes.insert("token alone".into());
            continue;
        };
        let joined = outcome(&balances::lookup(&*store, &caller, request).await);
        let alone = outcome(&balances::lookup(&*store, &without_account(&caller), request).await);
        assert_eq!(joined, alone, "{request:?}");
        outcomes.insert(alone);
    }
    for expected in [
        "1250.50/25.00",
        "7.01/0.00",
        "9.00/0.00",
        "3.00/4.00",
        "0.00/0.00",
        "user not found",
        "server not found",
        "token disabled",
        "token not found",
        "project missing or inactive",
        "token alone",
    ] {
        assert!(outcomes.contains(expected), "{expected}: {outcomes:?}");
    }
    if app.backend == Backend::Postgres {
        // The 119 reads made at once went in four groups of up to 32.
        assert_eq!(together_groups, [32, 32, 32, 23]);
    }
}

/// A principal as the tests compare it: token, project and permissions.
fn described(principal: &auth::Principal) -> (i64, i64, Vec<bool>) {
    (
        principal.token_id,
        principal.project_id,
        Permission::ALL.iter().map(|p| principal.may(*p)).collect(),
    )
}

/// The test of reads made at once, on the test's one thread
/// (`current_thread`; see the test).
mod read_together {
    use super::*;

    on_every_backend!(
        #[tokio::test]
        common::run: [lookups_read_together_are_each_the_lookup_read_alone],
    );
}

fn outcome(result: &Result<balances::AccountBalance, balances::BalanceLookupError>) -> String {
    match result {
        Ok(balance) => format!("{}/{}", balance.main, balance.bonus),
        Err(balances::BalanceLookupError::UserNotFound) => "user not found".into(),
        Err(balances::BalanceLookupError::ServerNotFound) => "server not found".into(),
        Err(err) => panic!("lookup failed: {err}"),
    }
}
