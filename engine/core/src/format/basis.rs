//! Basis Universal tiles: each tile (border included) is one small `.basis` file, in
//! ETC1S or UASTC mode, encoded with the `basis-universal` crate's compressor and
//! transcoded on loader threads to the GPU pool's format.
//!
//! The C++ transcoder trusts much of what a `.basis` header says (a data size near 4 GiB
//! wraps its size check; slice offsets are not checked against the file), so before any
//! C++ function sees a blob, `check_structure` reads the file header and every slice
//! descriptor in Rust, overflow-safe: signature, version, sizes, the header's CRC-16,
//! counts (one image of one level), the mode and flags, the tile's size in texels and
//! blocks, and that the slice table, codebooks, Huffman tables and slices lie inside the
//! file without overlapping. Then the data's CRC-16 is checked (unless the caller has
//! verified the blob already, see [`DataCheck`]). A damaged or forged header is a
//! [`CodecError`], never a crash.
//!
//! A forged file with a valid structure and repaired checksums can still hold malformed
//! *compressed contents*, which no check short of decoding them rules out; some trip an
//! `assert()` inside the C++ transcoder (compiled with assertions on), e.g. `decode_vlc`
//! for ETC1S or `multiplier >= 1` for UASTC → ETC2. On Linux with glibc every C++ call
//! of [`transcode`] runs inside an assertion guard (`guard`, `csrc/basis_guard.c`): a
//! failed assertion becomes a [`CodecError::Corrupt`] naming it, so a loader reports the
//! tile as corrupt and the renderer keeps its coarser ancestor; the thread's C++
//! transcoder is deleted and made anew. What the guard skips is never freed: for ETC1S
//! the transcode's selector history buffer, at most 32 KiB per failed tile (a streamer
//! does not request a failed tile again). What remains outside the defence: elsewhere
//! (macOS, Windows, musl) a failed assertion still aborts the process
//! ([`ASSERTIONS_ARE_ERRORS`] says which); the transcoder's own `abort()` calls, which
//! are only reached when an allocation fails; and memory errors the transcoder does not
//! assert against.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::Once;

use basis_universal::{
    BasisTextureFormat, Compressor, CompressorParams, DecodeFlags, TranscoderTextureFormat, sys,
};

use crate::format::codec_types::{CodecError, EncodeOptions, TargetFormat};
use crate::format::color::ColorSpace;

mod guard;

/// The two Basis Universal modes a tile can be stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BasisMode {
    /// ETC1S: lossy, a per-file codebook, typically 0.5–2 bits per texel.
    Etc1s,
    /// UASTC 4×4: near-lossless, 8 bits per texel before supercompression.
    Uastc,
}

impl BasisMode {
    fn format(self) -> BasisTextureFormat {
        match self {
            BasisMode::Etc1s => BasisTextureFormat::ETC1S,
            BasisMode::Uastc => BasisTextureFormat::UASTC4x4,
        }
    }

    /// The `basis_tex_format` code stored in a `.basis` header.
    fn header_code(self) -> i32 {
        match self {
            BasisMode::Etc1s => sys::basist_basis_tex_format_cETC1S,
            BasisMode::Uastc => sys::basist_basis_tex_format_cUASTC4x4,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            BasisMode::Etc1s => "etc1s",
            BasisMode::Uastc => "uastc",
        }
    }
}

/// Initialises the Basis Universal encoder and transcoder tables, once per process.
/// [`encode`] and [`transcode`] call it; calling it early moves the cost (a few ms)
/// out of the first tile.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        basis_universal::encoder_init();
        basis_universal::transcoder_init();
    });
}

/// Encodes a `side × side` RGBA8 tile (`rgba`) into one `.basis` file with one image
/// and no mipmaps, on the calling thread only.
pub fn encode(rgba: &[u8], side: u32, mode: BasisMode, opts: &EncodeOptions) -> Result<Vec<u8>, CodecError> {
    encode_image(rgba, side, side, mode, opts)
}

/// [`encode`] for a `width × height` RGBA8 image: one `.basis` file of one image, one
/// level (e.g. a texture for a KTX2, [`crate::bake::ktx2::encode_ktx2`]).
pub fn encode_image(
    rgba: &[u8],
    width: u32,
    height: u32,
    mode: BasisMode,
    opts: &EncodeOptions,
) -> Result<Vec<u8>, CodecError> {
    let expected = width as usize * height as usize * 4;
    if width == 0 || height == 0 || rgba.len() != expected {
        return Err(CodecError::Length { expected, found: rgba.len() });
    }
    let side = width.max(height);
    if side > basis_universal::IMAGE_DIMENSION_MAX {
        return Err(CodecError::Options(format!(
            "image side {side} exceeds Basis's {}",
            basis_universal::IMAGE_DIMENSION_MAX
        )));
    }
    opts.validate()?;
    init();
    let mut params = CompressorParams::new();
    params.set_basis_format(mode.format());
    params.set_color_space(match opts.color {
        ColorSpace::Srgb => basis_universal::ColorSpace::Srgb,
        ColorSpace::Linear => basis_universal::ColorSpace::Linear,
    });
    params.set_generate_mipmaps(false);
    params.set_print_status_to_stdout(false);
    match mode {
        BasisMode::Etc1s => params.set_etc1s_quality_level(opts.quality),
        BasisMode::Uastc => {
            // The crate's set_uastc_quality_level ORs the level into the flags, which
            // already hold the default level; replace the level bits instead.
            // SAFETY: params.0 is the live parameter object CompressorParams::new made.
            unsafe {
                let flags = sys::compressor_params_get_pack_uastc_flags(params.0);
                let level = opts.uastc_level() as sys::UastcPackFlags;
                sys::compressor_params_set_pack_uastc_flags(
                    params.0,
                    (flags & !sys::UastcPackFlags_PackUASTCLevelMask) | level,
                );
            }
            params.set_rdo_uastc(opts.uastc_rdo);
        }
    }
    params.source_image_mut(0).init(rgba, width, height, 4);
    // One job-pool thread in total: the caller's. Tiles are parallelised by the caller.
    let mut compressor = Compressor::new(1);
    // SAFETY: the parameters are all set through the crate's setters with values in
    // their documented ranges (quality and RDO λ checked by `opts.validate()`, the
    // image size checked above); `init` copies them, so `params` may drop afterwards.
    if !unsafe { compressor.init(&params) } {
        return Err(CodecError::Encode(format!("the {} compressor rejected its parameters", mode.name())));
    }
    // SAFETY: `init` succeeded with the parameters above.
    unsafe { compressor.process() }
        .map_err(|code| CodecError::Encode(format!("{} encoding failed: {code:?}", mode.name())))?;
    let file = compressor.basis_file();
    if file.is_empty() {
        return Err(CodecError::Encode(format!("{} encoding produced no data", mode.name())));
    }
    Ok(file.to_vec())
}

/// Whether an assertion that fails inside the C++ transcoder is a [`CodecError`] (true
/// on Linux with glibc) rather than an abort of the process (elsewhere).
pub const ASSERTIONS_ARE_ERRORS: bool = guard::ACTIVE;

/// Whether [`transcode`] checks the CRC-16 over a `.basis` file's data.
///
/// The C++ transcoder does not validate block contents: damaged blocks can trip its
/// assertions (an error on Linux with glibc, an abort elsewhere, see the module
/// documentation) or produce garbage. So a blob's integrity must be known before it is
/// transcoded, by this CRC-16 or by a stronger check the caller made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataCheck {
    /// Check it: for blobs of unknown integrity. Costs about 2.4 ns per byte (6 µs for
    /// an ETC1S tile, 45 µs for a UASTC tile of 136², a fifth of its BC7 transcode).
    Crc16,
    /// The caller has verified the blob byte for byte already (an atlas tile's CRC-32
    /// against the index), so only the header's own checks and CRC-16 run.
    AlreadyVerified,
}

