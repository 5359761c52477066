//! The reference C++ Basis Universal transcoder (the `basis-universal` crate), built only
//! with the `cpp-transcoder` feature, for comparisons with the run-time Rust transcoder
//! (tests, `benches/transcode.rs`, `tessera codecs` with `TESSERA_TRANSCODER=cpp`).
//!
//! Never on the render path: the vendored transcoder is compiled with assertions on, and
//! some fire on malformed compressed contents that no structural check rules out (e.g.
//! `decode_vlc` for ETC1S, `multiplier >= 1` for UASTC to ETC2); such an assertion aborts
//! the process. Only feed it tiles of known integrity.

use std::cell::RefCell;

use basis_universal::{DecodeFlags, TranscoderTextureFormat, sys};

use super::{BasisMode, DataCheck, check_structure};
use crate::format::codec_types::{CodecError, TargetFormat};

/// A C++ transcoder owned by one thread; deleted on drop.
struct CppTranscoder(*mut sys::Transcoder);

impl Drop for CppTranscoder {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `transcoder_new` and is deleted once, here.
        unsafe { sys::transcoder_delete(self.0) }
    }
}

thread_local! {
    /// One transcoder per thread: it keeps its buffers between tiles.
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

/// Transcodes a `.basis` tile of `mode` that must hold one `side × side` image into
/// `target` with the C++ transcoder, after the same structure check as the Rust path
/// (the C++ code trusts sizes and offsets that `check_structure` verifies).
///
/// A tile whose compressed contents trip one of the transcoder's assertions aborts the
/// process (see the module documentation).
pub fn transcode(
    blob: &[u8],
    mode: BasisMode,
    side: u32,
    target: TargetFormat,
    check: DataCheck,
) -> Result<Vec<u8>, CodecError> {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(basis_universal::transcoder_init);
    let corrupt = |what: &str| CodecError::Corrupt(format!("{} tile: {what}", mode.name()));
    check_structure(blob, mode, side).map_err(|e| corrupt(&e))?;
    // check_structure matched the length to the header's 32-bit data size (+ 77 bytes).
    let len = u32::try_from(blob.len()).map_err(|_| corrupt("larger than 4 GiB"))?;
    let mut out = vec![0u8; target.bytes_per_tile(side)];
    let blocks = side.div_ceil(4);
    let units = if target == TargetFormat::Rgba8 { side * side } else { blocks * blocks };
    // Opaque BC1 only, as on the Rust path.
    let flags = if target == TargetFormat::Bc1 {
        DecodeFlags::BC1_FORBID_THREE_COLOR_BLOCKS
    } else {
        DecodeFlags::empty()
    };
    TRANSCODER.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| corrupt("transcoder re-entered"))?;
        // SAFETY: allocates a fresh transcoder; no preconditions.
        let t = slot.get_or_insert_with(|| CppTranscoder(unsafe { sys::transcoder_new() })).0;
        let data = blob.as_ptr().cast();
        // SAFETY: `t` is this thread's live transcoder; `data`/`len` describe `blob`, which
        // `check_structure` accepted; `out` has room for `units` blocks or texels of
        // `target`, the size `transcode_image_level` is told.
        unsafe {
            if !sys::transcoder_validate_header(t, data, len) {
                return Err(corrupt("not a valid .basis header"));
            }
            if !sys::transcoder_validate_file_checksums(t, data, len, check == DataCheck::Crc16) {
                return Err(corrupt(".basis header or data checksum mismatch"));
            }
            if sys::transcoder_get_total_image_levels(t, data, len, 0) != 1 {
                return Err(corrupt("a tile must hold exactly one image of one level"));
            }
            if !sys::transcoder_start_transcoding(t, data, len) {
                return Err(corrupt("codebooks or tables do not decode"));
            }
            let ok = sys::transcoder_transcode_image_level(
                t,
                data,
                len,
                0,
                0,
                out.as_mut_ptr().cast(),
                units,
                target_format(target).into(),
                flags.bits(),
                0,
                std::ptr::null_mut(),
                0,
            );
            sys::transcoder_stop_transcoding(t);
            if !ok {
                return Err(corrupt(&format!("transcoding to {target} failed")));
            }
        }
        Ok(())
    })?;
    Ok(out)
}
