//! Per-tile codecs: how a tile's texels are stored on disk (raw, LZ4, Basis Universal
//! ETC1S / UASTC) and turned back into GPU-ready bytes (RGBA8 or a block format).

use crate::format::basis::{self, BasisMode, DataCheck};
pub use crate::format::codec_types::{
    Codec, CodecError, EncodeOptions, QUALITY_DEFAULT, QUALITY_MAX, QUALITY_MIN, TargetFormat,
};

impl Codec {
    /// Every codec this build can read and write.
    pub const ALL: [Codec; 5] = [Codec::Raw, Codec::Lz4, Codec::Etc1s, Codec::Uastc, Codec::UastcLz4];

    /// The codec stored under on-disk code `code`, if this build knows it.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| *c as u8 == code)
    }

    /// Short lowercase name, as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Lz4 => "lz4",
            Codec::Etc1s => "etc1s",
            Codec::Uastc => "uastc",
            Codec::UastcLz4 => "uastc+lz4",
        }
    }

    /// Whether tiles of this codec are Basis Universal files, which transcode to every
    /// [`TargetFormat`]; raw and LZ4 tiles only decode to [`TargetFormat::Rgba8`].
    pub fn is_basis(self) -> bool {
        matches!(self, Codec::Etc1s | Codec::Uastc | Codec::UastcLz4)
    }

    /// Encodes one square tile of `side × side` RGBA8 texels (`rgba`, border included)
    /// and returns the smallest stored form this codec allows, with the codec it is
    /// stored with:
    ///
    /// - `raw`: the texels as they are;
    /// - `lz4`: LZ4, or `raw` when LZ4 does not make the tile strictly smaller;
    /// - `etc1s`: a `.basis` file (never raw: a basis layer must transcode);
    /// - `uastc` and `uastc+lz4`: a `.basis` file, supercompressed with LZ4
    ///   ([`Codec::UastcLz4`]) when [`EncodeOptions::uastc_lz4`] is set and that is smaller.
    ///
    /// Basis encoding runs on the calling thread only (callers parallelise across tiles).
    pub fn encode(self, rgba: &[u8], side: u32, opts: &EncodeOptions) -> Result<Encoded, CodecError> {
        let expected = tile_bytes(side);
        if rgba.len() != expected {
            return Err(CodecError::Length { expected, found: rgba.len() });
        }
        let encoded = match self {
            Codec::Raw => Encoded { data: rgba.to_vec(), codec: Codec::Raw },
            Codec::Lz4 => {
                let data = lz4_flex::block::compress(rgba);
                if data.len() < rgba.len() {
                    Encoded { data, codec: Codec::Lz4 }
                } else {
                    Encoded { data: rgba.to_vec(), codec: Codec::Raw }
                }
            }
            Codec::Etc1s => {
                Encoded { data: basis::encode(rgba, side, BasisMode::Etc1s, opts)?, codec: Codec::Etc1s }
            }
            Codec::Uastc | Codec::UastcLz4 => {
                let file = basis::encode(rgba, side, BasisMode::Uastc, opts)?;
                match opts.uastc_lz4.then(|| lz4_wrap(&file)).filter(|z| z.len() < file.len()) {
                    Some(data) => Encoded { data, codec: Codec::UastcLz4 },
                    None => Encoded { data: file, codec: Codec::Uastc },
                }
            }
        };
        Ok(encoded)
    }

    /// Decodes a stored tile back into `raw_len` bytes of RGBA8 (a square tile of
    /// `raw_len / 4` texels). Works for every codec.
    pub fn decode(self, data: &[u8], raw_len: usize) -> Result<Vec<u8>, CodecError> {
        match self {
            Codec::Raw if data.len() == raw_len => Ok(data.to_vec()),
            Codec::Raw => Err(CodecError::Length { expected: raw_len, found: data.len() }),
            Codec::Lz4 => {
                let out = lz4_flex::block::decompress(data, raw_len)
                    .map_err(|e| CodecError::Corrupt(format!("lz4: {e}")))?;
                if out.len() == raw_len {
                    Ok(out)
                } else {
                    Err(CodecError::Length { expected: raw_len, found: out.len() })
                }
            }
            Codec::Etc1s | Codec::Uastc | Codec::UastcLz4 => {
                let side = (raw_len / 4).isqrt();
                if tile_bytes(side as u32) != raw_len {
                    return Err(CodecError::NotSquare { raw_len });
                }
                transcode(self, data, raw_len, side as u32, TargetFormat::Rgba8)
            }
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|c| c.name()).collect();
            format!("unknown codec '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

/// Bytes of a `side × side` RGBA8 tile.
fn tile_bytes(side: u32) -> usize {
    side as usize * side as usize * 4
}

/// One encoded tile: its bytes and the codec they are stored with (which may differ
/// from the codec asked for, see [`Codec::encode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The blob to store.
    pub data: Vec<u8>,
    /// The codec to record in the tile's index entry.
    pub codec: Codec,
}

/// Prefixes the length and LZ4-compresses a UASTC `.basis` file.
fn lz4_wrap(file: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + lz4_flex::block::get_maximum_output_size(file.len()));
    out.extend_from_slice(&(file.len() as u32).to_le_bytes());
    out.extend_from_slice(&lz4_flex::block::compress(file));
    out
}

