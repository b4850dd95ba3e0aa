//! The tags that group the operations in the published document.

use poem_openapi::Tags;

#[derive(Tags)]
pub enum ApiTags {
    /// Balances of users' master accounts.
    MasterAccount,
    /// Completion of payment orders.
    PaymentOrders,
}
