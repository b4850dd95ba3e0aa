//! Outgoing events: their types, and their bodies as integrators receive
//! them.
//!
//! A body is `{"type", "timestamp", "data"}`, built when its change commits
//! and stored as the exact bytes every attempt sends. An order's `data` is
//! the body of `GET /v2/payment/order` for it without `success` (the same
//! fields, the same spelling of money and times), plus what the type adds.
//! The store builds them on the request path and `service` on the others,
//! both with these functions, so that one event reads the same whichever
//! path recorded it.

use chrono::{DateTime, Utc};
pub use entity::webhook_event::EventType;
use entity::{operation_log::BalanceType, payment_order::OrderStatus};
use sea_orm::{ActiveEnum, Iterable};
use serde_json::{Value, json};

use crate::money::Money;

/// The canonical name of `event_type` (`order.completed`).
pub fn type_name(event_type: EventType) -> String {
    event_type.to_value()
}

/// The types a comma-separated list names (blanks around names ignored),
/// each once, in the canonical order; refused when a name is none of them.
pub fn parse_types(text: &str) -> Result<Vec<EventType>, String> {
    let mut types = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let event_type = EventType::try_from_value(&name.to_owned()).map_err(|_| {
            let known: Vec<String> = EventType::iter().map(type_name).collect();
            format!(
                "unknown event type {name:?}; the types are {}",
                known.join(", ")
            )
        })?;
        types.push(event_type);
    }
    if types.is_empty() {
        return Err("name at least one event type".to_owned());
    }
    let order = |t: &EventType| EventType::iter().position(|known| known == *t);
    types.sort_by_key(order);
    types.dedup();
    Ok(types)
}

/// `types` as an endpoint stores them: canonical names, comma-separated.
pub fn stored_types(types: &[EventType]) -> String {
    types
        .iter()
        .map(|t| type_name(*t))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether an endpoint subscribed to `stored` (its `event_types`; `None`:
/// every type) receives `event_type`.
pub fn subscribed(stored: Option<&str>, event_type: EventType) -> bool {
    let name = type_name(event_type);
    stored.is_none_or(|list| list.split(',').any(|t| t == name))
}

/// A `webhook-id`: `msg_` + 32 lower-case hex digits of 16 bytes, the
/// first 6 the time in milliseconds since 1970 and the other 10 from the
/// OS CSPRNG. Ids drawn later sort after (within a millisecond, at random),
/// so that recording an event adds to the end of the unique index on
/// `webhook_id` instead of to a page anywhere in it, one more page written
/// per event (docs/performance.md).
pub fn new_webhook_id() -> String {
    webhook_id_at(Utc::now().timestamp_millis())
}

/// [`new_webhook_id`] at `millis` since 1970.
fn webhook_id_at(millis: i64) -> String {
    use rand::{TryRngCore, rngs::OsRng};
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    OsRng
        .try_fill_bytes(&mut bytes[6..])
        .expect("the OS random number generator is available");
    format!("msg_{}", hex::encode(bytes))
}

/// An event to record with its change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub project_id: i64,
    pub event_type: EventType,
    /// The order an `order.*` event is about.
    pub order_id: Option<String>,
    /// The body, as sent.
    pub payload: String,
    /// When the change was made (the body's `timestamp`).
    pub at: DateTime<Utc>,
}

/// An order as its events show it: the fields of `GET /v2/payment/order`.
#[derive(Debug, Clone)]
pub struct OrderData<'a> {
    pub order_id: &'a str,
    pub status: OrderStatus,
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    pub amount: Money,
    pub payment_system: &'a str,
    pub payment_id: Option<&'a str>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
}

impl OrderData<'_> {
    /// The order's event of `event_type` made at `at`: its `data` is the
    /// order's body, then `extra`'s keys.
    fn event(
        &self,
        project_id: i64,
        event_type: EventType,
        at: DateTime<Utc>,
        extra: Value,
    ) -> NewEvent {
        let mut data = json!({
            "order_id": self.order_id,
            "status": self.status.to_value(),
            "user_id": self.user_id,
            "server_id": self.server_id,
            "amount": self.amount.to_string(),
            "payment_system": self.payment_system,
            "payment_id": self.payment_id,
            "created_at": self.created_at.to_rfc3339(),
            "completed_at": self.completed_at.map(|t| t.to_rfc3339()),
            "cancelled_at": self.cancelled_at.map(|t| t.to_rfc3339()),
        });
        if let (Value::Object(data), Value::Object(extra)) = (&mut data, extra) {
            data.extend(extra);
        }
        NewEvent::new(project_id, event_type, Some(self.order_id), at, data)
    }
}

impl NewEvent {
    /// An event of `event_type` made at `at`, its body built around `data`.
    fn new(
        project_id: i64,
        event_type: EventType,
        order_id: Option<&str>,
        at: DateTime<Utc>,
        data: Value,
    ) -> NewEvent {
        let body =
            json!({"type": type_name(event_type), "timestamp": at.to_rfc3339(), "data": data});
        NewEvent {
            project_id,
            event_type,
            order_id: order_id.map(str::to_owned),
            payload: body.to_string(),
            at,
        }
    }
}

/// `order.created`: the order as created, with its `Idempotency-Key`.
pub fn order_created(
    project_id: i64,
    order: &OrderData<'_>,
    idempotency_key: Option<&str>,
) -> NewEvent {
    let extra = json!({"idempotency_key": idempotency_key});
    order.event(project_id, EventType::OrderCreated, order.created_at, extra)
}

