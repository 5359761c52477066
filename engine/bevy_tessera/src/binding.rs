//! `VirtualTexture` as a material extension: its bind group (the virtual texture at
//! bindings 100 to 106, the region at 107), its pipelines (feedback moved to the depth
//! prepass where the camera has one) and the `tessera::vt` WESL module.

use super::*;

impl MaterialExtension for VirtualTexture {
    fn fragment_shader() -> ShaderRef {
        ShaderRef::Handle(MATERIAL_SHADER)
    }

    fn specialize(
        _pipeline: &MaterialExtensionPipeline,
        descriptor: &mut RenderPipelineDescriptor,
        _layout: &MeshVertexBufferLayoutRef,
        key: MaterialExtensionKey<Self>,
    ) -> Result<(), SpecializedMeshPipelineError> {
        if !key.bind_group_data.main_pass_feedback {
            move_feedback_to_prepass(descriptor, key.mesh_key);
        }
        Ok(())
    }
}

/// Whether a pipeline of this key (main pass or prepass) leaves the material's feedback
/// to the camera's depth prepass: the view has a depth-only prepass (no normal, motion
/// vector or deferred prepass, whose fragment shader is Bevy's) and the material is
/// opaque and never discards (blended meshes are not in the prepass, and an alpha test
/// keeps Bevy's prepass shader). The main pass of such a material then has no side
/// effect, so the driver tests depth before shading and hidden fragments are not lit;
/// the prepass records the feedback, cheaply, before it. Other keys keep the feedback
/// in the main pass.
pub fn feedback_in_prepass(key: MeshPipelineKey) -> bool {
    key.contains(MeshPipelineKey::DEPTH_PREPASS)
        && !key.intersects(
            MeshPipelineKey::NORMAL_PREPASS
                | MeshPipelineKey::MOTION_VECTOR_PREPASS
                | MeshPipelineKey::DEFERRED_PREPASS
                | MeshPipelineKey::MAY_DISCARD,
        )
        && key.intersection(MeshPipelineKey::BLEND_RESERVED_BITS) == MeshPipelineKey::BLEND_OPAQUE
}

/// [`VirtualTexture::specialize`]'s work, apart for tests: where [`feedback_in_prepass`]
/// holds, a camera's depth-only prepass pipeline (Bevy builds it without a fragment
/// stage) gets [`PREPASS_SHADER`] as its fragment stage, and the main pass pipeline
/// the [`FEEDBACK_IN_PREPASS_DEF`] feature. Shadow views' prepasses (they carry a
/// projection in their key, a camera's prepass does not) are left as Bevy built them.
pub(super) fn move_feedback_to_prepass(descriptor: &mut RenderPipelineDescriptor, key: MeshPipelineKey) {
    if !feedback_in_prepass(key) {
        return;
    }
    let prepass = descriptor
        .vertex
        .shader_defs
        .iter()
        .any(|d| matches!(d, ShaderDefVal::Bool(n, true) if n == "PREPASS_PIPELINE"));
    if prepass {
        let shadow = key.intersects(MeshPipelineKey::VIEW_PROJECTION_RESERVED_BITS);
        // A mesh without uvs has nothing to record (and no location 0 to read).
        let uvs = descriptor
            .vertex
            .shader_defs
            .iter()
            .any(|d| matches!(d, ShaderDefVal::Bool(n, true) if n == "VERTEX_UVS_A"));
        if !shadow && uvs && descriptor.fragment.is_none() {
            descriptor.fragment = Some(FragmentState {
                shader: PREPASS_SHADER,
                shader_defs: descriptor.vertex.shader_defs.clone(),
                entry_point: Some("fragment".into()),
                targets: Vec::new(),
                constants: Vec::new(),
            });
        }
    } else if let Some(fragment) = descriptor.fragment.as_mut() {
        fragment.shader_defs.push(FEEDBACK_IN_PREPASS_DEF.into());
    }
}

impl AsBindGroup for VirtualTexture {
    type Data = VirtualTextureKey;
    type Param = SRes<VtRenderState>;

