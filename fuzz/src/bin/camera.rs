//! AFL++ harness of the `camera` target: see `tessera_core::fuzz::camera`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::camera(data);
    });
}
