//! The Basis Universal encoder: the `basis-universal` crate's C++ compressor, at bake time
//! only and natively only (the browser build links no C or C++).

use std::sync::Once;

use basis_universal::{BasisTextureFormat, Compressor, CompressorParams, sys};

use super::BasisMode;
use crate::format::codec_types::{CodecError, EncodeOptions};
use crate::format::color::ColorSpace;

fn basis_format(mode: BasisMode) -> BasisTextureFormat {
    match mode {
        BasisMode::Etc1s => BasisTextureFormat::ETC1S,
        BasisMode::Uastc => BasisTextureFormat::UASTC4x4,
    }
}

/// Initialises the Basis Universal encoder's tables, once per process. [`encode`] calls
/// it; calling it early moves the cost (a few ms) out of the first tile.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(basis_universal::encoder_init);
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
    params.set_basis_format(basis_format(mode));
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