/// A C++ transcoder owned by one thread; deleted on drop.
struct CppTranscoder(*mut sys::Transcoder);

impl CppTranscoder {
    fn new() -> Self {
        // SAFETY: allocates a fresh transcoder; no preconditions.
        Self(unsafe { sys::transcoder_new() })
    }
}

impl Drop for CppTranscoder {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `transcoder_new` and is deleted once, here. After a
        // failed assertion the object may hold half-decoded codebooks, but its containers
        // are consistent (see `transcode`), which is all its destructor needs.
        unsafe { sys::transcoder_delete(self.0) }
    }
}

thread_local! {
    /// One transcoder per loader thread: it keeps its buffers between tiles. `None`
    /// until first used, and again after an assertion failed inside it.
    static TRANSCODER: RefCell<Option<CppTranscoder>> = const { RefCell::new(None) };
}

fn target_format(target: TargetFormat) -> TranscoderTextureFormat {
    match target {
        TargetFormat::Rgba8 => TranscoderTextureFormat::RGBA32,
        TargetFormat::Bc7 => TranscoderTextureFormat::BC7_RGBA,
        TargetFormat::Bc1 => TranscoderTextureFormat::BC1_RGB,
        TargetFormat::Astc4x4 => TranscoderTextureFormat::ASTC_4x4_RGBA,
        TargetFormat::Etc2Rgba => TranscoderTextureFormat::ETC2_RGBA,
    }
}

/// One transcode, as the guarded callback [`run_job`] sees it: raw pointers into buffers
/// that [`transcode`] owns and plain values, so that a jump out of the C++ transcoder
/// skips no destructor.
struct Job {
    transcoder: *mut sys::Transcoder,
    blob: *const c_void,
    blob_len: u32,
    check_data_crc: bool,
    /// The `basis_tex_format` the tile must have.
    tex_format: i32,
    side: u32,
    out: *mut c_void,
    /// The output's size in blocks, or in texels for RGBA32.
    out_units: u32,
    format: sys::basist_transcoder_texture_format,
    decode_flags: sys::basist_basisu_decode_flags,
    /// What the file says, for the error messages.
    info: sys::FileInfo,
    levels: u32,
    /// Width, height and block count of the image.
    desc: [u32; 3],
}

/// Where [`run_job`] stopped: `Done`, or the first check or call that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
enum JobEnd {
    Done,
    Header,
    Checksums,
    FileInfo,
    Format,
    Counts,
    LevelDesc,
    Size,
    Prepare,
    Transcode,
}

impl JobEnd {
    const ALL: [JobEnd; 10] = [
        JobEnd::Done,
        JobEnd::Header,
        JobEnd::Checksums,
        JobEnd::FileInfo,
        JobEnd::Format,
        JobEnd::Counts,
        JobEnd::LevelDesc,
        JobEnd::Size,
        JobEnd::Prepare,
        JobEnd::Transcode,
    ];
}

/// Every C++ call of one transcode, run inside the assertion guard. Owns nothing.
extern "C" fn run_job(ctx: *mut c_void) -> c_int {
    // SAFETY: `transcode` passes a pointer to its live `Job`, used by nothing else
    // meanwhile; `blob`/`blob_len` and `out`/`out_units` describe its live buffers (the
    // output has room for `out_units` blocks or texels of `format`), and `transcoder` is
    // this thread's transcoder. `check_structure` has accepted the blob.
    unsafe {
        let job = &mut *ctx.cast::<Job>();
        let (t, data, len) = (job.transcoder, job.blob, job.blob_len);
        if !sys::transcoder_validate_header(t, data, len) {
            return JobEnd::Header as c_int;
        }
        if !sys::transcoder_validate_file_checksums(t, data, len, job.check_data_crc) {
            return JobEnd::Checksums as c_int;
        }
        if !sys::transcoder_get_file_info(t, data, len, &mut job.info) {
            return JobEnd::FileInfo as c_int;
        }
        if job.info.m_tex_format != job.tex_format {
            return JobEnd::Format as c_int;
        }
        job.levels = sys::transcoder_get_total_image_levels(t, data, len, 0);
        if job.info.m_total_images != 1 || job.levels != 1 {
            return JobEnd::Counts as c_int;
        }
        let [w, h, blocks] = &mut job.desc;
        if !sys::transcoder_get_image_level_desc(t, data, len, 0, 0, w, h, blocks) {
            return JobEnd::LevelDesc as c_int;
        }
        let side_blocks = job.side.div_ceil(4);
        if job.desc != [job.side, job.side, side_blocks * side_blocks] {
            return JobEnd::Size as c_int;
        }
        if !sys::transcoder_start_transcoding(t, data, len) {
            return JobEnd::Prepare as c_int;
        }
        let ok = sys::transcoder_transcode_image_level(
            t,
            data,
            len,
            0,
            0,
            job.out,
            job.out_units,
            job.format,
            job.decode_flags,
            0,
            std::ptr::null_mut(),
            0,
        );
        sys::transcoder_stop_transcoding(t);
        if ok { JobEnd::Done as c_int } else { JobEnd::Transcode as c_int }
    }
}

/// Transcodes a `.basis` tile of `mode` that must hold one `side × side` image into
/// `target` ([`TargetFormat::bytes_per_tile`] bytes), after validating it.
///
/// An assertion that fails inside the C++ transcoder (malformed compressed contents)
/// is a [`CodecError::Corrupt`] naming it, on Linux with glibc; elsewhere it aborts the
/// process (see the module documentation).
pub fn transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    init();
    let corrupt = |what: &str| CodecError::Corrupt(format!("{} tile: {what}", mode.name()));
    check_structure(blob, mode, side).map_err(|e| corrupt(&e))?;
    // check_structure matched the length to the header's 32-bit data size (+ 77 bytes).
    let blob_len = u32::try_from(blob.len()).map_err(|_| corrupt("larger than 4 GiB"))?;
    let mut out = vec![0u8; target.bytes_per_tile(side)];
    let blocks = side.div_ceil(4);
    let flags = if target == TargetFormat::Bc1 {
        // Opaque BC1 only: a three-colour block's fourth index is transparent black when
        // the pool samples it as BC1 RGBA (the only BC1 wgpu has).
        DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS
    } else {
        DecodeFlags::empty()
    };
    TRANSCODER.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| corrupt("transcoder re-entered"))?;
        let transcoder = slot.get_or_insert_with(CppTranscoder::new).0;
        let mut job = Job {
            transcoder,
            blob: blob.as_ptr().cast(),
            blob_len,
            check_data_crc: check == DataCheck::Crc16,
            tex_format: mode.header_code(),
            side,
            out: out.as_mut_ptr().cast(),
            out_units: if target == TargetFormat::Rgba8 { side * side } else { blocks * blocks },
            format: target_format(target).into(),
            decode_flags: flags.bits(),
            // SAFETY: FileInfo is plain integers, enums as `c_int` and bools: all zero is valid.
            info: unsafe { std::mem::zeroed() },
            levels: 0,
            desc: [0; 3],
        };
        // SAFETY: `run_job` and `job` meet `guard::call`'s contract: `run_job` owns
        // nothing, `job`, `blob` and `out` live in this frame outside the guarded call,
        // and after an assertion the transcoder is deleted below, never used again.
        let end = unsafe { guard::call(run_job, (&raw mut job).cast()) };
        let end = match end {
            Ok(code) => JobEnd::ALL.into_iter().find(|e| *e as c_int == code).unwrap_or(JobEnd::Transcode),
            Err(guard::AssertionFailed(what)) => {
                // Re-created on the next call. Deleting is safe, reusing is not: the
                // transcoder stopped mid-decode (see CppTranscoder's Drop).
                *slot = None;
                return Err(corrupt(&format!("the transcoder's assertion failed ({what})")));
            }
        };
        let (info, desc) = (job.info, job.desc);
        match end {
            JobEnd::Done => Ok(()),
            JobEnd::Header => Err(corrupt("not a valid .basis header (signature, version, sizes or flags)")),
            JobEnd::Checksums => Err(corrupt(".basis header or data checksum mismatch")),
            JobEnd::FileInfo => Err(corrupt("unreadable .basis slice table")),
            JobEnd::Format => {
                Err(corrupt(&format!("stored as basis format {}, not {}", info.m_tex_format, mode.name())))
            }
            JobEnd::Counts => Err(corrupt("a tile must hold exactly one image of one level")),
            JobEnd::LevelDesc => Err(corrupt("missing image level")),
            JobEnd::Size => Err(corrupt(&format!(
                "image is {}×{} in {} blocks, expected a {side}×{side} tile",
                desc[0], desc[1], desc[2]
            ))),
            JobEnd::Prepare => Err(corrupt("codebooks or tables do not decode")),
            JobEnd::Transcode => Err(corrupt(&format!("transcoding to {target} failed"))),
        }
    })?;
    Ok(out)
}

