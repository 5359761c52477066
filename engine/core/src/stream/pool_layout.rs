//! The shape of the GPU tile pool for an atlas, decided and validated without a GPU:
//! pool formats, slot grid and page-table size, checked against the adapter's limits.

use std::path::PathBuf;

use crate::format::atlas::Atlas;
use crate::format::codec::TargetFormat;
use crate::format::pool_format::{self, FormatSupport};
use crate::format::tile::TextureLayout;
use crate::stream::page_table::MAX_SLOTS_PER_SIDE;

/// Largest mip count the shader's parameter block holds (`VtParams.mips` in `vt.wgsl`).
pub const MAX_SHADER_MIPS: usize = 20;

/// What the renderer reads off the adapter before a pool is planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuLimits {
    /// Block-compressed formats the device can sample.
    pub support: FormatSupport,
    /// Largest side of a 2D texture, in texels.
    pub max_texture_side: u32,
    /// Largest storage-buffer binding, in bytes (the page table is one).
    pub max_storage_binding: u64,
}

/// How a sample blends the two mips around its level of detail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Trilinear {
    /// Every slot also holds its tile's 2× downsample (border included) as level 1 of
    /// the pool texture, so a sample is one page-table lookup and one hardware-trilinear
    /// fetch. Needs a pool format the GPU can render into (the copies are made on the
    /// GPU after each upload) and an even slot side.
    #[default]
    Hardware,
    /// Two page-table lookups and two bilinear fetches blended in the shader.
    Software,
}

impl Trilinear {
    /// A short name for reports: `hardware` or `software`.
    pub fn name(self) -> &'static str {
        match self {
            Trilinear::Hardware => "hardware",
            Trilinear::Software => "software",
        }
    }
}

/// Why an atlas cannot be streamed through a pool on this adapter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolLayoutError {
    /// The atlas, the settings or the adapter's limits rule the pool out.
    #[error("{atlas}: {reason}")]
    Unfit {
        /// The atlas file.
        atlas: PathBuf,
        /// What does not fit, with the numbers.
        reason: String,
    },
}

/// The planned pool: one slot grid shared by one pool per stacked layer (or a single
/// pool for every layer), each in its own format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolLayout {
    /// The format of each pool: one, or one per layer of a stack.
    pub targets: Vec<TargetFormat>,
    /// Side of a stored tile in texels, border included (what a slot's upload holds).
    pub slot_texels: u32,
    /// Unused texels around the tile in each slot ([`slot_margin`]): 0, or the tile's
    /// border for block-compressed pools on the hardware trilinear path.
    pub slot_margin: u32,
    /// Slots across.
    pub slots_x: u32,
    /// Slots down.
    pub slots_y: u32,
    /// Whether the atlas is stacked (layers share tile ids and one page table).
    pub stacked: bool,
    /// The layouts that own tile ids (a stack's layers share layer 0's).
    pub owners: Vec<TextureLayout>,
    /// How samples blend mips; [`Trilinear::Hardware`] adds a level 1 to every pool.
    pub trilinear: Trilinear,
    /// Why the sampling path is what it is, for logs and reports.
    pub trilinear_reason: String,
    /// Why the pool's format is not the adapter's best, when that is so (a software
    /// adapter, [`pool_format::default_note`]), for logs and report headers.
    pub format_note: Option<String>,
}

