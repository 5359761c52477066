//! Choosing the GPU pool's texel format from what the adapter supports and how the
//! atlas' layers are encoded. GPU-free so that every combination is tested.

use crate::format::codec::{Codec, TargetFormat};

/// Which block-compressed texture families the adapter can sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FormatSupport {
    /// BC1–BC7 (desktop GPUs).
    pub bc: bool,
    /// ASTC LDR (most mobile GPUs, Apple).
    pub astc: bool,
    /// ETC2 / EAC (OpenGL ES 3 class GPUs).
    pub etc2: bool,
    /// The adapter is a software rasteriser (Mesa's llvmpipe / lavapipe, WARP,
    /// SwiftShader): it decodes block formats on the CPU at every sample, and compiling
    /// the compute shader that encodes a block pool's level-1 copies takes llvmpipe
    /// minutes, so Basis atlases default to an RGBA8 pool there ([`select`]).
    pub software: bool,
}

impl FormatSupport {
    /// Whether `format` can be used.
    pub fn supports(&self, format: TargetFormat) -> bool {
        match format {
            TargetFormat::Bc7 | TargetFormat::Bc1 => self.bc,
            TargetFormat::Astc4x4 => self.astc,
            TargetFormat::Etc2Rgba => self.etc2,
            _ => true,
        }
    }
}

/// Why a forced pool format cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolFormatError {
    /// The adapter cannot sample the format.
    #[error("the GPU cannot sample {0} textures (pick another --pool-format or leave it to the adapter)")]
    Unsupported(&'static str),
    /// A layer's codec cannot be turned into the format.
    #[error(
        "layer codec {codec} cannot be transcoded to {format}: only Basis layers (etc1s, uastc) can fill a block-compressed pool"
    )]
    NotTranscodable {
        /// The layer's codec.
        codec: &'static str,
        /// The format asked for.
        format: &'static str,
    },
}

/// The pool format for an atlas whose layers use `codecs`: `forced` when given and
/// possible; otherwise the best block format the adapter has when every layer is Basis
/// (BC7 on desktop, then ASTC 4×4, then ETC2) on a hardware adapter, else RGBA8 (see
/// [`FormatSupport::software`]; [`default_note`] says why in a report).
pub fn select(
    codecs: &[Codec],
    support: FormatSupport,
    forced: Option<TargetFormat>,
) -> Result<TargetFormat, PoolFormatError> {
    let all_basis = !codecs.is_empty() && codecs.iter().all(|c| c.is_basis());
    if let Some(f) = forced {
        if !support.supports(f) {
            return Err(PoolFormatError::Unsupported(f.name()));
        }
        if f.is_block_compressed()
            && let Some(c) = codecs.iter().find(|c| !c.is_basis())
        {
            return Err(PoolFormatError::NotTranscodable { codec: c.name(), format: f.name() });
        }
        return Ok(f);
    }
    if !all_basis || support.software {
        return Ok(TargetFormat::Rgba8);
    }
    Ok([TargetFormat::Bc7, TargetFormat::Astc4x4, TargetFormat::Etc2Rgba]
        .into_iter()
        .find(|f| support.supports(*f))
        .unwrap_or(TargetFormat::Rgba8))
}

/// Why [`select`] chose `chosen` without a forced format, when that is not simply the
/// adapter's best: a line for report headers (`None` otherwise).
pub fn default_note(codecs: &[Codec], support: FormatSupport, chosen: TargetFormat) -> Option<String> {
    let all_basis = !codecs.is_empty() && codecs.iter().all(|c| c.is_basis());
    let had_block = [TargetFormat::Bc7, TargetFormat::Astc4x4, TargetFormat::Etc2Rgba]
        .into_iter()
        .find(|f| support.supports(*f));
    match had_block {
        Some(block) if all_basis && support.software && chosen == TargetFormat::Rgba8 => Some(format!(
            "rgba8 pool on a software adapter (it could sample {}, but decodes it on the CPU per sample and \
             compiles the level-1 encoder for minutes); --pool-format {} to force it",
            block.name(),
            block.name()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const NONE: FormatSupport = FormatSupport { bc: false, astc: false, etc2: false, software: false };
    const DESKTOP: FormatSupport = FormatSupport { bc: true, astc: false, etc2: false, software: false };
    const MOBILE: FormatSupport = FormatSupport { bc: false, astc: true, etc2: true, software: false };
    const GLES: FormatSupport = FormatSupport { bc: false, astc: false, etc2: true, software: false };
    const ALL: FormatSupport = FormatSupport { bc: true, astc: true, etc2: true, software: false };
    const LAVAPIPE: FormatSupport = FormatSupport { bc: true, astc: false, etc2: false, software: true };

    #[test]
    fn software_adapters_default_to_rgba8_for_basis() {
        let basis = [Codec::Etc1s];
        assert_eq!(select(&basis, LAVAPIPE, None), Ok(TargetFormat::Rgba8));
        let note = default_note(&basis, LAVAPIPE, TargetFormat::Rgba8).unwrap();
        assert!(note.contains("software adapter") && note.contains("--pool-format bc7"), "{note}");
        // Forcing still works, and says nothing.
        assert_eq!(select(&basis, LAVAPIPE, Some(TargetFormat::Bc7)), Ok(TargetFormat::Bc7));
        assert_eq!(default_note(&basis, DESKTOP, TargetFormat::Bc7), None);
        assert_eq!(default_note(&[Codec::Lz4], LAVAPIPE, TargetFormat::Rgba8), None);
    }

    #[test]
    fn best_format_per_adapter() {
        let basis = [Codec::Etc1s, Codec::Uastc];
        assert_eq!(select(&basis, DESKTOP, None), Ok(TargetFormat::Bc7));
        assert_eq!(select(&basis, ALL, None), Ok(TargetFormat::Bc7));
        assert_eq!(select(&basis, MOBILE, None), Ok(TargetFormat::Astc4x4));
        assert_eq!(select(&basis, GLES, None), Ok(TargetFormat::Etc2Rgba));
        assert_eq!(select(&basis, NONE, None), Ok(TargetFormat::Rgba8));
    }

    #[test]
    fn raw_and_lz4_layers_need_rgba8() {
        assert_eq!(select(&[Codec::Lz4], ALL, None), Ok(TargetFormat::Rgba8));
        assert_eq!(select(&[Codec::Etc1s, Codec::Raw], ALL, None), Ok(TargetFormat::Rgba8));
        assert!(matches!(
            select(&[Codec::Lz4], ALL, Some(TargetFormat::Bc7)),
            Err(PoolFormatError::NotTranscodable { .. })
        ));
        assert_eq!(select(&[Codec::Lz4], NONE, Some(TargetFormat::Rgba8)), Ok(TargetFormat::Rgba8));
    }

    #[test]
    fn forced_formats_are_checked_against_the_adapter() {
        let etc1s = [Codec::Etc1s];
        assert_eq!(select(&etc1s, DESKTOP, Some(TargetFormat::Bc1)), Ok(TargetFormat::Bc1));
        assert_eq!(select(&etc1s, ALL, Some(TargetFormat::Etc2Rgba)), Ok(TargetFormat::Etc2Rgba));
        assert_eq!(
            select(&etc1s, DESKTOP, Some(TargetFormat::Astc4x4)),
            Err(PoolFormatError::Unsupported("astc"))
        );
        assert_eq!(select(&etc1s, NONE, Some(TargetFormat::Bc7)), Err(PoolFormatError::Unsupported("bc7")));
    }
}
