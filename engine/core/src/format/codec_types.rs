//! The vocabulary the codecs and the Basis wrapper share: the stored codec, the GPU
//! formats tiles become, encode options and codec errors. (Kept apart from `codec` so
//! that `codec` → `basis` → here has no circle.)

use serde::{Deserialize, Serialize};

use crate::format::color::ColorSpace;

/// How a tile's texels are stored in the atlas.
///
/// The numeric value is the on-disk code (see `docs/atlas-format.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
#[repr(u8)]
pub enum Codec {
    /// Uncompressed RGBA8, row-major, tile rows top to bottom.
    Raw = 0,
    /// RGBA8 compressed with the LZ4 block format (`lz4_flex`).
    Lz4 = 1,
    /// A Basis Universal `.basis` file in ETC1S mode (lossy, about 1–2 bits per texel).
    Etc1s = 2,
    /// A Basis Universal `.basis` file in UASTC mode (near-lossless, 8 bits per texel).
    Uastc = 3,
    /// A UASTC `.basis` file supercompressed with LZ4: a little-endian `u32` holding the
    /// `.basis` file's length, then the file in the LZ4 block format. The baker stores a
    /// tile of a `uastc` layer this way only when it is smaller than the plain file.
    #[serde(rename = "uastc+lz4")]
    UastcLz4 = 4,
}

/// Lowest [`EncodeOptions::quality`].
pub const QUALITY_MIN: u32 = 1;
/// Highest [`EncodeOptions::quality`].
pub const QUALITY_MAX: u32 = 255;
/// Default [`EncodeOptions::quality`]: Basis Universal's default ETC1S quality level,
/// and UASTC pack level 2 ("default").
pub const QUALITY_DEFAULT: u32 = 128;

/// Settings for [`Codec::encode`]; raw and LZ4 ignore them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EncodeOptions {
    /// Quality, [`QUALITY_MIN`]`..=`[`QUALITY_MAX`], higher is better and slower.
    /// ETC1S: the Basis quality level itself (codebook size). UASTC: mapped onto the
    /// five pack levels, `(quality − 1) · 5 / 255` (1–51 fastest … 205–255 very slow;
    /// the default 128 is level 2), see [`EncodeOptions::uastc_level`].
    pub quality: u32,
    /// UASTC rate-distortion optimisation: `Some(λ)` trades quality for a smaller
    /// LZ4-compressed tile (Basis suggests 0.2 ..= 4; lower is better quality); `None`
    /// turns it off. Only useful together with [`EncodeOptions::uastc_lz4`].
    pub uastc_rdo: Option<f32>,
    /// UASTC: store the tile LZ4-compressed ([`Codec::UastcLz4`]) when that is smaller.
    pub uastc_lz4: bool,
    /// sRGB colour uses perceptual error metrics; linear data (normals) plain RGB error.
    pub color: ColorSpace,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self { quality: QUALITY_DEFAULT, uastc_rdo: None, uastc_lz4: true, color: ColorSpace::Srgb }
    }
}

impl EncodeOptions {
    /// The UASTC pack level (0 fastest ..= 4 very slow) that [`EncodeOptions::quality`] selects.
    pub fn uastc_level(&self) -> u32 {
        (self.quality.clamp(QUALITY_MIN, QUALITY_MAX) - 1) * 5 / 255
    }

    /// Checks the ranges: quality in `1..=255`, RDO λ finite and in `0.001..=50`.
    pub fn validate(&self) -> Result<(), CodecError> {
        if !(QUALITY_MIN..=QUALITY_MAX).contains(&self.quality) {
            return Err(CodecError::Options(format!(
                "quality {} is outside {QUALITY_MIN}..={QUALITY_MAX}",
                self.quality
            )));
        }
        if let Some(l) = self.uastc_rdo
            && !(0.001..=50.0).contains(&l)
        {
            return Err(CodecError::Options(format!("UASTC RDO lambda {l} is outside 0.001..=50")));
        }
        Ok(())
    }
}

/// The texel format of the bytes a loader hands to the GPU pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TargetFormat {
    /// Uncompressed RGBA8, row-major (`p² × 4` bytes): every codec decodes to it.
    #[serde(rename = "rgba8")]
    Rgba8,
    /// BC7 RGBA, 16 bytes per 4×4 block.
    #[serde(rename = "bc7")]
    Bc7,
    /// BC1, 8 bytes per 4×4 block; opaque (three-colour blocks are never produced, so
    /// sampling it as BC1 RGBA never yields transparent black).
    #[serde(rename = "bc1")]
    Bc1,
    /// ASTC 4×4 LDR, 16 bytes per block.
    #[serde(rename = "astc")]
    Astc4x4,
    /// ETC2 RGBA8 (EAC alpha), 16 bytes per 4×4 block.
    #[serde(rename = "etc2")]
    Etc2Rgba,
}

impl TargetFormat {
    /// Every target format.
    pub const ALL: [TargetFormat; 5] = [
        TargetFormat::Rgba8,
        TargetFormat::Bc7,
        TargetFormat::Bc1,
        TargetFormat::Astc4x4,
        TargetFormat::Etc2Rgba,
    ];

    /// Short lowercase name, as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TargetFormat::Rgba8 => "rgba8",
            TargetFormat::Bc7 => "bc7",
            TargetFormat::Bc1 => "bc1",
            TargetFormat::Astc4x4 => "astc",
            TargetFormat::Etc2Rgba => "etc2",
        }
    }

    /// Whether this is a 4×4 block-compressed format.
    pub fn is_block_compressed(self) -> bool {
        self != TargetFormat::Rgba8
    }

    /// Bytes per 4×4 block, or per texel for [`TargetFormat::Rgba8`].
    pub fn bytes_per_block(self) -> usize {
        match self {
            TargetFormat::Rgba8 => 4,
            TargetFormat::Bc1 => 8,
            TargetFormat::Bc7 | TargetFormat::Astc4x4 | TargetFormat::Etc2Rgba => 16,
        }
    }

    /// Bytes of one `padded × padded` tile in this format; block formats round the side
    /// up to whole 4×4 blocks.
    pub fn bytes_per_tile(self, padded: u32) -> usize {
        if self.is_block_compressed() {
            let blocks = padded.div_ceil(4) as usize;
            blocks * blocks * self.bytes_per_block()
        } else {
            padded as usize * padded as usize * 4
        }
    }
}

impl std::fmt::Display for TargetFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TargetFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|t| t.name()).collect();
            format!("unknown texture format '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

/// A tile that cannot be encoded, decoded or transcoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The decoded size is not what the index promised (or the input is not a tile).
    #[error("decoded {found} bytes, expected {expected}")]
    Length {
        /// Size the index promised.
        expected: usize,
        /// Size found.
        found: usize,
    },
    /// The compressed stream is malformed.
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
    /// A Basis tile's decoded size must be a square tile's (`side² × 4` bytes).
    #[error("{raw_len} bytes is not the RGBA8 size of a square tile")]
    NotSquare {
        /// The decoded size asked for.
        raw_len: usize,
    },
    /// The codec cannot produce that GPU format (raw and LZ4 only decode to RGBA8).
    #[error("{codec} tiles cannot be transcoded to {target} (only Basis tiles can; use an rgba8 pool)")]
    Unsupported {
        /// The tile's codec.
        codec: Codec,
        /// The format asked for.
        target: TargetFormat,
    },
    /// Encoding options out of range.
    #[error("invalid encode options: {0}")]
    Options(String),
    /// The Basis Universal encoder failed.
    #[error("basis encoder failed: {0}")]
    Encode(String),
}
