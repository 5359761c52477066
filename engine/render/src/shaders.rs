//! WGSL sources. `VT_WGSL` is the virtual-texture API for user shaders: prepend it to
//! your own source (see `examples/embed.rs`).

/// The virtual-texture lookup (`vt_sample`, `vt_sample_grad`), bind group 1.
pub const VT_WGSL: &str = include_str!("../../../shaders/vt.wgsl");
/// Built-in scene: camera, vertex stage, shading.
pub const SCENE_WGSL: &str = include_str!("../../../shaders/scene.wgsl");
/// Built-in scene fragment stage through the virtual texture.
pub const SCENE_VT_WGSL: &str = include_str!("../../../shaders/scene_vt.wgsl");
/// Built-in scene fragment stage through the fully resident reference texture.
pub const SCENE_REFERENCE_WGSL: &str = include_str!("../../../shaders/scene_reference.wgsl");

/// The complete virtual-texture scene shader.
pub fn scene_vt_source() -> String {
    [VT_WGSL, SCENE_WGSL, SCENE_VT_WGSL].join("\n")
}

/// The complete reference scene shader.
pub fn scene_reference_source() -> String {
    [SCENE_WGSL, SCENE_REFERENCE_WGSL].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(name: &str, src: &str) {
        let module =
            naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }

    /// Every shader permutation parses and validates without a GPU.
    #[test]
    fn shaders_validate() {
        validate("scene_vt", &scene_vt_source());
        validate("scene_reference", &scene_reference_source());
        validate("vt alone", VT_WGSL);
    }
}
