//! Decides which database backends the integration tests run on. libtest
//! cannot skip a test at run time, so a PostgreSQL or MariaDB test without
//! its server's URL is marked ignored at build time (`no_postgres_url`,
//! `no_mysql_url`; see `on_every_backend!` in tests/common/mod.rs). Under CI
//! nothing is ignored: such a test runs and fails, so that a green CI run
//! means all three backends ran.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(no_postgres_url, no_mysql_url)");
    let set = |var: &str| std::env::var_os(var).is_some_and(|value| !value.is_empty());
    let mut missing = false;
    for (var, cfg) in [
        ("MASTERPAY_TEST_POSTGRES_URL", "no_postgres_url"),
        ("MASTERPAY_TEST_MYSQL_URL", "no_mysql_url"),
    ] {
        println!("cargo::rerun-if-env-changed={var}");
        if !set(var) {
            missing = true;
            if !set("CI") {
                println!("cargo::rustc-cfg={cfg}");
            }
        }
    }
    // CI changes nothing while both URLs are set; watching it only then
    // spares a rebuild of the crate when it comes and goes.
    if missing {
        println!("cargo::rerun-if-env-changed=CI");
    }
}