/// Whether the CRC-16 over a `.basis` file's data (after the header) matches the header's.
pub(crate) fn data_crc_matches(blob: &[u8]) -> bool {
    let len = HEADER_LEN as usize;
    blob.len() >= len && read_le(blob, field::DATA_CRC16) == Some(u32::from(crc16(&blob[len..])))
}

/// Size of the packed `.basis` file header.
const HEADER_LEN: u64 = 77;
/// Size of one packed `.basis` slice descriptor.
const SLICE_DESC_LEN: u64 = 23;
/// `'B' << 8 | 's'`.
const SIGNATURE: u32 = 0x4273;
/// The one file version the vendored transcoder reads.
const VERSION: u32 = 0x13;
/// Header flag: ETC1S file (never set for UASTC).
const FLAG_ETC1S: u32 = 1;
/// Header flag: ETC1S alpha in every second slice.
const FLAG_ALPHA_SLICES: u32 = 4;
/// Header flag: the codebooks come from another file (never for a tile).
const FLAG_GLOBAL_CODEBOOK: u32 = 8;
/// Slice flag: the slice holds alpha.
const SLICE_HAS_ALPHA: u32 = 1;
/// Bytes of one UASTC 4×4 block.
const UASTC_BLOCK_BYTES: u64 = 16;

/// Byte offsets and sizes of the `.basis` file header fields (little-endian, packed).
mod field {
    pub(super) const SIG: (usize, usize) = (0, 2);
    pub(super) const VER: (usize, usize) = (2, 2);
    pub(super) const HEADER_SIZE: (usize, usize) = (4, 2);
    pub(super) const HEADER_CRC16: (usize, usize) = (6, 2);
    pub(super) const DATA_SIZE: (usize, usize) = (8, 4);
    pub(super) const DATA_CRC16: (usize, usize) = (12, 2);
    pub(super) const TOTAL_SLICES: (usize, usize) = (14, 3);
    pub(super) const TOTAL_IMAGES: (usize, usize) = (17, 3);
    pub(super) const TEX_FORMAT: (usize, usize) = (20, 1);
    pub(super) const FLAGS: (usize, usize) = (21, 2);
    pub(super) const TEX_TYPE: (usize, usize) = (23, 1);
    pub(super) const TOTAL_ENDPOINTS: (usize, usize) = (39, 2);
    pub(super) const ENDPOINT_CB_OFS: (usize, usize) = (41, 4);
    pub(super) const ENDPOINT_CB_SIZE: (usize, usize) = (45, 3);
    pub(super) const TOTAL_SELECTORS: (usize, usize) = (48, 2);
    pub(super) const SELECTOR_CB_OFS: (usize, usize) = (50, 4);
    pub(super) const SELECTOR_CB_SIZE: (usize, usize) = (54, 3);
    pub(super) const TABLES_OFS: (usize, usize) = (57, 4);
    pub(super) const TABLES_SIZE: (usize, usize) = (61, 4);
    pub(super) const SLICE_DESC_OFS: (usize, usize) = (65, 4);
    pub(super) const EXTENDED_OFS: (usize, usize) = (69, 4);
    pub(super) const EXTENDED_SIZE: (usize, usize) = (73, 4);

    // Within one slice descriptor.
    pub(super) const SLICE_IMAGE: (usize, usize) = (0, 3);
    pub(super) const SLICE_LEVEL: (usize, usize) = (3, 1);
    pub(super) const SLICE_FLAGS: (usize, usize) = (4, 1);
    pub(super) const SLICE_WIDTH: (usize, usize) = (5, 2);
    pub(super) const SLICE_HEIGHT: (usize, usize) = (7, 2);
    pub(super) const SLICE_BLOCKS_X: (usize, usize) = (9, 2);
    pub(super) const SLICE_BLOCKS_Y: (usize, usize) = (11, 2);
    pub(super) const SLICE_FILE_OFS: (usize, usize) = (13, 4);
    pub(super) const SLICE_FILE_SIZE: (usize, usize) = (17, 4);
}

/// The parts of a one-image `.basis` file a KTX2 holds: the ETC1S codebooks and Huffman
/// tables (empty for UASTC) and the colour and alpha slices' data.
pub(crate) struct BasisParts<'a> {
    /// Number of ETC1S endpoints and selectors.
    pub(crate) counts: (u16, u16),
    /// ETC1S endpoint codebook, selector codebook and Huffman tables.
    pub(crate) codebooks: [&'a [u8]; 3],
    /// The colour slice's data, then the alpha slice's (ETC1S with alpha only).
    pub(crate) slices: Vec<&'a [u8]>,
}

/// Splits a `.basis` file made by [`encode_image`] into [`BasisParts`]; `None` when a
/// region lies outside the file.
pub(crate) fn basis_parts(file: &[u8]) -> Option<BasisParts<'_>> {
    let h = |f| read_le(file, f).map(|v| v as usize);
    let region = |ofs: usize, size: usize| file.get(ofs..ofs.checked_add(size)?);
    let codebooks = [
        region(h(field::ENDPOINT_CB_OFS)?, h(field::ENDPOINT_CB_SIZE)?)?,
        region(h(field::SELECTOR_CB_OFS)?, h(field::SELECTOR_CB_SIZE)?)?,
        region(h(field::TABLES_OFS)?, h(field::TABLES_SIZE)?)?,
    ];
    let desc_ofs = h(field::SLICE_DESC_OFS)?;
    let slices = (0..h(field::TOTAL_SLICES)?)
        .map(|k| {
            let desc = region(desc_ofs + k * SLICE_DESC_LEN as usize, SLICE_DESC_LEN as usize)?;
            let d = |f| read_le(desc, f).map(|v| v as usize);
            region(d(field::SLICE_FILE_OFS)?, d(field::SLICE_FILE_SIZE)?)
        })
        .collect::<Option<Vec<_>>>()?;
    let counts = (h(field::TOTAL_ENDPOINTS)? as u16, h(field::TOTAL_SELECTORS)? as u16);
    Some(BasisParts { counts, codebooks, slices })
}