impl PoolLayout {
    /// Plans the pool of about `pool_mib` MiB for `atlas` on an adapter with `limits`,
    /// in `forced` format when given, sampled with the `trilinear` path where the pool
    /// formats allow it (else the software path, and `trilinear_reason` says why).
    /// The pool's bytes include the level-1 copies of the hardware path. Refuses tiles of different sizes, too many mips,
    /// borderless tiles, tiles that are not whole blocks of a compressed pool, a pool
    /// of fewer than two slots or too few to pin each layer's coarsest tile, and a page
    /// table larger than the adapter binds.
    pub fn plan(
        atlas: &Atlas,
        pool_mib: u32,
        forced: Option<TargetFormat>,
        limits: GpuLimits,
        trilinear: Trilinear,
    ) -> Result<Self, PoolLayoutError> {
        let unfit = |reason: String| PoolLayoutError::Unfit { atlas: atlas.path().to_path_buf(), reason };
        let layers = atlas.layers();
        let Some(first) = layers.first() else { return Err(unfit("the atlas has no layer".into())) };
        let slot = first.layout.padded_tile_size();
        if let Some(l) = layers.iter().find(|l| l.layout.padded_tile_size() != slot) {
            return Err(unfit(format!(
                "layer '{}' has {}² tiles but layer 0 has {slot}²: one pool needs one tile size",
                l.name,
                l.layout.padded_tile_size()
            )));
        }
        if let Some(l) = layers.iter().find(|l| l.layout.mip_count() as usize > MAX_SHADER_MIPS) {
            return Err(unfit(format!("layer '{}' has more than {MAX_SHADER_MIPS} mips", l.name)));
        }
        if first.layout.border() == 0 {
            return Err(unfit(
                "tiles have no border, so filtering would read neighbouring pool slots; bake with --border 4"
                    .into(),
            ));
        }
        let stacked = atlas.is_stacked();
        let select = |codecs: &[crate::Codec]| {
            pool_format::select(codecs, limits.support, forced).map_err(|e| unfit(e.to_string()))
        };
        // A stack has one pool per layer, each in the best format for that layer's codec;
        // otherwise one pool holds every layer in one format.
        let targets: Vec<TargetFormat> = if stacked {
            layers.iter().map(|l| select(&[l.codec])).collect::<Result<_, _>>()?
        } else {
            let codecs: Vec<_> = layers.iter().map(|l| l.codec).collect();
            vec![select(&codecs)?]
        };
        let format_note = if forced.is_some() {
            None
        } else {
            let codecs: Vec<_> = layers.iter().map(|l| l.codec).collect();
            targets.first().and_then(|&t| pool_format::default_note(&codecs, limits.support, t))
        };
        if let Some(t) = targets.iter().find(|t| t.is_block_compressed()).filter(|_| !slot.is_multiple_of(4))
        {
            return Err(unfit(format!(
                "stored tiles are {slot}² texels, not a multiple of the 4×4 blocks of a {} pool",
                t.name()
            )));
        }
        let margin = slot_margin(&targets, first.layout.tile_size(), first.layout.border(), trilinear);
        let pitch = slot + 2 * margin;
        let (trilinear, trilinear_reason) = sampling_path(trilinear, &targets, pitch);
        let margin = if trilinear == Trilinear::Hardware { margin } else { 0 };
        let pitch = slot + 2 * margin;
        let slot_bytes: u64 = targets.iter().map(|&t| vram_bytes_per_slot(t, pitch, trilinear)).sum();
        if (u64::from(pool_mib) << 20) / slot_bytes.max(1) < 2 {
            return Err(unfit(format!(
                "a {pool_mib} MiB pool holds fewer than 2 tiles of {slot}² texels; give at least {} MiB",
                (2 * slot_bytes).div_ceil(1 << 20)
            )));
        }
        let max_side = (limits.max_texture_side / pitch.max(1)).min(u32::from(MAX_SLOTS_PER_SIDE));
        if let Some(note) = oversized_pool(pool_mib, slot_bytes, max_side) {
            tracing::warn!("{}: {note}", atlas.path().display());
        }
        let (slots_x, slots_y) = slot_grid(pool_mib, slot_bytes, max_side);
        let owners: Vec<TextureLayout> =
            if stacked { vec![first.layout] } else { layers.iter().map(|l| l.layout).collect() };
        if u64::from(slots_x) * u64::from(slots_y) < owners.len() as u64 + 1 {
            return Err(unfit(format!(
                "a pool of {} slots cannot pin the coarsest tile of {} layers",
                slots_x * slots_y,
                owners.len()
            )));
        }
        let entries: u64 = owners.iter().map(TextureLayout::tile_count).sum();
        if entries * 4 > limits.max_storage_binding {
            return Err(unfit(format!(
                "the page table needs {} MiB but the adapter binds at most {} MiB of storage buffer",
                (entries * 4) >> 20,
                limits.max_storage_binding >> 20
            )));
        }
        Ok(Self {
            targets,
            slot_texels: slot,
            slot_margin: margin,
            slots_x,
            slots_y,
            stacked,
            owners,
            trilinear,
            trilinear_reason,
            format_note,
        })
    }

