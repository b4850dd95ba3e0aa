//! The HTTP surface around the endpoints: every framework rejection is the
//! contract's JSON error (never plain text, never 405), body limits, health,
//! readiness, the served OpenAPI document and Swagger UI.

mod common;

use common::TestApp;

on_every_backend!(
    unknown_path_outside_v2_is_json_not_found,
    wrong_method_outside_v2_is_not_found_never_405,
    body_over_64_kib_is_payload_too_large,
    chunked_body_over_64_kib_is_payload_too_large,
    body_declared_too_large_with_expect_continue_is_refused_unsent,
    an_answer_before_the_body_is_read_still_reaches_a_client_sending_it,
    content_type_other_than_json_is_validation_error_under_body,
    json_content_type_with_charset_is_accepted,
    malformed_json_is_validation_error_under_body,
    healthz_and_readyz_answer_ok,
    openapi_json_and_yaml_are_served_without_a_token,
    swagger_ui_is_served_from_vendored_assets,
);

async fn unknown_path_outside_v2_is_json_not_found(app: TestApp) {
    for path in [
        "/",
        "/nothing",
        "/v1/master-account/balance",
        "/v20/x",
        "/docs/nothing.js",
    ] {
        app.send(app.client.get(app.url(path)))
            .await
            .assert_error(404, "NOT_FOUND");
    }
}

async fn wrong_method_outside_v2_is_not_found_never_405(app: TestApp) {
    app.send(app.client.post(app.url("/healthz")))
        .await
        .assert_error(404, "NOT_FOUND");
    app.send(app.client.delete(app.url("/openapi.json")))
        .await
        .assert_error(404, "NOT_FOUND");
}

async fn body_over_64_kib_is_payload_too_large(app: TestApp) {
    let token = app.full_token().await;
    let padding = "x".repeat(64 * 1024);
    let body = format!(
        r#"{{"payment_system":"cstm:paygate","order_id":"Order:abcdefgh","pad":"{padding}"}}"#
    );
    app.send(
        app.client
            .post(app.url("/v2/payment/order/complete"))
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(body),
    )
    .await
    .assert_error(413, "PAYLOAD_TOO_LARGE");
}

async fn chunked_body_over_64_kib_is_payload_too_large(app: TestApp) {
    let token = app.full_token().await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b' '; 8 * 1024])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    app.send(
        app.client
            .post(app.url("/v2/payment/order/complete"))
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(body),
    )
    .await
    .assert_error(413, "PAYLOAD_TOO_LARGE");
}

/// A client that announces a body over the limit and waits for `100
/// Continue` (curl does for large bodies) gets the 413 at once and never
/// has to send the body: no `100 Continue`, no read of the body.
async fn body_declared_too_large_with_expect_continue_is_refused_unsent(app: TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let token = app.full_token().await;
    let address = app.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v2/payment/order/complete HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await.unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(!reply.contains("100 Continue"), "{reply}");
    let body = &reply[reply.find("\r\n\r\n").expect("head") + 4..];
    let body: serde_json::Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(
        body,
        serde_json::json!({"success": false, "code": "PAYLOAD_TOO_LARGE"})
    );
}

/// Answers that come before the body is read (403 from authentication, 404
/// for an unknown path, 400 for a `Content-Type` other than JSON) reach a
/// client that is still sending its body, sized or chunked, and the
/// connection stays usable.
/// The client's send buffer is kept small and the body (1 MB: over the
/// limit, but within what the server drains) larger than the kernel holds
/// for a server that does not read, so the client is still sending when the
/// answer is ready. A server that does not drain such bodies closes the
/// connection at that point, and the client's send fails (broken pipe or
/// connection reset) instead of reading the answer.
async fn an_answer_before_the_body_is_read_still_reaches_a_client_sending_it(app: TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let token = app.full_token().await;
    let address = app.base.trim_start_matches("http://").to_owned();
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(1_000_000 - 10));
    // The same body in chunks of 64 KiB: Transfer-Encoding: chunked.
    let chunked: String = body
        .as_bytes()
        .chunks(64 * 1024)
        .map(|chunk| {
            format!(
                "{:x}\r\n{}\r\n",
                chunk.len(),
                String::from_utf8_lossy(chunk)
            )
        })
        .chain(["0\r\n\r\n".to_owned()])
        .collect();
    let cases = [
        (
            "/v2/payment/order/complete",
            "A".repeat(64),
            "application/json",
            "403",
            "TOKEN_NOT_FOUND",
        ),
        (
            "/v2/payment/order/complete",
            "B".repeat(64),
            "application/json; chunked",
            "403",
            "TOKEN_NOT_FOUND",
        ),
        (
            "/v2/payment/order/complete",
            "short".to_owned(),
            "application/json",
            "403",
            "INVALID_TOKEN",
        ),
        (
            "/v2/payment/order/nothing",
            token.clone(),
            "application/json",
            "404",
            "NOT_FOUND",
        ),
        (
            "/nothing",
            token.clone(),
            "application/json",
            "404",
            "NOT_FOUND",
        ),
        (
            "/v2/payment/order/complete",
            token.clone(),
            "text/plain",
            "400",
            "VALIDATION_ERROR",
        ),
    ];
    for (path, bearer, content_type, status, code) in cases {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(4096).unwrap();
        let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
        let (content_type, framing, sent) = match content_type.strip_suffix("; chunked") {
            Some(json) => (json, "Transfer-Encoding: chunked".to_owned(), &chunked),
            None => (
                content_type,
                format!("Content-Length: {}", body.len()),
                &body,
            ),
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {bearer}\r\n\
             Content-Type: {content_type}\r\n{framing}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
            .write_all(sent.as_bytes())
            .await
            .unwrap_or_else(|err| panic!("{path} ({status}): sending the body failed: {err}"));
        // The same connection serves the next request.
        let next = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(next.as_bytes()).await.unwrap();
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status} ")),
            "{path}: {reply}"
        );
        assert!(
            reply.contains(&format!("{{\"success\":false,\"code\":\"{code}\"")),
            "{path}: {reply}"
        );
        assert_eq!(reply.matches("HTTP/1.1 ").count(), 2, "{path}: {reply}");
        assert!(reply.contains("HTTP/1.1 200 OK"), "{path}: {reply}");
    }
}