/// Undoes [`lz4_wrap`]; the stated length must be plausible for a tile of `raw_len` bytes.
fn lz4_unwrap(data: &[u8], raw_len: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |what: String| CodecError::Corrupt(format!("uastc+lz4: {what}"));
    let (len, body) =
        data.split_first_chunk::<4>().ok_or_else(|| corrupt("shorter than its length".into()))?;
    let len = u32::from_le_bytes(*len) as usize;
    // A UASTC file holds 16 bytes per 4×4 block (≤ 1 byte per texel) plus small headers.
    if len > raw_len + 4096 {
        return Err(corrupt(format!("stated length {len} is implausible for a {raw_len}-byte tile")));
    }
    let out = lz4_flex::block::decompress(body, len).map_err(|e| corrupt(e.to_string()))?;
    if out.len() != len {
        return Err(corrupt(format!("decompressed {} bytes, expected {len}", out.len())));
    }
    Ok(out)
}

/// Turns a stored tile of `codec` (`blob`) into `target` bytes for a `padded_side²`
/// tile whose RGBA8 size is `raw_len` ([`TargetFormat::bytes_per_tile`] bytes out).
///
/// Raw and LZ4 tiles decode only to [`TargetFormat::Rgba8`] (layers stored that way
/// use an RGBA8 pool); Basis tiles transcode to every target. Malformed data of any
/// codec is a [`CodecError`], never a panic.
pub fn transcode(
    codec: Codec,
    blob: &[u8],
    raw_len: usize,
    padded_side: u32,
    target: TargetFormat,
) -> Result<Vec<u8>, CodecError> {
    transcode_with(codec, blob, raw_len, padded_side, target, DataCheck::Crc16)
}

/// [`transcode`] for a blob whose bytes the caller has verified already (an atlas
/// tile after `Atlas::read_tile`'s CRC-32): skips the Basis data CRC-16,
/// a fifth of a UASTC tile's transcode time. Structure checks still run.
pub fn transcode_verified(
    codec: Codec,
    blob: &[u8],
    raw_len: usize,
    padded_side: u32,
    target: TargetFormat,
) -> Result<Vec<u8>, CodecError> {
    transcode_with(codec, blob, raw_len, padded_side, target, DataCheck::AlreadyVerified)
}

fn transcode_with(
    codec: Codec,
    blob: &[u8],
    raw_len: usize,
    padded_side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    let expected = tile_bytes(padded_side);
    if raw_len != expected {
        return Err(CodecError::Length { expected, found: raw_len });
    }
    match codec {
        Codec::Raw | Codec::Lz4 if target == TargetFormat::Rgba8 => codec.decode(blob, raw_len),
        Codec::Raw | Codec::Lz4 => Err(CodecError::Unsupported { codec, target }),
        Codec::Etc1s => basis_transcode(blob, BasisMode::Etc1s, padded_side, target, check),
        Codec::Uastc => basis_transcode(blob, BasisMode::Uastc, padded_side, target, check),
        Codec::UastcLz4 => {
            basis_transcode(&lz4_unwrap(blob, raw_len)?, BasisMode::Uastc, padded_side, target, check)
        }
    }
}

