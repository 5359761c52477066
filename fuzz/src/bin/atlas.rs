//! AFL++ harness of the `atlas` target: see `tessera_core::fuzz::atlas`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::atlas(data);
    });
}