    fn label() -> &'static str {
        "tessera_virtual_texture"
    }

    fn bind_group_data(&self) -> Self::Data {
        VirtualTextureKey { main_pass_feedback: self.main_pass_feedback }
    }

    fn build_bind_group(
        &self,
        _layout: &BindGroupLayout,
        render_device: &RenderDevice,
        state: &mut SystemParamItem<'_, '_, Self::Param>,
        _force_no_bindless: bool,
        output: &mut BindGroupBuilder,
    ) -> Result<(), AsBindGroupError> {
        let (resources, layers) = match state.atlases.get(&self.atlas) {
            Some(Streamed::Open(s)) => {
                let layer = s.vt.layer(0).ok_or(AsBindGroupError::RetryNextUpdate)?;
                let layers = if s.vt.is_stacked() { s.vt.atlas().layers().len() } else { 1 };
                (s.vt.binding_resources(layer).clone(), layers)
            }
            Some(Streamed::Failed(_)) => {
                (state.fallback.clone().ok_or(AsBindGroupError::RetryNextUpdate)?, 0)
            }
            // Not opened yet (it is, before the next frame's materials are prepared).
            None => return Err(AsBindGroupError::RetryNextUpdate),
        };
        let page_table = match resources.page_table {
            tessera::PageTableResource::Buffer(b) => b,
            // The plugin asks for buffer page tables (the layout is static).
            tessera::PageTableResource::Texture(_) => return Err(AsBindGroupError::RetryNextUpdate),
        };
        let view = |v: &wgpu::TextureView| {
            UnpreparedBindingResource::TextureView(TextureViewDimension::D2, v.clone().into())
        };
        let b = FIRST_BINDING;
        output.push((b, UnpreparedBindingResource::Buffer(resources.params.into())));
        output.push((b + 1, UnpreparedBindingResource::Buffer(page_table.into())));
        output.push((b + 2, UnpreparedBindingResource::Buffer(resources.feedback.into())));
        output.push((b + 3, view(&resources.pools[0])));
        output.push((
            b + 4,
            UnpreparedBindingResource::Sampler(SamplerBindingType::Filtering, resources.sampler.into()),
        ));
        output.push((b + 5, view(&resources.pools[1])));
        output.push((b + 6, view(&resources.pools[2])));
        let region = render_device.create_buffer_with_data(&BufferInitDescriptor {
            label: Some("tessera region"),
            contents: &self.region.block(layers).map(f32::to_le_bytes).concat(),
            usage: BufferUsages::UNIFORM,
        });
        output.push((REGION_BINDING, UnpreparedBindingResource::Buffer(region)));
        Ok(())
    }

    fn bind_group_layout_entries(
        _render_device: &RenderDevice,
        _force_no_bindless: bool,
    ) -> Vec<BindGroupLayoutEntry>
    where
        Self: Sized,
    {
        let mut entries =
            tessera::shaders::vt_layout_entries(PageTableStorage::Complete, FIRST_BINDING).to_vec();
        entries.push(BindGroupLayoutEntry {
            binding: REGION_BINDING,
            visibility: ShaderStages::FRAGMENT,
            ty: BindingType::Buffer {
                ty: BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
        entries
    }
}

/// The `tessera::vt` WESL module: Tessera's lookup on the material bind group with the
/// complete page table (one load, no climb; updated on the GPU in the plugin's own
/// submission before Bevy's passes), `vt_enabled()`, and two `vt_mark`s: the one that
/// records feedback into the storage bitset, and under [`FEEDBACK_IN_PREPASS_DEF`] one
/// that records nothing (the depth prepass did).
pub(super) fn vt_module() -> String {
    let src = vt_source("constants::MATERIAL_BIND_GROUP");
    let mark = "fn vt_mark(uv: vec2<f32>, m: u32, frag: vec4<f32>) {";
    let quiet = format!("@if({FEEDBACK_IN_PREPASS_DEF})\n{mark}}}\n@if(!{FEEDBACK_IN_PREPASS_DEF})\n{mark}");
    src.replacen(mark, &quiet, 1)
}

/// Tessera's lookup with the complete page table at bind group `group` (a number, or
/// WESL's constant), its bindings from [`FIRST_BINDING`], and `vt_enabled()`: the text
/// both the `tessera::vt` module and the prepass are built on.
fn vt_source(group: &str) -> String {
    let src = tessera::shaders::with_page_table(
        &tessera::shaders::vt_bindings_at(group, FIRST_BINDING),
        PageTableStorage::Complete,
    );
    format!(
        "{src}\n// False for an atlas that failed to open (its parameter block is empty).\nfn vt_enabled() -> bool {{ return vt.size.x > 0.0; }}\n"
    )
}

/// [`PREPASS_SHADER`]'s source: plain WGSL (for its `@early_depth_test(force)`), the
/// virtual texture's lookup and feedback and the region block at the material bind group
/// ([`MATERIAL_BIND_GROUP_INDEX`]) in front of `prepass.wgsl`'s entry point. Without
/// `early_depth` (a device without `SHADER_EARLY_DEPTH_TEST`, such as a browser's) the
/// attribute is left out: the prepass then records for hidden fragments too.
pub(super) fn prepass_wgsl(early_depth: bool) -> String {
    let group = MATERIAL_BIND_GROUP_INDEX.to_string();
    let region = include_str!("region.wesl").replace("constants::MATERIAL_BIND_GROUP", &group);
    let entry = include_str!("prepass.wgsl");
    let entry = if early_depth { entry.into() } else { entry.replace("@early_depth_test(force)\n", "") };
    format!("{}\n{region}\n{entry}", vt_source(&group))
}

/// [`PREPASS_SHADER`] as plain WGSL ([`prepass_wgsl`]), forcing early depth or not.
pub(super) fn prepass_shader(early_depth: bool) -> Shader {
    Shader::from_wgsl(prepass_wgsl(early_depth), PREPASS_FILE)
}

/// Keeps every [`TesseraMaterial`]'s [`VirtualTexture::main_pass_feedback`] equal to
/// whether its base transmits light specularly (Bevy draws those outside the depth
/// prepass), so that their feedback stays in the main pass. Touches only materials that
/// differ.
pub(super) fn sync_main_pass_feedback(mut materials: ResMut<Assets<TesseraMaterial>>) {
    let stale: Vec<_> = materials
        .iter()
        .filter(|(_, m)| m.extension.main_pass_feedback != transmits(&m.base))
        .map(|(id, _)| id)
        .collect();
    for id in stale {
        if let Some(mut m) = materials.get_mut(id) {
            m.extension.main_pass_feedback = transmits(&m.base);
        }
    }
}

/// Whether Bevy draws `base` in the transmissive phase (it reads the view's
/// transmission texture), which the depth prepass leaves out.
pub(super) fn transmits(base: &StandardMaterial) -> bool {
    base.specular_transmission > 0.0
}
