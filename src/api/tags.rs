//! The tags that group the operations in the published document.

use poem_openapi::Tags;

#[derive(Tags)]
pub enum ApiTags {
    /// Balances of users' master accounts, and their operation history.
    MasterAccount,
    /// Payment orders: creation, reading, completion and cancellation.
    PaymentOrders,
}
