//! WGSL sources. [`VT_WGSL`] is the virtual-texture API for user shaders: prepend it to
//! your own source (see `examples/embed.rs`); [`vt_module`] makes a copy of it at any
//! bind group under a name of your own, so that one shader can sample several virtual
//! textures.
//!
//! Why a generated copy rather than an import system (naga_oil, WESL): the API is one
//! self-contained file whose only parameters are its bind group and its names, so a
//! string transformation checked by naga in the tests needs no extra dependency, works
//! with any shader pipeline (plain `create_shader_module`, Bevy, naga_oil) and keeps the
//! source readable in error messages.

use crate::error::RenderError;
use crate::page_table::{PAGE_TABLE_ROW, PageTableStorage};

/// The virtual-texture lookup (`vt_sample`, `vt_sample_grad`, `vt_sample_layers`) at
/// bind group 1; the same as `vt_module(1, "vt")`.
pub const VT_WGSL: &str = include_str!("../shaders/vt.wgsl");

/// The bind group [`VT_WGSL`] declares.
pub const VT_GROUP: u32 = 1;

/// The layout entries of the `vt.wgsl` bindings, numbered from `first` (0 for the
/// group of its own; see [`vt_bindings_at`] for bindings inside a group of yours): the parameter block, the page table, the feedback bitset, pool 0,
/// the sampler, pools 1 and 2. Fragment stage only.
pub fn vt_layout_entries(page_table: PageTableStorage, first: u32) -> [wgpu::BindGroupLayoutEntry; 7] {
    let frag = wgpu::ShaderStages::FRAGMENT;
    let pool_texture = wgpu::BindingType::Texture {
        sample_type: wgpu::TextureSampleType::Float { filterable: true },
        view_dimension: wgpu::TextureViewDimension::D2,
        multisampled: false,
    };
    let storage = |read_only| wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Storage { read_only },
        has_dynamic_offset: false,
        min_binding_size: None,
    };
    let uniform = wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Uniform,
        has_dynamic_offset: false,
        min_binding_size: None,
    };
    let sampler = wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering);
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding: first + binding,
        visibility: frag,
        ty,
        count: None,
    };
    [
        entry(0, uniform),
        entry(1, page_table.binding_type()),
        entry(2, storage(false)),
        entry(3, pool_texture),
        entry(4, sampler),
        entry(5, pool_texture),
        entry(6, pool_texture),
    ]
}

/// [`VT_WGSL`] with its bindings moved into a bind group of the caller's, such as a
/// material's: `@group(group) @binding(first + i)` for binding `i` of
/// [`vt_layout_entries`]. `group` is pasted as written, so it may be a
/// number or a constant expression of the shading language in use (Bevy's WESL
/// materials write `constants::MATERIAL_BIND_GROUP`).
pub fn vt_bindings_at(group: &str, first: u32) -> String {
    let mut out = VT_WGSL.to_owned();
    for binding in 0..7 {
        out = out.replace(
            &format!("@group({VT_GROUP}) @binding({binding})"),
            &format!("@group({group}) @binding({})", first + binding),
        );
    }
    out
}

/// [`VT_WGSL`] at bind group `group` with its names taken from `name`: every identifier
/// `vt_x` becomes `name_x`, `vt` becomes `name`, and the struct names `VtX` become
/// `NameX` (`name` in UpperCamelCase). For example `vt_module(2, "detail")` declares
/// `detail_sample(uv, frag_coord)`, `detail_sample_grad(...)` and the struct
/// `DetailLayers` at `@group(2)`. Concatenate one module per virtual texture (each at
/// its own group) in front of your shader, and bind each texture's
/// [`crate::VirtualTextures::bind_group`] at its group.
///
/// `name` must be a lowercase WGSL identifier (`a-z`, digits, single `_` inside, at
/// most 32 characters), and `group` below the device's `max_bind_groups`
/// (4 by default); anything else is a [`RenderError::Config`].
pub fn vt_module(group: u32, name: &str) -> Result<String, RenderError> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('_')
        && !name.contains("__")
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(RenderError::Config(format!(
            "virtual-texture shader name {name:?}: use a lowercase identifier such as \"albedo\" or \"detail_map\""
        )));
    }
    if group >= 8 {
        return Err(RenderError::Config(format!(
            "virtual-texture bind group {group}: wgpu allows groups 0 to 7"
        )));
    }
    let camel: String = name
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    let grouped = VT_WGSL.replace(&format!("@group({VT_GROUP})"), &format!("@group({group})"));
    Ok(rename_identifiers(&grouped, |ident| {
        if ident == "vt" {
            Some(name.to_owned())
        } else if let Some(rest) = ident.strip_prefix("vt_") {
            Some(format!("{name}_{rest}"))
        } else {
            match ident.strip_prefix("Vt") {
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_uppercase()) => {
                    Some(format!("{camel}{rest}"))
                }
                _ => None,
            }
        }
    }))
}

