//! The operation log: one row per balance change, written in the same
//! transaction as the change itself.
//!
//! A credited order writes exactly one row (`kind` = `order_credit`, unique
//! `order_ref`); `balance set` writes one row per changed field (`kind` =
//! `balance_set`). Replaying the rows of a (user, server, balance_type) from
//! zero gives its current balance, which is what `masterpay audit` checks.
use sea_orm::entity::prelude::*;

/// What wrote a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
pub enum LogKind {
    /// A completed order's credit of a main balance.
    #[sea_orm(string_value = "order_credit")]
    OrderCredit,
    /// The `balance set` command.
    #[sea_orm(string_value = "balance_set")]
    BalanceSet,
}

/// Which of an account's two balances a row changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(8))")]
pub enum BalanceType {
    #[sea_orm(string_value = "main")]
    Main,
    #[sea_orm(string_value = "bonus")]
    Bonus,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "operation_log")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub kind: LogKind,
    /// The `payment_orders.id` credited; `None` for `balance_set`.
    pub order_ref: Option<i64>,
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    pub balance_type: BalanceType,
    /// Signed change in minor units.
    pub amount_cents: i64,
    pub balance_before_cents: i64,
    pub balance_after_cents: i64,
    pub created_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The order credited; none for `balance_set` rows.
    #[sea_orm(
        belongs_to = "super::payment_order::Entity",
        from = "Column::OrderRef",
        to = "super::payment_order::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_log_order"
    )]
    PaymentOrder,
    /// The account changed: the balance row, written first in the same
    /// transaction.
    #[sea_orm(
        belongs_to = "super::balance::Entity",
        from = "(Column::UserId, Column::ServerId)",
        to = "(super::balance::Column::UserId, super::balance::Column::ServerId)",
        on_delete = "Restrict",
        fk_name = "fk_log_account"
    )]
    Balance,
}

impl Related<super::payment_order::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::PaymentOrder.def()
    }
}

impl Related<super::balance::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Balance.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
