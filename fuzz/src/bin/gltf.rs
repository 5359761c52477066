//! AFL++ harness of the `gltf` target: see `tessera_core::fuzz::gltf`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tessera_core::fuzz::gltf(data);
    });
}