/// The body of [`order_created`] around its user id, for a statement that
/// resolves the user itself (PostgreSQL's grouped insert): the body is
/// `head`, the user id's digits, `tail`. `order.user_id` is not read.
pub fn order_created_around_user(
    order: &OrderData<'_>,
    idempotency_key: Option<&str>,
) -> (String, String) {
    const PLACE: i64 = i64::MIN;
    let marked = OrderData {
        user_id: PLACE,
        ..order.clone()
    };
    let body = order_created(0, &marked, idempotency_key).payload;
    let key = format!("\"user_id\":{PLACE}");
    // `order_id`, `status` and the two times come before the user id and
    // cannot spell its key, so the first match is the user id.
    let at =
        body.find(&key).expect("the body has the user id") + key.len() - PLACE.to_string().len();
    (
        body[..at].to_owned(),
        body[at + PLACE.to_string().len()..].to_owned(),
    )
}

/// `order.completed`: the order as completed, with the credited account
/// and its main balance after the credit.
pub fn order_completed(project_id: i64, order: &OrderData<'_>, main_after: Money) -> NewEvent {
    let at = order.completed_at.unwrap_or(order.created_at);
    let extra = json!({"account": {
        "user_id": order.user_id,
        "server_id": order.server_id,
        "main": main_after.to_string(),
    }});
    order.event(project_id, EventType::OrderCompleted, at, extra)
}

/// `order.cancelled`: the order as cancelled.
pub fn order_cancelled(project_id: i64, order: &OrderData<'_>) -> NewEvent {
    let at = order.cancelled_at.unwrap_or(order.created_at);
    order.event(project_id, EventType::OrderCancelled, at, json!({}))
}

/// One balance of an account set by an operator.
#[derive(Debug, Clone)]
pub struct BalanceSetData {
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    pub balance_type: BalanceType,
    pub before: Money,
    pub after: Money,
    /// The operation-log row of the change.
    pub operation_id: i64,
    pub at: DateTime<Utc>,
}

/// `balance.set`: one balance of an account, before and after (never the
/// operator's reason).
pub fn balance_set(project_id: i64, change: &BalanceSetData) -> NewEvent {
    let data = json!({
        "user_id": change.user_id,
        "server_id": change.server_id,
        "balance_type": change.balance_type.to_value(),
        "before": change.before.to_string(),
        "after": change.after.to_string(),
        "operation_id": change.operation_id,
        "at": change.at.to_rfc3339(),
    });
    NewEvent::new(project_id, EventType::BalanceSet, None, change.at, data)
}

/// `webhook.test`: sent on request to the endpoint `endpoint_id`.
pub fn webhook_test(project_id: i64, endpoint_id: i64, at: DateTime<Utc>) -> NewEvent {
    let data = json!({"endpoint_id": endpoint_id});
    NewEvent::new(project_id, EventType::WebhookTest, None, at, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_to_canonical_names_each_once() {
        let types = parse_types(" balance.set,order.created ,balance.set").unwrap();
        assert_eq!(types, [EventType::OrderCreated, EventType::BalanceSet]);
        assert_eq!(stored_types(&types), "order.created,balance.set");
        assert!(
            parse_types("order.paid")
                .unwrap_err()
                .contains("order.paid")
        );
        assert!(parse_types(" , ").is_err());
        assert!(subscribed(None, EventType::WebhookTest));
        assert!(subscribed(
            Some("order.created,balance.set"),
            EventType::BalanceSet
        ));
        assert!(!subscribed(
            Some("order.created"),
            EventType::OrderCompleted
        ));
    }

    #[test]
    fn a_body_around_its_user_is_the_body() {
        let at = "2026-11-29T04:00:00.123456Z".parse().unwrap();
        let order = OrderData {
            order_id: "Order:Abc123xyz",
            status: OrderStatus::Pending,
            user_id: 42,
            server_id: 0,
            amount: "10.25".parse().unwrap(),
            payment_system: "cstm:paygate",
            payment_id: None,
            created_at: at,
            completed_at: None,
            cancelled_at: None,
        };
        let key = "k-\"user_id\":-9223372036854775808";
        let (head, tail) = order_created_around_user(&order, Some(key));
        let whole = order_created(7, &order, Some(key)).payload;
        assert_eq!(format!("{head}42{tail}"), whole);
        let body: Value = serde_json::from_str(&whole).unwrap();
        assert_eq!(body["type"], "order.created");
        assert_eq!(body["timestamp"], "2026-11-29T04:00:00.123456+00:00");
        assert_eq!(body["data"]["amount"], "10.25");
        assert_eq!(body["data"]["user_id"], 42);
        assert_eq!(body["data"]["idempotency_key"], key);
    }

    #[test]
    fn webhook_ids_are_msg_and_32_hex_digits() {
        let id = new_webhook_id();
        assert_eq!(id.len(), 36);
        assert!(id.starts_with("msg_"));
        assert!(id[4..].chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        assert_ne!(id, new_webhook_id());
    }

    #[test]
    fn webhook_ids_sort_by_their_millisecond() {
        let at = 1_795_000_000_123;
        let (first, later) = (webhook_id_at(at), webhook_id_at(at + 1));
        assert!(first < later);
        assert!(first.starts_with(&format!("msg_{at:012x}")));
        assert_ne!(webhook_id_at(at), webhook_id_at(at));
    }
}