    /// A plan from its parts, as a test or a simulation without an atlas builds one:
    /// the software path unless `trilinear` is hardware and the formats allow it.
    pub fn from_parts(
        targets: Vec<TargetFormat>,
        owners: Vec<TextureLayout>,
        slots: (u32, u32),
        stacked: bool,
        trilinear: Trilinear,
    ) -> Self {
        let slot_texels = owners.first().map_or(0, TextureLayout::padded_tile_size);
        let (tile, border) = owners.first().map_or((0, 0), |l| (l.tile_size(), l.border()));
        let margin = slot_margin(&targets, tile, border, trilinear);
        let (trilinear, trilinear_reason) = sampling_path(trilinear, &targets, slot_texels + 2 * margin);
        let slot_margin = if trilinear == Trilinear::Hardware { margin } else { 0 };
        Self {
            targets,
            slot_texels,
            slot_margin,
            slots_x: slots.0,
            slots_y: slots.1,
            stacked,
            owners,
            trilinear,
            trilinear_reason,
            format_note: None,
        }
    }

    /// Mip levels of each pool texture: 2 with hardware trilinear, else 1.
    pub fn pool_levels(&self) -> u32 {
        match self.trilinear {
            Trilinear::Hardware => 2,
            Trilinear::Software => 1,
        }
    }

    /// Bytes of GPU memory one slot takes over every pool, level-1 copies included.
    pub fn vram_bytes_per_slot(&self) -> u64 {
        self.targets.iter().map(|&t| vram_bytes_per_slot(t, self.slot_pitch(), self.trilinear)).sum()
    }

    /// Side of a slot in the pool texture: the tile and its margin on each side.
    pub fn slot_pitch(&self) -> u32 {
        self.slot_texels + 2 * self.slot_margin
    }

    /// Slots in the pool.
    pub fn slot_count(&self) -> u32 {
        self.slots_x * self.slots_y
    }

    /// Bytes of each pool's part of one loaded tile, in pool order.
    pub fn part_lengths(&self) -> Vec<usize> {
        self.targets.iter().map(|t| t.bytes_per_tile(self.slot_texels)).collect()
    }

    /// Bytes of one slot over every pool (a loaded tile is exactly this long).
    pub fn tile_bytes(&self) -> usize {
        self.part_lengths().iter().sum()
    }

    /// Page-table entries: every tile of every owning layout.
    pub fn page_table_entries(&self) -> usize {
        self.owners.iter().map(TextureLayout::tile_count).sum::<u64>() as usize
    }
}

