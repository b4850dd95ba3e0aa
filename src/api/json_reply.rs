//! [`JsonReply`]: a JSON response body written straight from its Rust value.
//!
//! poem-openapi's `Json<T>` turns the value into a `serde_json::Value` tree
//! (its `ToJSON`: a map, a `String` per key and per value) and then writes
//! that tree out. For the balance reply, the service's most frequent
//! response, that was about 5 600 of the 115 000 instructions a whole request
//! costs (callgrind). `JsonReply<T>` publishes exactly
//! what `Json<T>` publishes (T's schema, the same content type), so the
//! OpenAPI document does not change, and writes the body with `serde` in one
//! pass. The two serializations must agree; the unit tests of each type that
//! uses it compare them on its examples.

use poem::{IntoResponse, Response, http::header};
use poem_openapi::{
    payload::{Json, Payload},
    registry::{MetaSchemaRef, Registry},
    types::Type,
};
use serde::Serialize;

/// A JSON response body; see the module docs.
pub struct JsonReply<T>(pub T);

impl<T: Type> Payload for JsonReply<T> {
    const CONTENT_TYPE: &'static str = <Json<T> as Payload>::CONTENT_TYPE;

    fn check_content_type(content_type: &str) -> bool {
        <Json<T> as Payload>::check_content_type(content_type)
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + Serialize + Send> IntoResponse for JsonReply<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => Response::builder()
                .header(header::CONTENT_TYPE, <Self as Payload>::CONTENT_TYPE)
                .body(body),
            Err(err) => {
                // Only a type whose Serialize can fail gets here (a map
                // with non-string keys); none of the reply types can.
                tracing::error!(error = %err, "serializing a response body failed");
                super::error::ApiError::internal().to_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use poem_openapi::types::ToJSON;

    use super::*;

    #[test]
    fn publishes_and_sends_what_json_would() {
        #[derive(Serialize, poem_openapi::Object)]
        struct Reply {
            success: bool,
            #[oai(skip_serializing_if_is_none)]
            #[serde(skip_serializing_if = "Option::is_none")]
            note: Option<String>,
        }
        assert_eq!(
            <JsonReply<Reply> as Payload>::CONTENT_TYPE,
            <Json<Reply> as Payload>::CONTENT_TYPE
        );
        assert_eq!(
            format!("{:?}", <JsonReply<Reply> as Payload>::schema_ref()),
            format!("{:?}", <Json<Reply> as Payload>::schema_ref())
        );
        for note in [None, Some("a \"quoted\" note".to_owned())] {
            let reply = Reply {
                success: true,
                note,
            };
            let expected = serde_json::to_vec(&reply.to_json()).unwrap();
            let response = JsonReply(reply).into_response();
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "application/json; charset=utf-8"
            );
            let body = body_of(response);
            assert_eq!(body, expected);
        }
    }

    fn body_of(response: Response) -> Vec<u8> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(response.into_body().into_vec())
            .unwrap()
    }
}