/// A little-endian field of 1 to 4 bytes at `(offset, size)` of `bytes`; `None` when
/// `bytes` is too short.
fn read_le(bytes: &[u8], (at, size): (usize, usize)) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(size)?)?;
    Some(b.iter().rev().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
}

/// The CRC-16 `.basis` files use (CCITT polynomial, inverted in and out).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = !0;
    for &b in bytes {
        let q = u16::from(b) ^ (crc >> 8);
        let k = (q >> 4) ^ q;
        crc = (crc << 8) ^ k ^ (k << 5) ^ (k << 12);
    }
    !crc
}

/// Rewrites both CRC-16s of a `.basis` blob (the data's, then the header's, which covers
/// it) so that a forged or mutated blob passes the checksum checks and reaches the
/// structure checks and the transcoder. Blobs too short for a header are left alone.
pub(crate) fn repair_crcs(blob: &mut [u8]) {
    if blob.len() < HEADER_LEN as usize {
        return;
    }
    let data = crc16(&blob[HEADER_LEN as usize..]);
    blob[12..14].copy_from_slice(&data.to_le_bytes());
    let header = crc16(&blob[8..HEADER_LEN as usize]);
    blob[6..8].copy_from_slice(&header.to_le_bytes());
}

/// Checks everything the C++ transcoder would otherwise trust in a `.basis` tile of
/// `mode` holding one `side × side` image: the header's sizes, CRC-16, counts, format and
/// flags, and every slice descriptor's size and position, all against `blob.len()` in
/// 64-bit arithmetic. The message says which field is wrong and its value.
pub(crate) fn check_structure(blob: &[u8], mode: BasisMode, side: u32) -> Result<(), String> {
    let len = blob.len() as u64;
    if len <= HEADER_LEN {
        return Err(format!("{len} bytes is too short for a .basis file"));
    }
    let header = &blob[..HEADER_LEN as usize];
    let h = |f: (usize, usize)| u64::from(read_le(header, f).unwrap_or(0));
    if h(field::SIG) != u64::from(SIGNATURE) || h(field::VER) != u64::from(VERSION) {
        return Err(format!(
            "signature {:#06x} version {:#x}, not a .basis file",
            h(field::SIG),
            h(field::VER)
        ));
    }
    if h(field::HEADER_SIZE) != HEADER_LEN {
        return Err(format!("header size {} (expected {HEADER_LEN})", h(field::HEADER_SIZE)));
    }
    if HEADER_LEN + h(field::DATA_SIZE) != len {
        return Err(format!(
            "data size {} + header {HEADER_LEN} is not the file's {len} bytes",
            h(field::DATA_SIZE)
        ));
    }
    let crc = crc16(&header[field::DATA_SIZE.0..]);
    if u64::from(crc) != h(field::HEADER_CRC16) {
        return Err(format!("header CRC-16 {:#06x}, computed {crc:#06x}", h(field::HEADER_CRC16)));
    }
    if h(field::TEX_FORMAT) != mode.header_code() as u64 {
        return Err(format!("stored as basis format {}, not {}", h(field::TEX_FORMAT), mode.name()));
    }
    let flags = h(field::FLAGS) as u32;
    let etc1s = mode == BasisMode::Etc1s;
    if (flags & FLAG_ETC1S != 0) != etc1s || flags & FLAG_GLOBAL_CODEBOOK != 0 {
        return Err(format!("header flags {flags:#x} do not fit a {} tile", mode.name()));
    }
    if h(field::TEX_TYPE) != 0 {
        return Err(format!("texture type {} (a tile is a plain 2D image)", h(field::TEX_TYPE)));
    }
    let alpha_slices = etc1s && flags & FLAG_ALPHA_SLICES != 0;
    let slices = if alpha_slices { 2 } else { 1 };
    if h(field::TOTAL_IMAGES) != 1 || h(field::TOTAL_SLICES) != slices {
        return Err(format!(
            "{} image(s) in {} slice(s); a tile has one image in {slices}",
            h(field::TOTAL_IMAGES),
            h(field::TOTAL_SLICES)
        ));
    }

    // Every region the transcoder reads, as (what, offset, size): they must lie inside
    // the file after the header and not overlap.
    let mut regions: Vec<(String, u64, u64)> = Vec::with_capacity(8);
    let desc_ofs = h(field::SLICE_DESC_OFS);
    regions.push(("slice table".into(), desc_ofs, slices * SLICE_DESC_LEN));
    let codebooks = [
        ("endpoint codebook", field::ENDPOINT_CB_OFS, field::ENDPOINT_CB_SIZE),
        ("selector codebook", field::SELECTOR_CB_OFS, field::SELECTOR_CB_SIZE),
        ("Huffman tables", field::TABLES_OFS, field::TABLES_SIZE),
    ];
    let (endpoints, selectors) = (h(field::TOTAL_ENDPOINTS), h(field::TOTAL_SELECTORS));
    for (what, ofs, size) in codebooks {
        let (ofs, size) = (h(ofs), h(size));
        if etc1s {
            if size == 0 {
                return Err(format!("empty {what}"));
            }
            regions.push((what.into(), ofs, size));
        } else if size != 0 {
            return Err(format!("a UASTC tile with a {size}-byte {what}"));
        }
    }
    if etc1s && (endpoints == 0 || selectors == 0) {
        return Err(format!("{endpoints} endpoints and {selectors} selectors"));
    }
    if !etc1s && (endpoints != 0 || selectors != 0) {
        return Err(format!("a UASTC tile with {endpoints} endpoints and {selectors} selectors"));
    }
    if h(field::EXTENDED_SIZE) != 0 || h(field::EXTENDED_OFS) > len {
        return Err(format!(
            "extended data of {} bytes at {} (a tile has none)",
            h(field::EXTENDED_SIZE),
            h(field::EXTENDED_OFS)
        ));
    }
    let blocks = u64::from(side.div_ceil(4));
    for k in 0..slices {
        let at = desc_ofs + k * SLICE_DESC_LEN;
        let desc = usize::try_from(at)
            .ok()
            .and_then(|at| blob.get(at..at.checked_add(SLICE_DESC_LEN as usize)?))
            .ok_or_else(|| format!("slice table at {desc_ofs} lies outside the {len}-byte file"))?;
        let d = |f: (usize, usize)| u64::from(read_le(desc, f).unwrap_or(0));
        if d(field::SLICE_IMAGE) != 0 || d(field::SLICE_LEVEL) != 0 {
            return Err(format!(
                "slice {k} is image {} level {}",
                d(field::SLICE_IMAGE),
                d(field::SLICE_LEVEL)
            ));
        }
        if alpha_slices && (d(field::SLICE_FLAGS) as u32 & SLICE_HAS_ALPHA != 0) != (k == 1) {
            return Err(format!("slice {k} flags {:#x} (colour then alpha)", d(field::SLICE_FLAGS)));
        }
        let dims =
            [field::SLICE_WIDTH, field::SLICE_HEIGHT, field::SLICE_BLOCKS_X, field::SLICE_BLOCKS_Y].map(d);
        if dims != [u64::from(side), u64::from(side), blocks, blocks] {
            return Err(format!(
                "slice {k} is {}×{} texels in {}×{} blocks, expected a {side}×{side} tile",
                dims[0], dims[1], dims[2], dims[3]
            ));
        }
        let (ofs, size) = (d(field::SLICE_FILE_OFS), d(field::SLICE_FILE_SIZE));
        if size == 0 || (!etc1s && size != blocks * blocks * UASTC_BLOCK_BYTES) {
            return Err(format!("slice {k} has {size} bytes of data"));
        }
        regions.push((format!("slice {k}"), ofs, size));
    }
    for (what, ofs, size) in &regions {
        if *ofs < HEADER_LEN || ofs + size > len {
            return Err(format!("{what} of {size} bytes at offset {ofs} lies outside the {len}-byte file"));
        }
    }
    regions.sort_by_key(|r| r.1);
    for pair in regions.windows(2) {
        let ((a, a_ofs, a_size), (b, b_ofs, _)) = (&pair[0], &pair[1]);
        if a_ofs + a_size > *b_ofs {
            return Err(format!("{a} (at {a_ofs}, {a_size} bytes) overlaps {b} (at {b_ofs})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::bake::source::ImageSource;
    use crate::compare::compare;
    use crate::format::codec::{Codec, transcode as transcode_tile};

    const SIDE: u32 = 136;

    /// The real photograph fetched by `assets/fetch-data.sh` (Blue Marble, 5400×2700).
    fn real_jpeg() -> PathBuf {
        let dir = crate::bake::source::data_dir();
        let p = dir.join("bmng.jpg");
        assert!(p.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", p.display());
        p
    }

    /// A 136² crop with coastlines, cloud and relief: Western Europe and the Alps.
    fn crop() -> Vec<u8> {
        let img = ImageSource::open(&real_jpeg()).unwrap();
        let (w, x0, y0) = (5400usize, 2720usize, 640usize);
        assert_eq!(img.texels().len(), w * 2700 * 4);
        let mut out = Vec::with_capacity((SIDE * SIDE * 4) as usize);
        for y in y0..y0 + SIDE as usize {
            out.extend_from_slice(&img.texels()[(y * w + x0) * 4..(y * w + x0 + SIDE as usize) * 4]);
        }
        out
    }

    /// A software decode of `target` blocks to RGBA8, for checking the transcoder's output.
    fn decode_blocks(target: TargetFormat, data: &[u8], side: u32) -> Vec<u8> {
        let n = side as usize;
        let mut px = vec![0u32; n * n];
        match target {
            TargetFormat::Bc7 => texture2ddecoder::decode_bc7(data, n, n, &mut px),
            TargetFormat::Bc1 => texture2ddecoder::decode_bc1(data, n, n, &mut px),
            TargetFormat::Astc4x4 => texture2ddecoder::decode_astc(data, n, n, 4, 4, &mut px),
            TargetFormat::Etc2Rgba => texture2ddecoder::decode_etc2_rgba8(data, n, n, &mut px),
            TargetFormat::Rgba8 => unreachable!("not a block format"),
        }
        .unwrap();
        // texture2ddecoder packs BGRA in a little-endian u32.
        px.iter()
            .flat_map(|p| {
                let [b, g, r, a] = p.to_le_bytes();
                [r, g, b, a]
            })
            .collect()
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        compare(a, b).psnr_db
    }

    #[test]
    fn real_crop_quality_floors_and_transcodes() {
        let src = crop();
        let raw_len = src.len();
        let opts = EncodeOptions::default();
        // Per codec: PSNR floor against the source (dB), bits-per-texel ceiling, and the
        // PSNR floors of the software-decoded BC7, BC1, ASTC and ETC2 transcodes against
        // the RGBA8 decode. Measured on this crop at the default quality 128:
        //   ETC1S 31.2 dB, 1.45 bpt; BC7 50.9, BC1 48.1, ASTC 51.3 dB, ETC2 exact;
        //   UASTC 42.6 dB, 7.56 bpt (LZ4); BC7 50.5, BC1 35.9, ASTC 55.1, ETC2 35.8 dB.
        let floors = [
            (Codec::Etc1s, 30.0, 2.5, [48.0, 45.0, 48.0, f64::INFINITY]),
            (Codec::Uastc, 40.0, 8.5, [47.0, 33.0, 50.0, 33.0]),
        ];
        for (codec, floor, max_bpt, block_floors) in floors {
            let enc = codec.encode(&src, SIDE, &opts).unwrap();
            let bpt = enc.data.len() as f64 * 8.0 / f64::from(SIDE * SIDE);
            let rgba = enc.codec.decode(&enc.data, raw_len).unwrap();
            let db = psnr(&rgba, &src);
            eprintln!("{codec} stored as {}: {bpt:.2} bits/texel, {db:.2} dB", enc.codec);
            assert!(db >= floor, "{codec}: {db:.2} dB < {floor} dB");
            assert!(bpt < max_bpt, "{codec}: {bpt:.2} bits/texel ≥ {max_bpt}");
            assert_eq!(
                transcode_tile(enc.codec, &enc.data, raw_len, SIDE, TargetFormat::Rgba8).unwrap(),
                rgba
            );
            // Each block format has exactly its size, is deterministic, and decodes
            // (software decoder) close to what the encoder intended (the RGBA8 decode).
            let targets =
                [TargetFormat::Bc7, TargetFormat::Bc1, TargetFormat::Astc4x4, TargetFormat::Etc2Rgba];
            for (target, min_db) in targets.into_iter().zip(block_floors) {
                let blocks = transcode_tile(enc.codec, &enc.data, raw_len, SIDE, target).unwrap();
                assert_eq!(blocks.len(), target.bytes_per_tile(SIDE), "{codec} → {target}");
                assert_eq!(transcode_tile(enc.codec, &enc.data, raw_len, SIDE, target).unwrap(), blocks);
                let decoded = decode_blocks(target, &blocks, SIDE);
                let db = psnr(&decoded, &rgba);
                eprintln!("  {codec} → {target}: {db:.2} dB against the RGBA8 decode");
                assert!(db >= min_db, "{codec} → {target}: {db:.2} dB < {min_db} dB");
                // UASTC → BC7 may use mode-6 blocks whose p-bit caps alpha at 254.
                let min_alpha = decoded.chunks_exact(4).map(|p| p[3]).min();
                assert!(min_alpha >= Some(254), "{codec} → {target}: alpha {min_alpha:?}");
            }
        }
    }

    #[test]
    fn odd_tile_sizes_and_alpha_survive() {
        // 22² (16 + 2·3 border) is not a whole number of blocks; half the texels are translucent.
        let side = 22;
        let src: Vec<u8> = (0..side * side)
            .flat_map(|i| {
                let (x, y) = (i % side, i / side);
                [(x * 11) as u8, (y * 11) as u8, 128, if x < side / 2 { 255 } else { 64 }]
            })
            .collect();
        for codec in [Codec::Etc1s, Codec::Uastc] {
            let enc = codec.encode(&src, side, &EncodeOptions::default()).unwrap();
            let rgba = enc.codec.decode(&enc.data, src.len()).unwrap();
            // A steep synthetic gradient: ETC1S measures 28.4 dB here, UASTC far more.
            assert!(psnr(&rgba, &src) > 26.0, "{codec}: {:?}", compare(&rgba, &src));
            let alpha_err = rgba.chunks_exact(4).zip(src.chunks_exact(4)).map(|(a, b)| a[3].abs_diff(b[3]));
            assert!(alpha_err.max().unwrap() <= 8, "{codec}: alpha lost");
            for target in TargetFormat::ALL {
                let out = transcode_tile(enc.codec, &enc.data, src.len(), side, target).unwrap();
                assert_eq!(out.len(), target.bytes_per_tile(side));
            }
        }
    }

    #[test]
    fn uastc_rdo_and_lz4_shrink_the_tile() {
        let src = crop();
        let plain = EncodeOptions { uastc_lz4: false, ..EncodeOptions::default() };
        let a = Codec::Uastc.encode(&src, SIDE, &plain).unwrap();
        assert_eq!(a.codec, Codec::Uastc);
        let rdo = EncodeOptions { uastc_rdo: Some(1.0), ..EncodeOptions::default() };
        let b = Codec::Uastc.encode(&src, SIDE, &rdo).unwrap();
        assert_eq!(b.codec, Codec::UastcLz4);
        assert!(b.data.len() < a.data.len(), "rdo+lz4 {} ≥ plain {}", b.data.len(), a.data.len());
        let rgba = b.codec.decode(&b.data, src.len()).unwrap();
        assert!(psnr(&rgba, &src) >= 36.0, "{:.2} dB", psnr(&rgba, &src));
    }

    #[test]
    fn corrupt_blobs_are_errors_not_crashes() {
        let side = 32;
        let src: Vec<u8> = (0..side * side * 4).map(|i| (i * 7 % 256) as u8).collect();
        let raw_len = src.len();
        let no_lz4 = EncodeOptions { uastc_lz4: false, ..EncodeOptions::default() };
        for (codec, opts) in [
            (Codec::Etc1s, EncodeOptions::default()),
            (Codec::Uastc, no_lz4),
            (Codec::UastcLz4, EncodeOptions::default()),
        ] {
            let enc = codec.encode(&src, side, &opts).unwrap();
            let good = enc.data;
            assert_eq!(enc.codec, codec);
            let expected: Vec<_> = TargetFormat::ALL
                .iter()
                .map(|&target| transcode_tile(codec, &good, raw_len, side, target).unwrap())
                .collect();
            // A damaged blob is an error, unless the damage cannot change the result (an
            // LZ4 match offset moved within a run of equal bytes decompresses the same).
            let check = |blob: &[u8], what: &str| {
                for (target, want) in TargetFormat::ALL.into_iter().zip(&expected) {
                    if let Ok(out) = transcode_tile(codec, blob, raw_len, side, target) {
                        assert_eq!(&out, want, "{codec} {what} → {target} was accepted, and differs");
                    }
                }
            };
            // Every single-byte flip anywhere in the file, and every truncation. (Without
            // the data CRC-16, damaged UASTC blocks can trip an assertion in the C++
            // transcoder, e.g. `multiplier >= 1` going to ETC2: hence DataCheck.)
            for i in 0..good.len() {
                for flip in [0x5a, 0xff, 0x01, 0x80] {
                    let mut bad = good.clone();
                    bad[i] ^= flip;
                    check(&bad, &format!("flip {flip:#x} at {i}"));
                }
            }
            for len in (0..good.len()).step_by(7) {
                check(&good[..len], &format!("truncated to {len}"));
            }
            check(&vec![0u8; good.len()], "zeros");
            // A valid file of the wrong size or mode.
            assert!(transcode_tile(codec, &good, 16 * 16 * 4, 16, TargetFormat::Rgba8).is_err());
            let other = if codec == Codec::Etc1s { Codec::Uastc } else { Codec::Etc1s };
            if codec != Codec::UastcLz4 {
                assert!(transcode_tile(other, &good, raw_len, side, TargetFormat::Rgba8).is_err());
            }
            assert!(codec.decode(&good, raw_len + 4).is_err(), "not square");
        }
    }

    /// Small real tiles of side 32: ETC1S opaque, ETC1S with alpha (two slices), UASTC.
    fn small_tiles() -> Vec<(BasisMode, Vec<u8>)> {
        let side = 32;
        let opaque: Vec<u8> =
            (0..side * side * 4).map(|i| if i % 4 == 3 { 255 } else { (i * 7 % 256) as u8 }).collect();
        let alpha: Vec<u8> = (0..side * side * 4).map(|i| (i * 7 % 256) as u8).collect();
        let opts = EncodeOptions::default();
        let tiles = vec![
            (BasisMode::Etc1s, encode(&opaque, side, BasisMode::Etc1s, &opts).unwrap()),
            (BasisMode::Etc1s, encode(&alpha, side, BasisMode::Etc1s, &opts).unwrap()),
            (BasisMode::Uastc, encode(&alpha, side, BasisMode::Uastc, &opts).unwrap()),
        ];
        let slices: Vec<_> = tiles.iter().map(|(_, b)| read_le(b, field::TOTAL_SLICES).unwrap()).collect();
        assert_eq!(slices, [1, 2, 1], "the alpha ETC1S tile has a colour and an alpha slice");
        tiles
    }

    fn set_le(blob: &mut [u8], (at, size): (usize, usize), value: u32) {
        for (i, b) in blob[at..at + size].iter_mut().enumerate() {
            *b = (value >> (8 * i)) as u8;
        }
    }

    /// Transcodes `blob` to every target with and without the data CRC; no panic, no
    /// abort; `Ok` only with the right size. Returns whether any transcode succeeded.
    fn transcode_all(blob: &[u8], mode: BasisMode, side: u32) -> bool {
        let mut any_ok = false;
        for target in TargetFormat::ALL {
            for check in [DataCheck::Crc16, DataCheck::AlreadyVerified] {
                if let Ok(out) = transcode(blob, mode, side, target, check) {
                    assert_eq!(out.len(), target.bytes_per_tile(side));
                    any_ok = true;
                }
            }
        }
        any_ok
    }

    #[test]
    fn real_tiles_pass_the_structure_check() {
        for (mode, blob) in small_tiles() {
            check_structure(&blob, mode, 32).unwrap();
            let mut copy = blob.clone();
            repair_crcs(&mut copy);
            assert_eq!(copy, blob, "the test's CRC-16 is the file's");
        }
    }

    #[test]
    fn forged_headers_with_repaired_crcs_are_errors_not_crashes() {
        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        type Forge = (&'static str, Edit);
        let set = |f: (usize, usize), v: u32| -> Edit { Box::new(move |b| set_le(b, f, v)) };
        let slice = |f: (usize, usize), v: u32| -> Edit {
            Box::new(move |b| {
                let at = read_le(b, field::SLICE_DESC_OFS).unwrap() as usize;
                set_le(b, (at + f.0, f.1), v)
            })
        };
        let forged: Vec<Forge> = vec![
            // 77 + 0xFFFFFFFF wraps to 76 in the transcoder's u32 check (was a SIGSEGV).
            ("data size 0xFFFFFFFF", set(field::DATA_SIZE, u32::MAX)),
            ("data size 0", set(field::DATA_SIZE, 0)),
            (
                "data size one short",
                Box::new(|b| {
                    let n = b.len() as u32 - 78;
                    set_le(b, field::DATA_SIZE, n)
                }),
            ),
            ("header size 0xFFFF", set(field::HEADER_SIZE, 0xFFFF)),
            ("total slices 0xFFFFFF", set(field::TOTAL_SLICES, 0xFF_FFFF)),
            ("total slices 0", set(field::TOTAL_SLICES, 0)),
            ("total slices 3", set(field::TOTAL_SLICES, 3)),
            ("total images 0", set(field::TOTAL_IMAGES, 0)),
            ("total images 0xFFFFFF", set(field::TOTAL_IMAGES, 0xFF_FFFF)),
            ("texture type 2", set(field::TEX_TYPE, 2)),
            ("global codebook flag", Box::new(|b| b[21] |= FLAG_GLOBAL_CODEBOOK as u8)),
            ("ETC1S flag flipped", Box::new(|b| b[21] ^= FLAG_ETC1S as u8)),
            ("format flipped", Box::new(|b| b[20] ^= 1)),
            ("slice table at 0xFFFFFFFF", set(field::SLICE_DESC_OFS, u32::MAX)),
            ("slice table at 0", set(field::SLICE_DESC_OFS, 0)),
            (
                "slice table past the end",
                Box::new(|b| {
                    let n = b.len() as u32 - 5;
                    set_le(b, field::SLICE_DESC_OFS, n)
                }),
            ),
            ("endpoint codebook at 0xFFFFFFFF (ETC1S)", set(field::ENDPOINT_CB_OFS, u32::MAX)),
            ("endpoint codebook of 0xFFFFFF bytes", set(field::ENDPOINT_CB_SIZE, 0xFF_FFFF)),
            ("selector codebook at 0xFFFFFFF0 (ETC1S)", set(field::SELECTOR_CB_OFS, 0xFFFF_FFF0)),
            ("selector codebook of 0xFFFFFF bytes", set(field::SELECTOR_CB_SIZE, 0xFF_FFFF)),
            ("tables at 0xFFFFFFFF (ETC1S)", set(field::TABLES_OFS, u32::MAX)),
            ("tables of 0xFFFFFFFF bytes", set(field::TABLES_SIZE, u32::MAX)),
            ("tables over the header (ETC1S)", set(field::TABLES_OFS, 10)),
            ("extended data of 0xFFFFFFFF bytes", set(field::EXTENDED_SIZE, u32::MAX)),
            ("slice at 0xFFFFFFFF", slice(field::SLICE_FILE_OFS, u32::MAX)),
            ("slice at 0xFFFFFFF0", slice(field::SLICE_FILE_OFS, 0xFFFF_FFF0)),
            ("slice over the header", slice(field::SLICE_FILE_OFS, 3)),
            ("slice of 0xFFFFFFFF bytes", slice(field::SLICE_FILE_SIZE, u32::MAX)),
            ("slice of 0 bytes", slice(field::SLICE_FILE_SIZE, 0)),
            ("slice width 0", slice(field::SLICE_WIDTH, 0)),
            ("slice width 0xFFFF", slice(field::SLICE_WIDTH, 0xFFFF)),
            ("slice blocks 0xFFFF", slice(field::SLICE_BLOCKS_X, 0xFFFF)),
            ("slice blocks 0", slice(field::SLICE_BLOCKS_Y, 0)),
            ("slice of image 1", slice(field::SLICE_IMAGE, 1)),
            ("slice of level 1", slice(field::SLICE_LEVEL, 1)),
        ];
        for (mode, good) in small_tiles() {
            assert!(transcode_all(&good, mode, 32));
            for (what, forge) in &forged {
                let mut bad = good.clone();
                forge(&mut bad);
                repair_crcs(&mut bad);
                if mode == BasisMode::Uastc && what.ends_with("(ETC1S)") {
                    // UASTC has no codebooks or tables: where their empty regions lie is
                    // never read. It must still not crash.
                    transcode_all(&bad, mode, 32);
                    continue;
                }
                let err = check_structure(&bad, mode, 32);
                assert!(err.is_err(), "{} {what}: passed the structure check", mode.name());
                assert!(!transcode_all(&bad, mode, 32), "{} {what}: transcoded", mode.name());
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Random bytes of the header and slice table, CRCs repaired: an error or a
        /// correct-size tile, and the process survives.
        #[test]
        fn random_header_edits_never_crash(
            tile in 0usize..3,
            edits in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 1..6),
        ) {
            let tiles = SMALL_TILES.get_or_init(small_tiles);
            let (mode, good) = &tiles[tile];
            let slices = read_le(good, field::TOTAL_SLICES).unwrap() as usize;
            let span = HEADER_LEN as usize + slices * SLICE_DESC_LEN as usize;
            let mut bad = good.clone();
            for (at, value) in edits {
                bad[at % span] = value;
            }
            repair_crcs(&mut bad);
            transcode_all(&bad, *mode, 32);
        }
    }

    static SMALL_TILES: std::sync::OnceLock<Vec<(BasisMode, Vec<u8>)>> = std::sync::OnceLock::new();

    #[test]
    fn bad_options_are_errors() {
        let src = vec![0u8; 16 * 16 * 4];
        let bad = EncodeOptions { quality: 0, ..EncodeOptions::default() };
        assert!(matches!(Codec::Etc1s.encode(&src, 16, &bad), Err(CodecError::Options(_))));
        assert!(matches!(Codec::Uastc.encode(&src[4..], 16, &bad), Err(CodecError::Length { .. })));
    }

    /// Assertion failures inside the transcoder, where the guard turns them into errors.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    mod guarded {
        use super::*;

        const _: () = assert!(ASSERTIONS_ARE_ERRORS, "this build guards the transcoder");

        /// Forged tiles whose compressed contents trip an assertion inside the C++
        /// transcoder: edits after the header of a real 32² `mode` tile, both CRC-16s
        /// repaired, tried in a fixed order with each target until `max` are found. Returns
        /// (blob, target, error text). Needs the guard: unguarded, the first one aborts.
        fn asserting_forgeries(
            mode: BasisMode,
            good: &[u8],
            max: usize,
        ) -> Vec<(Vec<u8>, TargetFormat, String)> {
            let mut found = Vec::new();
            // Single-byte flips, then runs of set bits (an ETC1S variable-length code only
            // ends at a clear continuation bit).
            for (run, byte) in [(1, 0xff), (1, 0x5a), (1, 0x01), (1, 0x80), (4, 0xff), (8, 0xff)] {
                for i in HEADER_LEN as usize..good.len() {
                    let mut bad = good.to_vec();
                    let end = (i + run).min(bad.len());
                    for b in &mut bad[i..end] {
                        *b = if run == 1 { *b ^ byte } else { byte };
                    }
                    repair_crcs(&mut bad);
                    for target in TargetFormat::ALL {
                        if let Err(e @ CodecError::Corrupt(_)) =
                            transcode(&bad, mode, 32, target, DataCheck::Crc16)
                            && e.to_string().contains("assertion failed")
                        {
                            found.push((bad.clone(), target, e.to_string()));
                            if found.len() == max {
                                return found;
                            }
                        }
                    }
                }
            }
            found
        }

        /// A real 32² ETC1S tile (gradient and noise, quality 255) whose Huffman models hold
        /// the endpoint-prediction repeat symbol, so a forged run of set bits reaches the
        /// `decode_vlc` assertion; and the UASTC tile of [`small_tiles`], whose blocks reach
        /// `multiplier >= 1` going to ETC2.
        /// Each with the function and the expression of the assertion it reaches.
        fn tiles_that_can_assert() -> [(BasisMode, Vec<u8>, (&'static str, &'static str)); 2] {
            let side = 32u32;
            let src: Vec<u8> = (0..side * side)
                .flat_map(|i| {
                    let noise = (i.wrapping_mul(2_654_435_761) >> 24) as u8;
                    [((i % side) * 8) as u8, ((i / side) * 8) as u8, noise, 255]
                })
                .collect();
            let opts = EncodeOptions { quality: 255, ..EncodeOptions::default() };
            let etc1s = encode(&src, side, BasisMode::Etc1s, &opts).unwrap();
            let uastc = small_tiles().pop().unwrap();
            assert_eq!(uastc.0, BasisMode::Uastc);
            [
                (BasisMode::Etc1s, etc1s, ("bitwise_decoder::decode_vlc", "0")),
                (BasisMode::Uastc, uastc.1, ("transcode_uastc_to_etc2_eac_a8", "multiplier >= 1")),
            ]
        }

        /// Runs the ignored test `name` of this binary alone in a child process with `env`.
        fn run_child(name: &str, env: &[(&str, String)]) -> std::process::Output {
            let exe = std::env::current_exe().unwrap();
            std::process::Command::new(exe)
                .args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .envs(env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap()
        }

        fn hex(bytes: &[u8]) -> String {
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }

        const CHILD_BLOB: &str = "TESSERA_TEST_BASIS_BLOB";

        #[test]
        fn forged_contents_that_assert_are_errors() {
            for (mode, good, (function, expr)) in tiles_that_can_assert() {
                let name = mode.name();
                let expected: Vec<_> = TargetFormat::ALL
                    .iter()
                    .map(|&t| transcode(&good, mode, 32, t, DataCheck::Crc16).unwrap())
                    .collect();
                let forged = asserting_forgeries(mode, &good, 20);
                assert_eq!(forged.len(), 20, "{name}: only {} forgeries trip an assertion", forged.len());
                for (bad, target, err) in &forged {
                    let named = err.contains(function) && err.contains(&format!("Assertion '{expr}' failed"));
                    assert!(named, "{name} → {target}: {err}");
                    assert!(err.starts_with(&format!("corrupt compressed data: {name} tile: ")), "{err}");
                    // The same thread's next transcoder gives bit-identical tiles, and the
                    // forgery fails the same way again.
                    for (t, want) in TargetFormat::ALL.into_iter().zip(&expected) {
                        assert_eq!(
                            &transcode(&good, mode, 32, t, DataCheck::Crc16).unwrap(),
                            want,
                            "{name} → {t}"
                        );
                    }
                    let again = transcode(bad, mode, 32, *target, DataCheck::AlreadyVerified).unwrap_err();
                    assert_eq!(&again.to_string(), err);
                }
                // Without the guard the first forgery aborts, as it did before the guard.
                let (bad, target, _) = &forged[0];
                let env = [(CHILD_BLOB, format!("{name} {target} {}", hex(bad)))];
                let out = run_child("format::basis::tests::guarded::child_transcodes_unguarded", &env);
                let stderr = String::from_utf8_lossy(&out.stderr);
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(out.status.signal(), Some(6), "{name}: not SIGABRT: {:?}\n{stderr}", out.status);
                let glibc = format!("Assertion `{expr}' failed.");
                assert!(stderr.contains(function) && stderr.contains(&glibc), "{name}: {stderr}");
            }
        }

        /// Child process of `forged_contents_that_assert_are_errors`: transcodes the blob
        /// in `TESSERA_TEST_BASIS_BLOB` ("mode target hex") without the guard.
        #[test]
        #[ignore = "a child process of forged_contents_that_assert_are_errors"]
        fn child_transcodes_unguarded() {
            let Ok(spec) = std::env::var(CHILD_BLOB) else { return };
            let [mode, target, blob] = spec.split(' ').collect::<Vec<_>>()[..] else { panic!("{spec}") };
            let mode = if mode == "etc1s" { BasisMode::Etc1s } else { BasisMode::Uastc };
            let target = TargetFormat::ALL.into_iter().find(|t| t.to_string() == target).unwrap();
            let blob: Vec<u8> = (0..blob.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&blob[i..i + 2], 16).unwrap())
                .collect();
            guard::UNGUARDED.set(true);
            let result = transcode(&blob, mode, 32, target, DataCheck::Crc16);
            panic!("the unguarded transcode returned: {result:?}");
        }

        #[test]
        fn assertion_failures_on_many_threads_leak_little() {
            let out = run_child(
                "format::basis::tests::guarded::child_fails_many_times",
                &[(CHILD_BLOB, "run".into())],
            );
            let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            eprintln!("{text}");
            assert!(out.status.success() && text.contains("1 passed"), "{:?}", out.status);
        }

        /// Child process of `assertion_failures_on_many_threads_leak_little`, alone so that
        /// its heap is its own. Per mode: 4 threads × 250 assertion failures, each followed
        /// by a good tile that must come out bit-identical, after a warm-up. UASTC leaks
        /// nothing. ETC1S leaks what the jump skips: the transcode's selector history
        /// buffer, at most 8191 `int`s (its size is a 13-bit field of the file).
        #[test]
        #[ignore = "a child process of assertion_failures_on_many_threads_leak_little"]
        fn child_fails_many_times() {
            if std::env::var(CHILD_BLOB).is_err() {
                return;
            }
            const MAX_ETC1S_LEAK: usize = 8191 * 4 + 256;
            for (mode, good, _) in tiles_that_can_assert() {
                let forged = asserting_forgeries(mode, &good, 4);
                let expected: Vec<_> = forged
                    .iter()
                    .map(|(_, t, _)| transcode(&good, mode, 32, *t, DataCheck::Crc16).unwrap())
                    .collect();
                let run = |per_thread: usize| {
                    std::thread::scope(|s| {
                        for k in 0..4 {
                            let (forged, expected, good) = (&forged, &expected, &good);
                            s.spawn(move || {
                                for n in 0..per_thread {
                                    let j = (n + k) % forged.len();
                                    let (bad, target, err) = &forged[j];
                                    let e = transcode(bad, mode, 32, *target, DataCheck::Crc16).unwrap_err();
                                    assert_eq!(&e.to_string(), err);
                                    let out = transcode(good, mode, 32, *target, DataCheck::Crc16).unwrap();
                                    assert_eq!(out, expected[j]);
                                }
                            });
                        }
                    })
                };
                run(50);
                let (heap0, rss0) = (heap_in_use(), crate::stream::simulate::rss_bytes());
                run(250);
                let (heap1, rss1) = (heap_in_use(), crate::stream::simulate::rss_bytes());
                let per_failure = heap1.saturating_sub(heap0) / 1000;
                println!(
                    "{}: 1000 assertion failures on 4 threads: heap in use {heap0} → {heap1} bytes \
                     ({per_failure} per failure), RSS {} → {} KiB",
                    mode.name(),
                    rss0 >> 10,
                    rss1 >> 10
                );
                match mode {
                    BasisMode::Uastc => {
                        assert!(heap1 < heap0 + 64 * 1024, "uastc leaks {per_failure} per failure")
                    }
                    BasisMode::Etc1s => {
                        assert!(per_failure <= MAX_ETC1S_LEAK, "etc1s leaks {per_failure} per failure")
                    }
                }
            }
        }

        /// Bytes malloc has handed out and not had back, over all arenas (glibc `mallinfo2`).
        fn heap_in_use() -> usize {
            #[repr(C)]
            struct MallInfo2 {
                arena: usize,
                ordblks: usize,
                smblks: usize,
                hblks: usize,
                hblkhd: usize,
                usmblks: usize,
                fsmblks: usize,
                uordblks: usize,
                fordblks: usize,
                keepcost: usize,
            }
            unsafe extern "C" {
                fn mallinfo2() -> MallInfo2;
            }
            // SAFETY: mallinfo2 (glibc ≥ 2.33) only reads malloc's statistics.
            let m = unsafe { mallinfo2() };
            m.uordblks + m.hblkhd
        }
    }
}