/// The margin of unused texels around each tile in the slots of a pool of `targets` on
/// the `trilinear` path, for tiles of `tile`² payload texels and `border`.
///
/// A slot's level 1 is the quadrant of its parent tile ([`crate::stream::level_one`]),
/// which for an uncompressed pool is a copy at any offset. A block-compressed pool can
/// only copy whole 4×4 blocks, and level-1 texel `i` of a slot whose tile sits `m`
/// texels in is the parent's padded texel `i + (m + border) / 2 + (tile / 2) · q`
/// (quadrant `q`) from the start of the parent's slot, `m` texels before its tile: with
/// `m = border` and a border and half tile that are multiples of 4, that offset is
/// whole blocks and the copy stays inside the parent's written texels. So such pools
/// leave a margin of `border` around each tile (136² tiles in 144² slots, 12% more
/// memory a slot) and their level 1 is the atlas' own coarser mip, bit for bit; with
/// any other border or tile size, 0 (level 1 is then re-encoded on the GPU).
pub fn slot_margin(targets: &[TargetFormat], tile: u32, border: u32, trilinear: Trilinear) -> u32 {
    let block = targets.iter().any(|t| t.is_block_compressed());
    let aligned = border > 0 && border.is_multiple_of(4) && (tile / 2).is_multiple_of(4);
    if trilinear == Trilinear::Hardware && block && aligned { border } else { 0 }
}

/// Whether a pool of `target` with `slot_texels²` slots can keep each slot's 2×
/// downsample as its level 1 (hardware trilinear): an even side for RGBA8, rendered;
/// for BC1 and BC7, encoded on the GPU, a half side that is a whole number of 4×4
/// blocks, so each level-1 slot is copied block-aligned. ASTC and ETC2 have no GPU
/// encoder.
pub fn level_one_possible(target: TargetFormat, slot_texels: u32) -> bool {
    match target {
        TargetFormat::Rgba8 => slot_texels.is_multiple_of(2),
        TargetFormat::Bc7 | TargetFormat::Bc1 => slot_texels.is_multiple_of(8),
        _ => false,
    }
}

/// The sampling path a pool of `targets` with `slot`² slots gets when `wanted` is
/// asked for, and why.
fn sampling_path(wanted: Trilinear, targets: &[TargetFormat], slot: u32) -> (Trilinear, String) {
    if wanted == Trilinear::Software {
        return (Trilinear::Software, "software trilinear, as configured".into());
    }
    if let Some(t) = targets.iter().find(|t| !level_one_possible(**t, slot)) {
        let why = match t {
            TargetFormat::Rgba8 => format!("{slot}² slots have no exact half size"),
            TargetFormat::Bc7 | TargetFormat::Bc1 => {
                format!("half of a {slot}² slot is not a whole number of {} blocks", t.name())
            }
            _ => format!("the {} pool has no GPU encoder for its level-1 copies", t.name()),
        };
        return (Trilinear::Software, format!("software trilinear: {why}"));
    }
    let encoded = if targets.iter().any(|t| t.is_block_compressed()) { ", encoded on the GPU," } else { "" };
    (
        Trilinear::Hardware,
        format!(
            "hardware trilinear: each {slot}² slot keeps the next coarser mip ({}²: its parent tile's \
             quadrant, or its own 2x downsample{encoded} until the parent is resident) as level 1",
            slot / 2
        ),
    )
}

/// Bytes one slot of a `target` pool takes, with its level-1 copy on the hardware path.
fn vram_bytes_per_slot(target: TargetFormat, slot: u32, trilinear: Trilinear) -> u64 {
    let level0 = target.bytes_per_tile(slot) as u64;
    match trilinear {
        Trilinear::Hardware => level0 + target.bytes_per_tile(slot / 2) as u64,
        Trilinear::Software => level0,
    }
}

/// What to tell the user when a pool of `mib` MiB asks for more slots than [`slot_grid`]
/// makes (at most `max_side²` slots, and 2²⁴): the pool is smaller than asked.
pub fn oversized_pool(mib: u32, slot_bytes: u64, max_side: u32) -> Option<String> {
    let wanted = (u64::from(mib) << 20) / slot_bytes.max(1);
    let cap = u64::from(max_side).pow(2).min(1 << 24);
    (wanted > cap).then(|| {
        format!(
            "a {mib} MiB pool is more than the GPU can hold as one texture of {max_side}x{max_side} slots: \
             using the largest possible, {} MiB",
            (cap * slot_bytes) >> 20
        )
    })
}

