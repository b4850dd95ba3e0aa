//! The committed contract `openapi/v2.yaml` is a golden file: it must equal
//! what the code generates, byte for byte, and `masterpay openapi` must print
//! exactly it. Regenerate with
//! `cargo run -- openapi > openapi/v2.yaml` when the contract changes on purpose.

use std::process::Command;

const COMMITTED: &str = include_str!("../openapi/v2.yaml");

#[test]
fn committed_openapi_document_matches_the_code() {
    let generated = masterpay::api::openapi_yaml();
    let generated = if generated.ends_with('\n') {
        generated
    } else {
        format!("{generated}\n")
    };
    assert!(
        generated == COMMITTED,
        "openapi/v2.yaml is stale: run `cargo run -- openapi > openapi/v2.yaml` and commit it"
    );
}

#[test]
fn openapi_command_prints_the_committed_document_byte_for_byte() {
    let out = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .arg("openapi")
        .output()
        .expect("run masterpay openapi");
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), COMMITTED);
}

#[test]
fn openapi_json_command_prints_the_same_document_as_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(["openapi", "--format", "json"])
        .output()
        .expect("run masterpay openapi --format json");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["openapi"], "3.0.0");
    assert_eq!(
        json["components"]["securitySchemes"]["ApplicationToken"]["scheme"],
        "bearer"
    );
}
