//! AFL++ harness of the `basis` target: see `tessera_core::fuzz::basis`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::basis(data);
    });
}