/// Which Basis Universal transcoder turns tiles into pool formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BasisTranscoder {
    /// The pure-Rust port (`basisu`, [`crate::format::basis_rust`]): memory-safe, the
    /// default and, in default builds, the only one. Byte for byte the C++ output on
    /// every mode and pool format but ETC1S to BC1, where a few blocks differ within a
    /// stated bound (BENCHMARKS.md "Transcoders").
    Rust,
    /// The reference C++ transcoder ([`crate::format::basis::cpp`]), for comparisons only
    /// (feature `cpp-transcoder`): a forged tile can trip one of its assertions, which
    /// aborts the process.
    #[cfg(feature = "cpp-transcoder")]
    Cpp,
}

/// A transcoder chosen by name (`TESSERA_TRANSCODER`, an option) that this build does
/// not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}={value}: {why} (this build has: {})", BasisTranscoder::names().join(", "))]
pub struct TranscoderChoiceError {
    /// Where the name came from (`TESSERA_TRANSCODER`, an option's name).
    pub source_name: String,
    /// The name given.
    pub value: String,
    /// Why it is refused.
    pub why: String,
}

impl BasisTranscoder {
    /// The environment variable that chooses the transcoder: `rust` (the default), or
    /// `cpp` in a build with the `cpp-transcoder` feature.
    pub const ENV: &'static str = "TESSERA_TRANSCODER";

    /// Every transcoder this build has.
    pub fn all() -> Vec<BasisTranscoder> {
        vec![
            BasisTranscoder::Rust,
            #[cfg(feature = "cpp-transcoder")]
            BasisTranscoder::Cpp,
        ]
    }

    fn names() -> Vec<&'static str> {
        Self::all().into_iter().map(Self::name).collect()
    }

    /// Its name, as `TESSERA_TRANSCODER` takes it.
    pub fn name(self) -> &'static str {
        match self {
            BasisTranscoder::Rust => "rust",
            #[cfg(feature = "cpp-transcoder")]
            BasisTranscoder::Cpp => "cpp",
        }
    }

    /// A short label for report headers, with the crate and version that transcodes, e.g.
    /// `rust (basisu 0.1.0)`.
    pub fn label(self) -> String {
        match self {
            BasisTranscoder::Rust => {
                format!("rust (basisu {})", crate::format::basis_rust::BASISU_VERSION)
            }
            #[cfg(feature = "cpp-transcoder")]
            BasisTranscoder::Cpp => "cpp (basis-universal 0.3, comparison build)".into(),
        }
    }

    /// The transcoder named `value`, which came from `source_name` (for the error).
    pub fn parse(value: &str, source_name: &str) -> Result<Self, TranscoderChoiceError> {
        let refuse = |why: &str| TranscoderChoiceError {
            source_name: source_name.into(),
            value: value.into(),
            why: why.into(),
        };
        match value {
            "rust" => Ok(BasisTranscoder::Rust),
            #[cfg(feature = "cpp-transcoder")]
            "cpp" => Ok(BasisTranscoder::Cpp),
            #[cfg(not(feature = "cpp-transcoder"))]
            "cpp" => Err(refuse(
                "the C++ transcoder is only in builds with the cpp-transcoder feature \
                 (cargo build --features cpp-transcoder)",
            )),
            _ => Err(refuse("unknown Basis transcoder")),
        }
    }

    /// The transcoder `TESSERA_TRANSCODER` names: [`BasisTranscoder::Rust`] when it is
    /// unset or empty, an error when it names one this build does not have. Programs
    /// call it at start to refuse a bad value (the CLI exits with status 2).
    pub fn from_env() -> Result<Self, TranscoderChoiceError> {
        match std::env::var(Self::ENV) {
            Ok(value) if !value.is_empty() => Self::parse(&value, Self::ENV),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(BasisTranscoder::Rust),
            Err(std::env::VarError::NotUnicode(v)) => Err(TranscoderChoiceError {
                source_name: Self::ENV.into(),
                value: v.to_string_lossy().into_owned(),
                why: "not UTF-8".into(),
            }),
        }
    }

    fn code(self) -> u8 {
        match self {
            BasisTranscoder::Rust => 1,
            #[cfg(feature = "cpp-transcoder")]
            BasisTranscoder::Cpp => 2,
        }
    }
}

