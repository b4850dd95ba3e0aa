//! `masterpay openapi`: prints the published contract.

use clap::{Args, ValueEnum};

use super::CliResult;

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Format {
    #[default]
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct OpenapiArgs {
    /// yaml is byte-identical to openapi/v2.yaml.
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
}

pub fn run(args: &OpenapiArgs) -> CliResult {
    use std::io::Write;
    let text = match args.format {
        Format::Yaml => crate::api::openapi_yaml(),
        Format::Json => crate::api::openapi_json(),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        stdout.write_all(b"\n")?;
    }
    Ok(())
}