/// The slot grid (across, down) of a `mib` MiB pool of `slot_bytes` slots whose sides
/// hold at most `max_side` slots: as square as possible, at most 2^24 slots.
pub fn slot_grid(mib: u32, slot_bytes: u64, max_side: u32) -> (u32, u32) {
    let wanted = (u64::from(mib) << 20) / slot_bytes.max(1);
    let n = wanted.min(u64::from(max_side).pow(2)).min(1 << 24);
    let slots_x = ((n as f64).sqrt().ceil() as u32).clamp(1, max_side.max(1));
    let slots_y = ((n / u64::from(slots_x)) as u32).clamp(1, max_side.max(1));
    (slots_x, slots_y)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn block_pools_on_the_hardware_path_get_a_margin_that_aligns_level_one_copies() {
        use TargetFormat::*;
        assert_eq!(slot_margin(&[Bc7], 128, 4, Trilinear::Hardware), 4);
        assert_eq!(slot_margin(&[Rgba8, Bc1], 128, 4, Trilinear::Hardware), 4);
        assert_eq!(slot_margin(&[Rgba8], 128, 4, Trilinear::Hardware), 0, "RGBA8 copies at any offset");
        assert_eq!(slot_margin(&[Bc7], 128, 4, Trilinear::Software), 0, "no level 1");
        assert_eq!(slot_margin(&[Bc7], 128, 2, Trilinear::Hardware), 0, "a border of 2 cannot align");
        assert_eq!(
            slot_margin(&[Bc7], 100, 4, Trilinear::Hardware),
            0,
            "half a tile of 50 is not whole blocks"
        );
        // The level-1 copy of quadrant 1 of a parent starts on a block and ends at its tile.
        let (pitch, margin, border, tile) = (144u32, 4u32, 4u32, 128u32);
        let start = margin + border + tile / 2 - (margin + border) / 2;
        assert!(start.is_multiple_of(4) && start + pitch / 2 == margin + 2 * border + tile);
    }
    use super::*;

    /// RGBA8, BC1 and BC7 pools keep a level 1 where its slots are whole blocks; ASTC
    /// and ETC2 pools, and slots without an exact block-aligned half, blend in software.
    #[test]
    fn the_sampling_path_follows_the_pool_format() {
        use TargetFormat::*;
        for (targets, slot, path) in [
            (&[Rgba8][..], 136, Trilinear::Hardware),
            (&[Bc7], 136, Trilinear::Hardware),
            (&[Bc1, Bc7], 136, Trilinear::Hardware),
            (&[Rgba8], 135, Trilinear::Software),
            (&[Bc7], 132, Trilinear::Software),
            (&[Astc4x4], 136, Trilinear::Software),
            (&[Bc7, Etc2Rgba], 136, Trilinear::Software),
        ] {
            let (got, why) = sampling_path(Trilinear::Hardware, targets, slot);
            assert_eq!(got, path, "{targets:?} {slot}: {why}");
        }
        assert!(sampling_path(Trilinear::Hardware, &[Bc7], 136).1.contains("encoded on the GPU"));
        assert!(sampling_path(Trilinear::Hardware, &[Astc4x4], 136).1.contains("no GPU encoder"));
        assert_eq!(sampling_path(Trilinear::Software, &[Rgba8], 136).0, Trilinear::Software);
    }

    #[test]
    fn an_oversized_pool_is_reported_with_the_largest_possible() {
        // 136² RGBA8 slots on an adapter with 16384-texel textures: 120² slots at most.
        let slot_bytes = 136 * 136 * 4;
        let note = oversized_pool(1_000_000, slot_bytes, 120).expect("too large");
        assert!(
            note.contains("1000000 MiB") && note.contains(&format!("{} MiB", (120 * 120 * slot_bytes) >> 20))
        );
        assert!(oversized_pool(128, slot_bytes, 120).is_none());
    }
}
