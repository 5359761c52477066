//! Builds `csrc/basis_guard.c`, the assertion guard around the Basis Universal
//! transcoder, on Linux with glibc (see `format::basis::guard`); elsewhere nothing.

fn main() {
    println!("cargo::rerun-if-changed=csrc/basis_guard.c");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        cc::Build::new().file("csrc/basis_guard.c").compile("tessera_basis_guard");
    }
}
