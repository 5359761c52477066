//! AFL++ harness of the `image` target: see `tessera_core::fuzz::image`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::image(data);
    });
}
