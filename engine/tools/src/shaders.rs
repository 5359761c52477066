//! The WGSL of the built-in scene and of glTF material scenes, through the virtual
//! texture and through the fully resident reference. The files live beside the engine's
//! own shaders (`engine/render/shaders`, the repository's `shaders/`), so that every
//! WGSL of the project is in one folder; the engine's package leaves them out.

pub use tessera::shaders::{VT_WGSL, with_early_depth_test, with_feedback_target, with_page_table};

/// Built-in scene: camera, vertex stage, shading.
pub const SCENE_WGSL: &str = include_str!("../../render/shaders/scene.wgsl");
/// Built-in scene fragment stage through the virtual texture.
pub const SCENE_VT_WGSL: &str = include_str!("../../render/shaders/scene_vt.wgsl");
/// Built-in scene fragment stage through the fully resident reference texture.
pub const SCENE_REFERENCE_WGSL: &str = include_str!("../../render/shaders/scene_reference.wgsl");

/// Material scenes (glTF): camera, vertex stage, material block and lighting.
pub const MATERIAL_WGSL: &str = include_str!("../../render/shaders/material.wgsl");
/// Material scene fragment stage through the stacked virtual texture.
pub const MATERIAL_VT_WGSL: &str = include_str!("../../render/shaders/material_vt.wgsl");
/// Material scene fragment stage through fully resident reference textures.
pub const MATERIAL_REFERENCE_WGSL: &str = include_str!("../../render/shaders/material_reference.wgsl");

/// The terrain's material composite (group 1), shared by its producer and its direct path.
pub const TERRAIN_WGSL: &str = include_str!("../../render/shaders/terrain.wgsl");
/// The terrain's camera, vertex stage and lighting.
pub const TERRAIN_VIEW_WGSL: &str = include_str!("../../render/shaders/terrain_view.wgsl");
/// The terrain's fragment stage through its produced virtual texture.
pub const TERRAIN_VT_WGSL: &str = include_str!("../../render/shaders/terrain_vt.wgsl");
/// The terrain's fragment stage evaluating the composite per pixel.
pub const TERRAIN_DIRECT_WGSL: &str = include_str!("../../render/shaders/terrain_direct.wgsl");
/// The terrain's tile producer (after tessera's `PRODUCE_WGSL` and [`TERRAIN_WGSL`]).
pub const TERRAIN_PRODUCE_WGSL: &str = include_str!("../../render/shaders/terrain_produce.wgsl");

/// The complete terrain shader through the produced virtual texture.
pub fn terrain_vt_source() -> String {
    [VT_WGSL, TERRAIN_VIEW_WGSL, TERRAIN_VT_WGSL].join("\n")
}

/// The complete terrain shader evaluating the composite per pixel.
pub fn terrain_direct_source() -> String {
    [TERRAIN_WGSL, TERRAIN_VIEW_WGSL, TERRAIN_DIRECT_WGSL].join("\n")
}

/// The terrain producer's own shader: what [`tessera::ProduceBatch::pipeline`] puts
/// after `produce.wgsl`.
pub fn terrain_produce_source() -> String {
    [TERRAIN_WGSL, TERRAIN_PRODUCE_WGSL].join("\n")
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
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tessera::PageTableStorage;
    use tessera::shaders::{with_early_depth_test, with_feedback_target, with_page_table};

    fn validate(name: &str, src: &str) {
        let module =
            naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }

    /// The drawers' shaders parse and validate without a GPU in every page-table storage,
    /// with a feedback target (no side effect left) and with forced early depth.
    #[test]
    fn drawer_shaders_validate() {
        validate("scene_reference", &scene_reference_source());
        validate("material_reference", &material_reference_source());
        validate("terrain_direct", &terrain_direct_source());
        validate(
            "terrain_produce",
            &format!("{}\n{}", tessera::shaders::PRODUCE_WGSL, terrain_produce_source()),
        );
        for (name, src) in [
            ("scene_vt", scene_vt_source()),
            ("material_vt", material_vt_source()),
            ("terrain_vt", terrain_vt_source()),
        ] {
            validate(name, &src);
            for storage in [PageTableStorage::Complete, PageTableStorage::Texture, PageTableStorage::Buffer] {
                validate(&format!("{name} {storage:?} page table"), &with_page_table(&src, storage));
            }
            let target = with_feedback_target(&with_page_table(&src, PageTableStorage::Complete));
            assert!(
                src.contains("atomicOr(") && !target.contains("atomicOr(") && !target.contains("atomicLoad("),
                "{name}: a side effect is left with the feedback target"
            );
            validate(&format!("{name} feedback target"), &target);
            let early = with_early_depth_test(&src);
            let forced = early.matches("@early_depth_test(force)").count();
            assert_eq!(forced, 2, "{name}: fs_main and fs_main_feedback forced");
            validate(&format!("{name} early depth"), &early);
        }
    }

    /// The scene shader shows transparent texels as the pass's clear colour: the same
    /// colour in both places.
    #[test]
    fn scene_background_is_the_clear_colour() {
        let c = crate::scene::BACKGROUND;
        let wgsl = format!("const BACKGROUND = vec3<f32>({:?}, {:?}, {:?});", c.r, c.g, c.b);
        assert!(SCENE_WGSL.contains(&wgsl), "scene.wgsl lacks `{wgsl}`");
    }
}
