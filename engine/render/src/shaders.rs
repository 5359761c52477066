//! WGSL sources. `VT_WGSL` is the virtual-texture API for user shaders: prepend it to
//! your own source (see `examples/embed.rs`).

/// The virtual-texture lookup (`vt_sample`, `vt_sample_grad`), bind group 1.
pub const VT_WGSL: &str = include_str!("../shaders/vt.wgsl");
/// Built-in scene: camera, vertex stage, shading.
pub const SCENE_WGSL: &str = include_str!("../shaders/scene.wgsl");
/// Built-in scene fragment stage through the virtual texture.
pub const SCENE_VT_WGSL: &str = include_str!("../shaders/scene_vt.wgsl");
/// Built-in scene fragment stage through the fully resident reference texture.
pub const SCENE_REFERENCE_WGSL: &str = include_str!("../shaders/scene_reference.wgsl");

/// Feedback compaction compute pass: the non-zero words of the feedback bitset as a
/// list of (word index, bits) pairs with a counter (see [`crate::feedback`]).
pub const FEEDBACK_COMPACT_WGSL: &str = include_str!("../shaders/feedback_compact.wgsl");

/// Level 1 of the tile pool: each uploaded slot's 2× downsample (hardware trilinear).
pub const SLOT_MIP_WGSL: &str = include_str!("../shaders/slot_mip.wgsl");

/// Material scenes (glTF): camera, vertex stage, material block and lighting.
pub const MATERIAL_WGSL: &str = include_str!("../shaders/material.wgsl");
/// Material scene fragment stage through the stacked virtual texture.
pub const MATERIAL_VT_WGSL: &str = include_str!("../shaders/material_vt.wgsl");
/// Material scene fragment stage through fully resident reference textures.
pub const MATERIAL_REFERENCE_WGSL: &str = include_str!("../shaders/material_reference.wgsl");

/// `src` with its fragment entry point `fs_main` forced to run the depth test before
/// the shader (`@early_depth_test(force)`, needs [`wgpu::Features::SHADER_EARLY_DEPTH_TEST`]).
/// A shader that writes feedback has side effects, so without this many drivers shade
/// every fragment, hidden ones included, before testing depth; with it, hidden fragments
/// are neither shaded nor request tiles. Only for shaders that never `discard` (an
/// alpha-tested fragment would write depth before it is discarded).
pub fn with_early_depth_test(src: &str) -> String {
    src.replacen("@fragment\nfn fs_main", "@fragment @early_depth_test(force)\nfn fs_main", 1)
}

/// The complete virtual-texture material-scene shader.
pub fn material_vt_source() -> String {
    [VT_WGSL, MATERIAL_WGSL, MATERIAL_VT_WGSL].join("\n")
}

/// The complete reference material-scene shader.
pub fn material_reference_source() -> String {
    [MATERIAL_WGSL, MATERIAL_REFERENCE_WGSL].join("\n")
}

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
        validate("material_vt", &material_vt_source());
        validate("material_reference", &material_reference_source());
        validate("feedback_compact", FEEDBACK_COMPACT_WGSL);
        validate("slot_mip", SLOT_MIP_WGSL);
        for (name, src) in [("scene_vt", scene_vt_source()), ("material_vt", material_vt_source())] {
            let early = with_early_depth_test(&src);
            assert!(early.contains("@early_depth_test(force)"), "{name}: no fs_main entry found");
            validate(&format!("{name} early depth"), &early);
        }
    }
}
