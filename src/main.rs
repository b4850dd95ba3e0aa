//! The `masterpay` binary: see [`masterpay::cli`].

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    masterpay::cli::run().await
}