async fn content_type_other_than_json_is_validation_error_under_body(app: TestApp) {
    let token = app.full_token().await;
    let json = r#"{"payment_system":"cstm:paygate","order_id":"Order:abcdefgh"}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/xml"),
        None,
    ] {
        let mut req = app
            .client
            .post(app.url("/v2/payment/order/complete"))
            .bearer_auth(&token)
            .body(json);
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        app.send(req).await.assert_validation(&["body"]);
    }
}

async fn json_content_type_with_charset_is_accepted(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    let r = app
        .send(
            app.client
                .post(app.url("/v2/payment/order/complete"))
                .bearer_auth(&token)
                .header("Content-Type", "application/json; charset=UTF-8")
                .body(format!(
                    r#"{{"payment_system":"cstm:paygate","order_id":"{order}"}}"#
                )),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn malformed_json_is_validation_error_under_body(app: TestApp) {
    let token = app.full_token().await;
    for body in ["{", "", "{\"order_id\": }", "\u{0}", "{\"a\":1}{\"b\":2}"] {
        app.send(
            app.client
                .post(app.url("/v2/payment/order/complete"))
                .bearer_auth(&token)
                .header("Content-Type", "application/json")
                .body(body),
        )
        .await
        .assert_validation(&["body"]);
    }
}

async fn healthz_and_readyz_answer_ok(app: TestApp) {
    let health = app.send(app.client.get(app.url("/healthz"))).await;
    assert_eq!(
        (health.status, health.body["status"].as_str()),
        (200, Some("ok"))
    );
    let ready = app.send(app.client.get(app.url("/readyz"))).await;
    assert_eq!(
        (ready.status, ready.body["status"].as_str()),
        (200, Some("ready"))
    );
}

async fn openapi_json_and_yaml_are_served_without_a_token(app: TestApp) {
    let yaml = app.send(app.client.get(app.url("/openapi.yaml"))).await;
    assert_eq!(yaml.status, 200);
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/v2.yaml"))
            .expect("openapi/v2.yaml is committed");
    assert_eq!(
        yaml.text, committed,
        "served YAML equals the committed file"
    );
    let json = app.send(app.client.get(app.url("/openapi.json"))).await;
    assert_eq!(json.status, 200);
    assert!(json.content_type.starts_with("application/json"));
    assert_eq!(json.body["info"]["version"], "2.0.0");
    assert!(json.body["paths"]["/v2/master-account/balance"]["get"].is_object());
    assert!(json.body["paths"]["/v2/payment/order/complete"]["post"].is_object());
}

async fn swagger_ui_is_served_from_vendored_assets(app: TestApp) {
    let index = app.send(app.client.get(app.url("/docs/"))).await;
    assert_eq!(index.status, 200);
    assert!(index.content_type.starts_with("text/html"));
    assert!(
        index.text.contains("swagger-ui"),
        "{}",
        &index.text[..200.min(index.text.len())]
    );
    let init = app
        .send(app.client.get(app.url("/docs/swagger-initializer.js")))
        .await;
    assert_eq!(init.status, 200);
    assert!(init.text.contains("/openapi.json"));
    let css = app
        .send(app.client.get(app.url("/docs/swagger-ui.css")))
        .await;
    assert_eq!(css.status, 200);
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.url("/docs"))
        .send()
        .await
        .unwrap();
    assert!(redirect.status().is_redirection());
    assert_eq!(redirect.headers()["location"], "/docs/");
}