impl std::fmt::Display for BasisTranscoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// 0: not chosen yet (the environment decides on first use), else [`BasisTranscoder::code`].
static BASIS_TRANSCODER: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Chooses the Basis transcoder for this whole process (default: the environment's, see
/// [`basis_transcoder`]).
pub fn set_basis_transcoder(transcoder: BasisTranscoder) {
    BASIS_TRANSCODER.store(transcoder.code(), std::sync::atomic::Ordering::Relaxed);
}

/// The Basis transcoder in use: the one [`set_basis_transcoder`] chose, else
/// [`BasisTranscoder::from_env`]'s. A `TESSERA_TRANSCODER` this build does not have is
/// logged as an error once and the Rust transcoder is used (programs refuse it at start
/// with [`BasisTranscoder::from_env`]; a loader thread has no one to refuse it to).
pub fn basis_transcoder() -> BasisTranscoder {
    match BASIS_TRANSCODER.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return BasisTranscoder::Rust,
        #[cfg(feature = "cpp-transcoder")]
        2 => return BasisTranscoder::Cpp,
        _ => {}
    }
    let chosen = BasisTranscoder::from_env().unwrap_or_else(|e| {
        tracing::error!("{e}; using the Rust transcoder");
        BasisTranscoder::Rust
    });
    set_basis_transcoder(chosen);
    chosen
}

