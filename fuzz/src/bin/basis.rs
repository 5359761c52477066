//! AFL++ harness of the `basis` target (the structure check and the run-time Rust
//! transcoder): see `tessera_core::fuzz::basis`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::basis(data);
    });
}