/// `src` with every identifier (`[A-Za-z_][A-Za-z0-9_]*`, comments included) that
/// `rename` maps replaced by its new name.
fn rename_identifiers(src: &str, mut rename: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(src.len() + src.len() / 8);
    let mut rest = src;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        // A letter inside a number literal (`1u`, `0x1f`, `2e3`) is not an identifier.
        let inside_number = rest[..start].ends_with(|c: char| c.is_ascii_alphanumeric());
        let len = rest[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - start);
        let ident = &rest[start..start + len];
        out.push_str(&rest[..start]);
        match rename(ident).filter(|_| !inside_number) {
            Some(new) => out.push_str(&new),
            None => out.push_str(ident),
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// `src` (one or more virtual-texture modules with a shader of yours) reading the page
/// table from `storage`: [`VT_WGSL`] and [`vt_module`] declare the storage buffer; pass
/// the complete source through this for virtual textures made with
/// [`PageTableStorage::Texture`] ([`crate::VtConfig::page_table`]), which must read a
/// texture instead. For [`PageTableStorage::Complete`] (the default) the source reads
/// correctly as it is; this drops the fallback climb it never takes, so each lookup is
/// one load with no loop. Lines other than the page-table declaration, its `_entry`
/// accessor and the climb are left as they are.
pub fn with_page_table(src: &str, storage: PageTableStorage) -> String {
    if storage == PageTableStorage::Complete {
        // One load, no loop: the lines between the climb markers go.
        let mut out = String::with_capacity(src.len());
        let mut skipping = false;
        for line in src.split_inclusive('\n') {
            match line.trim() {
                "// climb: begin" => skipping = true,
                "// climb: end" => skipping = false,
                _ if !skipping => out.push_str(line),
                _ => {}
            }
        }
        return out;
    }
    if storage != PageTableStorage::Texture {
        return src.to_owned();
    }
    let mut out = String::with_capacity(src.len() + 256);
    for line in src.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let ending = &line[body.len()..];
        if let Some((head, name)) = body
            .strip_suffix("_page_table: array<u32>;")
            .and_then(|h| h.rsplit_once("var<storage, read> "))
            .filter(|(h, _)| h.contains("@binding(1)"))
        {
            out.push_str(&format!("{head}var {name}_page_table: texture_2d<u32>;{ending}"));
        } else if let Some(name) = body
            .strip_suffix("_page_table[i]; }")
            .and_then(|h| h.rsplit_once("{ return "))
            .filter(|(h, _)| h.starts_with("fn ") && h.ends_with("(i: u32) -> u32 "))
            .map(|(_, name)| name)
        {
            let (head, _) = body.split_once("{ return ").unwrap_or((body, ""));
            let row = PAGE_TABLE_ROW;
            let shift = row.trailing_zeros();
            out.push_str(&format!(
                "{head}{{ return textureLoad({name}_page_table, vec2<u32>(i & {}u, i >> {shift}u), 0).x; }}{ending}",
                row - 1
            ));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// `src` (one or more virtual-texture modules with a shader of yours) writing its
/// feedback to a colour target instead of the storage bitset: the sampling functions
/// only remember the tile they wanted (`vt_request()`, or `NAME_request()` for a
/// [`vt_module`] named `NAME`), and the fragment shader writes that value to an extra
/// `@location` of format [`crate::FEEDBACK_TARGET_FORMAT`], attached with
/// [`crate::VirtualTextures::feedback_attachment`]. The shader then has no side effect
/// (no storage writes or atomics), so every driver keeps early depth testing and
/// skips hidden fragments without `@early_depth_test(force)`; after the passes, a
/// compute pass reads one pixel per feedback block of the target into the bitset.
/// One request per pixel: where a shader samples a virtual texture several times, the
/// last sample's tile is the one requested (the storage path requests every sample's),
/// so sample the texture whose detail matters most last, or keep such shaders on the
/// storage path. Lines other than the feedback store are left as they are.
pub fn with_feedback_target(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut skipping = false;
    for line in src.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed == "// feedback storage: begin" {
            skipping = true;
        } else if trimmed == "// feedback storage: end" {
            skipping = false;
        } else if let Some(code) = trimmed.strip_prefix("// feedback target: ") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(indent);
            out.push_str(code);
            out.push('\n');
        } else if !skipping {
            out.push_str(line);
        }
    }
    out
}

/// Feedback compaction compute pass: the non-zero words of the feedback bitset as a
/// list of (word index, bits) pairs with a counter (see [`crate::feedback`]).
pub const FEEDBACK_COMPACT_WGSL: &str = include_str!("../shaders/feedback_compact.wgsl");

/// Feedback target resolve compute pass: the requests a frame wrote to the feedback
/// target, one pixel per feedback block, into the bitset (see [`with_feedback_target`]).
pub const FEEDBACK_RESOLVE_WGSL: &str = include_str!("../shaders/feedback_resolve.wgsl");

/// The complete page table's update pass: a frame's eviction and insertion rectangles
/// (see [`crate::page_table_update`]).
pub const PAGE_TABLE_UPDATE_WGSL: &str = include_str!("../shaders/page_table_update.wgsl");

/// Level 1 of the tile pool: each uploaded slot's 2× downsample (hardware trilinear).
pub const SLOT_MIP_WGSL: &str = include_str!("../shaders/slot_mip.wgsl");

/// The vertex stage of a tile producer (runtime virtual textures, [`crate::produce`]):
/// `vt_produce_vertex(vertex_index, instance_index)` over group 0 (the batch's
/// instances and pool size) and `vt_produce_uv` for the fragment stage. Prepend it to a
/// producer's own WGSL.
pub const PRODUCE_WGSL: &str = include_str!("../shaders/produce.wgsl");

/// Level 1 of a BC1 / BC7 tile pool: each uploaded slot's 2× downsample, encoded on the
/// GPU into blocks that are copied into level 1 (hardware trilinear for those pools).
pub const SLOT_MIP_ENCODE_WGSL: &str = include_str!("../shaders/slot_mip_encode.wgsl");

/// `src` with its fragment entry points `fs_main` and `fs_main…` (`fs_main_feedback`)
/// forced to run the depth test before the shader (`@early_depth_test(force)`, needs
/// [`wgpu::Features::SHADER_EARLY_DEPTH_TEST`]).
/// A shader that writes feedback has side effects, so without this many drivers shade
/// every fragment, hidden ones included, before testing depth; with it, hidden fragments
/// are neither shaded nor request tiles. Only for shaders that never `discard` (an
/// alpha-tested fragment would write depth before it is discarded).
pub fn with_early_depth_test(src: &str) -> String {
    src.replace("@fragment\nfn fs_main", "@fragment @early_depth_test(force)\nfn fs_main")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The shader climbs as many mips per step as the CPU table fills fallbacks deep, plus one.
    #[test]
    fn the_fallback_step_matches_the_page_table() {
        let depth = tessera_core::stream::page_table::FALLBACK_DEPTH;
        assert!(VT_WGSL.contains(&format!("const vt_fallback_step: u32 = {}u;", depth + 1)));
    }

    /// The default module is `VT_WGSL` itself.
    #[test]
    fn vt_module_of_the_default_name_is_vt_wgsl() {
        assert_eq!(vt_module(VT_GROUP, "vt").unwrap(), VT_WGSL);
    }

    /// Two virtual textures at two groups in one shader validate, each sampled through
    /// its own names, and no `vt` name or group 1 binding is left in either copy.
    #[test]
    fn two_renamed_modules_share_one_shader() {
        let albedo = vt_module(0, "albedo").unwrap();
        let detail = vt_module(2, "detail").unwrap();
        for (module, group) in [(&albedo, 0), (&detail, 2)] {
            assert!(!module.contains("@group(1)"));
            assert_eq!(
                module.matches(&format!("@group({group})")).count(),
                VT_WGSL.matches("@group(1)").count()
            );
            let mut leftovers = Vec::new();
            rename_identifiers(module, |ident| {
                if ident == "vt" || ident.starts_with("vt_") || ident.starts_with("Vt") {
                    leftovers.push(ident.to_owned());
                }
                None
            });
            assert!(leftovers.is_empty(), "names left unrenamed: {leftovers:?}");
        }
        assert!(albedo.contains("fn albedo_sample(") && albedo.contains("struct AlbedoLayers"));
        let user = r#"
@fragment
fn fs_main(@builtin(position) frag: vec4<f32>, @location(0) uv: vec2<f32>) -> @location(0) vec4<f32> {
    let g = detail_sample_grad(uv * 8.0, dpdx(uv * 8.0), dpdy(uv * 8.0), frag);
    let l: AlbedoLayers = albedo_sample_layers(uv, dpdx(uv), dpdy(uv), frag, 20.0);
    return albedo_sample(uv, frag) * g + l.l1;
}
"#;
        validate("two textures", &[albedo.as_str(), detail.as_str(), user].join("\n"));
    }

    /// Names that are not lowercase identifiers, and groups wgpu cannot have, are errors.
    #[test]
    fn vt_module_refuses_bad_names_and_groups() {
        for bad in ["", "Albedo", "1st", "a-b", "trailing_", "two__parts", "caf\u{e9}", &"x".repeat(33)] {
            let e = vt_module(1, bad).unwrap_err().to_string();
            assert!(e.contains("lowercase identifier"), "{bad:?}: {e}");
        }
        assert!(vt_module(8, "vt").unwrap_err().to_string().contains("groups 0 to 7"));
    }

    /// Number literals and identifiers that merely contain `vt` are left alone.
    #[test]
    fn renaming_touches_whole_identifiers_only() {
        let src = "let vt_a = 1u + vtx + avt_b + Vtx + VtTap(0x1f); // vt";
        let out = rename_identifiers(src, |i| match i {
            "vt_a" => Some("n_a".into()),
            "vt" => Some("n".into()),
            "VtTap" => Some("NTap".into()),
            "u" | "x1f" | "f" => Some("BROKEN".into()),
            _ => None,
        });
        assert_eq!(out, "let n_a = 1u + vtx + avt_b + Vtx + NTap(0x1f); // n");
    }

    fn validate(name: &str, src: &str) {
        let module =
            naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }

    /// Every shader of the crate parses and validates without a GPU, in every page-table
    /// storage and with a feedback target (the drawers' shaders are checked in
    /// tessera-tools).
    #[test]
    fn shaders_validate() {
        validate("vt alone", VT_WGSL);
        validate("feedback_compact", FEEDBACK_COMPACT_WGSL);
        validate("feedback_resolve", FEEDBACK_RESOLVE_WGSL);
        validate("slot_mip", SLOT_MIP_WGSL);
        validate("produce", PRODUCE_WGSL);
        validate("slot_mip_encode", SLOT_MIP_ENCODE_WGSL);
        validate("page_table_update", PAGE_TABLE_UPDATE_WGSL);
        for (name, src) in [("vt", VT_WGSL.to_owned()), ("vt_module", vt_module(2, "albedo").unwrap())] {
            let complete = with_page_table(&src, PageTableStorage::Complete);
            assert!(src.contains("for (var i = 0u; i < 8u") && !complete.contains("for (var i = 0u; i < 8u"));
            assert_eq!(complete.matches("_entry(").count() + 1, src.matches("_entry(").count(), "{name}");
            validate(&format!("{name} complete page table"), &complete);
            let texture = with_page_table(&src, PageTableStorage::Texture);
            assert!(!texture.contains("array<u32>;"), "{name}: the buffer is left");
            validate(&format!("{name} texture page table"), &texture);
            assert_eq!(with_page_table(&src, PageTableStorage::Buffer), src);
            // No storage write or atomic is left: the shader has no side effect.
            let target = with_feedback_target(&complete);
            assert!(
                src.contains("atomicOr(") && !target.contains("atomicOr(") && !target.contains("atomicLoad(")
            );
            let code = |pattern: &str| {
                target.lines().map(str::trim).filter(|l| !l.starts_with("//") && l.contains(pattern)).count()
            };
            // One store of the request, and a note of the tile found after each lookup
            // of the wanted mip (hardware trilinear, software trilinear, layers).
            assert_eq!(code("_request_value = "), 2, "{name}");
            assert_eq!(code("_note_found("), 4, "{name}");
            assert!(
                !target.contains("// feedback storage:") && !target.contains("// feedback target:"),
                "{name}"
            );
            validate(&format!("{name} feedback target"), &target);
        }
        for (group, name) in [(0, "albedo"), (3, "detail_map2")] {
            validate(&format!("vt_module {name}"), &vt_module(group, name).unwrap());
            let texture = with_page_table(&vt_module(group, name).unwrap(), PageTableStorage::Texture);
            assert!(texture.contains(&format!("var {name}_page_table: texture_2d<u32>;")), "{texture}");
            assert!(
                texture.contains(&format!(
                    "textureLoad({name}_page_table, vec2<u32>(i & 4095u, i >> 12u), 0).x"
                ))
            );
            validate(&format!("vt_module {name} texture page table"), &texture);
        }
        assert!(
            with_feedback_target(&vt_module(0, "albedo").unwrap())
                .contains("    albedo_request_value = albedo_entry_index(uv, m) + 1u;\n")
        );
    }
}