fn basis_transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    match basis_transcoder() {
        BasisTranscoder::Rust => crate::format::basis_rust::transcode(blob, mode, side, target, check),
        #[cfg(feature = "cpp-transcoder")]
        BasisTranscoder::Cpp => basis::cpp::transcode(blob, mode, side, target, check),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn tile(side: u32) -> Vec<u8> {
        (0..side * side * 4).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn lossless_codecs_round_trip() {
        let data = tile(136);
        for c in [Codec::Raw, Codec::Lz4] {
            let enc = c.encode(&data, 136, &EncodeOptions::default()).unwrap();
            assert_eq!(enc.codec, c);
            assert_eq!(enc.codec.decode(&enc.data, data.len()).unwrap(), data, "{c}");
            assert_eq!(transcode(c, &enc.data, data.len(), 136, TargetFormat::Rgba8).unwrap(), data);
        }
        for c in Codec::ALL {
            assert_eq!(c.name().parse::<Codec>().unwrap(), c);
            assert_eq!(Codec::from_code(c as u8), Some(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.name()));
        }
        assert!("basis".parse::<Codec>().is_err());
        assert_eq!(Codec::from_code(5), None);
    }

    #[test]
    fn incompressible_lz4_tile_is_stored_raw() {
        let mut s = 0x9e37_79b9_u32;
        let noise: Vec<u8> = (0..32 * 32 * 4)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as u8
            })
            .collect();
        let enc = Codec::Lz4.encode(&noise, 32, &EncodeOptions::default()).unwrap();
        assert_eq!(enc.codec, Codec::Raw);
        assert_eq!(enc.data, noise);
    }

    #[test]
    fn corrupt_lz4_is_an_error() {
        let data = vec![7u8; 4096];
        let mut enc = Codec::Lz4.encode(&data, 32, &EncodeOptions::default()).unwrap().data;
        enc.truncate(enc.len() / 2);
        assert!(Codec::Lz4.decode(&enc, data.len()).is_err());
        assert!(Codec::Raw.decode(&data[..10], data.len()).is_err());
        assert!(lz4_unwrap(&[1, 2], 4096).is_err());
        assert!(lz4_unwrap(&u32::MAX.to_le_bytes(), 4096).is_err());
    }

    #[test]
    fn raw_tiles_only_decode_to_rgba8() {
        let data = tile(8);
        let err = transcode(Codec::Raw, &data, data.len(), 8, TargetFormat::Bc7).unwrap_err();
        assert_eq!(err, CodecError::Unsupported { codec: Codec::Raw, target: TargetFormat::Bc7 });
        assert!(err.to_string().contains("rgba8 pool"), "{err}");
        assert!(transcode(Codec::Raw, &data, data.len(), 9, TargetFormat::Rgba8).is_err());
        assert!(Codec::Lz4.encode(&data, 9, &EncodeOptions::default()).is_err());
    }

    #[test]
    fn target_formats() {
        assert_eq!(TargetFormat::Rgba8.bytes_per_tile(136), 136 * 136 * 4);
        assert_eq!(TargetFormat::Bc7.bytes_per_tile(136), 34 * 34 * 16);
        assert_eq!(TargetFormat::Bc1.bytes_per_tile(136), 34 * 34 * 8);
        assert_eq!(TargetFormat::Astc4x4.bytes_per_tile(22), 6 * 6 * 16);
        assert_eq!(TargetFormat::Etc2Rgba.bytes_per_tile(136), 34 * 34 * 16);
        for t in TargetFormat::ALL {
            assert_eq!(t.name().parse::<TargetFormat>().unwrap(), t);
            assert_eq!(t.to_string(), t.name());
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.name()));
        }
        assert!("bc3".parse::<TargetFormat>().unwrap_err().contains("bc7"));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn transcoder_names_are_validated() {
        assert_eq!(BasisTranscoder::parse("rust", "X").unwrap(), BasisTranscoder::Rust);
        let bogus = BasisTranscoder::parse("bogus", BasisTranscoder::ENV).unwrap_err().to_string();
        assert!(bogus.starts_with("TESSERA_TRANSCODER=bogus: unknown Basis transcoder"), "{bogus}");
        assert!(bogus.contains("this build has: rust"), "{bogus}");
        assert!(BasisTranscoder::parse("Rust", "X").is_err(), "names are exact");
        let cpp = BasisTranscoder::parse("cpp", "--transcoder");
        #[cfg(feature = "cpp-transcoder")]
        assert_eq!(cpp.unwrap(), BasisTranscoder::Cpp);
        #[cfg(not(feature = "cpp-transcoder"))]
        {
            let e = cpp.unwrap_err().to_string();
            assert!(e.starts_with("--transcoder=cpp: ") && e.contains("--features cpp-transcoder"), "{e}");
        }
        for t in BasisTranscoder::all() {
            assert_eq!(BasisTranscoder::parse(t.name(), "X").unwrap(), t);
            assert!(t.label().starts_with(t.name()), "{}", t.label());
        }
        assert_eq!(BasisTranscoder::Rust.label(), format!("rust (basisu {})", basis_rust_version()));
    }

    /// The `basisu` version Cargo.lock resolves, which the label must name.
    fn basis_rust_version() -> String {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).unwrap();
        let at = lock.find("name = \"basisu\"\nversion = \"").unwrap() + 27;
        let version = &lock[at..at + lock[at..].find('"').unwrap()];
        assert_eq!(version, crate::format::basis_rust::BASISU_VERSION, "update BASISU_VERSION");
        version.to_string()
    }

    #[test]
    fn quality_maps_to_uastc_levels_and_is_checked() {
        let level = |quality| EncodeOptions { quality, ..EncodeOptions::default() }.uastc_level();
        assert_eq!([level(1), level(51), level(52), level(128), level(255)], [0, 0, 1, 2, 4]);
        assert!(EncodeOptions::default().validate().is_ok());
        assert!(EncodeOptions { quality: 0, ..EncodeOptions::default() }.validate().is_err());
        assert!(EncodeOptions { quality: 256, ..EncodeOptions::default() }.validate().is_err());
        let nan = EncodeOptions { uastc_rdo: Some(f32::NAN), ..EncodeOptions::default() };
        assert!(nan.validate().is_err());
    }
}
