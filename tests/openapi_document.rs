//! The committed contract `openapi/v2.yaml` is a golden file: it must equal
//! what the code generates, byte for byte, and `masterpay openapi` must print
//! exactly it. Regenerate with
//! `cargo run -- openapi > openapi/v2.yaml` when the contract changes on purpose.

use std::{collections::BTreeSet, process::Command};

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

/// Every (code, status) pair an operation of the document can answer, read
/// from its responses' bodies (each body's `code` names an enum schema).
fn answered_codes(document: &serde_yaml::Value) -> BTreeSet<(String, String)> {
    let schemas = &document["components"]["schemas"];
    let schema_of = |reference: &serde_yaml::Value| {
        let name = reference
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .expect("a schema reference");
        &schemas[name]
    };
    let mut pairs = BTreeSet::new();
    let paths = document["paths"].as_mapping().expect("paths");
    for operations in paths.values() {
        for operation in operations.as_mapping().expect("operations").values() {
            let responses = operation["responses"].as_mapping().expect("responses");
            for (status, response) in responses {
                let Some(content) = response["content"].as_mapping() else {
                    continue;
                };
                for media in content.values() {
                    let body = schema_of(&media["schema"]["$ref"]);
                    let Some(code) = body["properties"]["code"].get("$ref") else {
                        continue;
                    };
                    for value in schema_of(code)["enum"].as_sequence().expect("enum") {
                        let status = status.as_str().expect("status").to_owned();
                        pairs.insert((value.as_str().expect("code").to_owned(), status));
                    }
                }
            }
        }
    }
    pairs
}

/// The meaning of each code is written once, in docs/api.md's error table:
/// it must list exactly the (code, status) pairs the document answers, so
/// that a code added, moved or dropped in the code shows up there.
#[test]
fn the_error_table_of_docs_api_lists_every_code_the_document_answers() {
    let document: serde_yaml::Value = serde_yaml::from_str(COMMITTED).unwrap();
    let answered = answered_codes(&document);
    let docs = include_str!("../docs/api.md");
    let table = docs
        .split("## Errors")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/api.md has an Errors section");
    let mut listed = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for code in cells[1].split(',') {
            listed.insert((
                code.trim().trim_matches('`').to_owned(),
                cells[2].to_owned(),
            ));
        }
    }
    assert_eq!(
        listed, answered,
        "docs/api.md's error table and openapi/v2.yaml disagree"
    );
}
