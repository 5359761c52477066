//! Entry points for fuzzers and their regression tests: each takes arbitrary bytes, runs
//! them through one of the engine's readers of untrusted input and returns a small
//! [`Summary`].
//!
//! Every entry point must never panic, abort, hang or exhaust memory, whatever the bytes:
//! a panic here is a bug of the reader (or a broken invariant the entry point asserts).
//! Decodes run under [`MEMORY_LIMIT`] and a per-input decode budget, so a huge declared
//! size is an error or is skipped quickly. The AFL++ harnesses in `fuzz/` call these,
//! `engine/core/tests/fuzz_regressions.rs` replays crashers and the [`seeds`] through
//! them, and `scripts/fuzz` runs a campaign.
//!
//! Inputs that carry checksums can repair them first, so that mutations reach the code
//! behind the checksum check: for the atlas and Basis targets the first byte is a control
//! byte (see [`ATLAS_REPAIR_HEADER`] and [`BASIS_REPAIR`]).

pub mod ktx2_fields;
mod scratch;
pub mod seeds;
mod tiff_codec_seeds;

use std::hint::black_box;
use std::path::Path;

use crate::bake::dds::DdsSource;
use crate::bake::ktx2::Ktx2Source;
use crate::bake::open::{Kind, open_image};
use crate::bake::source::{RowSource, SourceError, TEXEL_BYTES, decode_bytes_with_limit};
use crate::bake::tiff::TiffSource;
use crate::format::atlas::{Atlas, ENTRY_BYTES, HEADER_BYTES, LAYER_BYTES, ROOT_FIXED_BYTES};
use crate::format::basis::{self, BasisMode, DataCheck};
use crate::format::basis_rust;
use crate::format::codec::TargetFormat;
use crate::scene::camera::{CameraPath, SCENE_PRESETS};
use crate::scene::material_scene::{
    ImageRef, ScenePaths, embedded_image_bytes, load_gltf_with, scene_images,
};

/// Memory one image decode may take inside a harness: larger images are refused before
/// they are decoded. 16 MiB (4 megapixels of RGBA8) keeps every input well under AFL's
/// 2-second timeout: a 355-byte JPEG declaring 2572×5132 grey pixels, accepted under the
/// earlier 64 MiB, took 2 s to decode twice in the instrumented build (a smoke run
/// reported it as a hang). The bake's own limit is the process-wide one
/// (`bake::source::memory_limit`).
pub const MEMORY_LIMIT: u64 = 16 << 20;

/// Decoded bytes one atlas input may produce; the tiles past it are not decoded (a small
/// file can index the same 16 MiB LZ4 tile thousands of times).
pub const ATLAS_DECODE_BUDGET: u64 = 64 << 20;

/// Atlas control bit: set the header's file size to the input's length and recompute
/// the layer table and index CRC-32 and the header CRC-32.
pub const ATLAS_REPAIR_HEADER: u8 = 1;
/// Atlas control bit: recompute the CRC-32 of every tile blob the index points at
/// (inside the file), before the header is repaired.
pub const ATLAS_REPAIR_TILES: u8 = 2;

/// Atlas control bit: the file is a split atlas' index object followed by its one data
/// object, cut where the header's `data_offset` says; the data object is written as
/// `input.tsa.shards/0-of-1.part`, the name a merge of one shard gives it.
pub const ATLAS_SPLIT: u8 = 4;

/// Basis control bit: recompute both CRC-16s of the blob.
pub const BASIS_REPAIR: u8 = 1;
/// Basis control bit: the blob is a UASTC tile (else ETC1S).
pub const BASIS_UASTC: u8 = 2;
/// Basis control bit: transcode with [`DataCheck::AlreadyVerified`] (skip the data CRC-16).
pub const BASIS_VERIFIED: u8 = 4;

/// What one input did: useful to check that seeds reach deep, never asserted by fuzzers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The input passed the reader's validation as a whole (atlas opened, Basis structure
    /// valid, scene loaded, camera path parsed, image decoded).
    pub accepted: bool,
    /// Parts that decoded (tiles, transcodes, meshes and images, sampled cameras).
    pub ok: u32,
    /// Parts that were refused with an error.
    pub failed: u32,
}

impl Summary {
    fn record<T, E: std::fmt::Display>(&mut self, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(v) => {
                self.ok += 1;
                Some(v)
            }
            Err(e) => {
                // Formatting the message is part of every error path users see.
                black_box(e.to_string());
                self.failed += 1;
                None
            }
        }
    }
}

/// The five fuzz targets, one per reader of untrusted input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// [`atlas()`]: an atlas file, opened and every tile decoded.
    Atlas,
    /// [`basis()`]: one Basis Universal tile, checked and transcoded to every format.
    Basis,
    /// [`gltf()`]: a glTF or GLB scene, imported.
    Gltf,
    /// [`camera()`]: a camera path JSON file.
    Camera,
    /// [`image()`]: a PNG or JPEG image source.
    Image,
}

impl Target {
    /// Every target, in the order `scripts/fuzz all` runs them.
    pub const ALL: [Target; 5] = [Target::Atlas, Target::Basis, Target::Gltf, Target::Camera, Target::Image];

    /// The target's name: its harness binary, seed folder and regression folder.
    pub fn name(self) -> &'static str {
        match self {
            Target::Atlas => "atlas",
            Target::Basis => "basis",
            Target::Gltf => "gltf",
            Target::Camera => "camera",
            Target::Image => "image",
        }
    }

    /// The target called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs the target's entry point on `data`.
    pub fn run(self, data: &[u8]) -> Summary {
        match self {
            Target::Atlas => atlas(data),
            Target::Basis => basis(data),
            Target::Gltf => gltf(data),
            Target::Camera => camera(data),
            Target::Image => image(data),
        }
    }
}

/// Atlas reader: `data` is a control byte ([`ATLAS_REPAIR_HEADER`], [`ATLAS_REPAIR_TILES`],
/// [`ATLAS_SPLIT`]) then an atlas file. Opens it and decodes every tile of every layer and
/// mip to RGBA8 (as `tessera verify` does), errors tolerated, within
/// [`ATLAS_DECODE_BUDGET`]; asserts that every decoded tile has its layer's size.
pub fn atlas(data: &[u8]) -> Summary {
    let mut s = Summary::default();
    let Some((&control, file)) = data.split_first() else { return s };
    let mut file = file.to_vec();
    // A split atlas: the index object, then its data object.
    let cut = if control & ATLAS_SPLIT != 0 {
        le_u64(&file, 40).filter(|&c| c <= file.len() as u64).map_or(file.len(), |c| c as usize)
    } else {
        file.len()
    };
    let index = index_at(&file, (control & ATLAS_SPLIT != 0).then_some(cut as u64));
    if control & ATLAS_REPAIR_TILES != 0 {
        repair_tile_crcs(&mut file, index);
    }
    if control & ATLAS_REPAIR_HEADER != 0 {
        repair_atlas_header(&mut file, cut, index);
    }
    let data_object = file.split_off(cut);
    // Written for every input (empty unless split), so that no input sees the data
    // object of the one before.
    let shared: scratch::Shared =
        ("split-folder", |dir| std::fs::create_dir_all(dir.join("input.tsa.shards")));
    if scratch::write("input.tsa.shards/0-of-1.part", &data_object, Some(shared)).is_none() {
        return s;
    }
    let Some(path) = scratch::write("input.tsa", &file, None) else { return s };
    let Some(atlas) = s.record(Atlas::open(&path)) else { return s };
    s.accepted = true;
    black_box(atlas.summary());
    let mut budget = ATLAS_DECODE_BUDGET;
    'layers: for (i, layer) in atlas.layers().iter().enumerate() {
        let raw = u64::from(layer.layout.padded_tile_size()).pow(2) * 4;
        // At most 4096 layers (checked at open), so the index fits a u16.
        for tile in layer.layout.tiles(i as u16) {
            let Some(left) = budget.checked_sub(raw) else { break 'layers };
            budget = left;
            if let Some(texels) = s.record(atlas.decode_tile(tile)) {
                assert_eq!(texels.len() as u64, raw, "{tile}: decoded tile size");
            }
        }
    }
    s
}

/// Basis tile: `data` is a control byte ([`BASIS_REPAIR`], [`BASIS_UASTC`],
/// [`BASIS_VERIFIED`]), the tile side in texels (one byte), then a `.basis` file. Runs
/// the structure check, then the run-time (pure-Rust) transcoder to every
/// [`TargetFormat`]; asserts that every transcode that succeeds has the format's size.
pub fn basis(data: &[u8]) -> Summary {
    let mut s = Summary::default();
    let [control, side, blob @ ..] = data else { return s };
    let mut blob = blob.to_vec();
    if control & BASIS_REPAIR != 0 {
        basis::repair_crcs(&mut blob);
    }
    let mode = if control & BASIS_UASTC != 0 { BasisMode::Uastc } else { BasisMode::Etc1s };
    let check = if control & BASIS_VERIFIED != 0 { DataCheck::AlreadyVerified } else { DataCheck::Crc16 };
    let side = u32::from(*side);
    s.accepted = s.record(basis::check_structure(&blob, mode, side)).is_some();
    for target in TargetFormat::ALL {
        if let Some(out) = s.record(basis_rust::transcode(&blob, mode, side, target, check)) {
            assert_eq!(out.len(), target.bytes_per_tile(side), "{target}: transcoded size");
        }
    }
    s
}

/// glTF scene import: `data` is a `.gltf` (JSON) or `.glb` file, written as
/// `scene.gltf` into a scratch folder that also holds `buffer.bin`, `tex.png` and
/// `tex.jpg` ([`seeds::write_gltf_siblings`]). Imports it with its URIs confined to that
/// folder, decodes every embedded image under [`MEMORY_LIMIT`] (as the scene bake does)
/// and builds the scene's camera presets.
pub fn gltf(data: &[u8]) -> Summary {
    let mut s = Summary::default();
    let shared: scratch::Shared = ("gltf", seeds::write_gltf_siblings);
    let Some(path) = scratch::write("scene.gltf", data, Some(shared)) else { return s };
    let Some(scene) = s.record(load_gltf_with(&path, ScenePaths::Confined)) else { return s };
    s.accepted = true;
    for image in scene_images(&scene) {
        if let ImageRef::Embedded { index, .. } = image
            && let Some(bytes) = s.record(embedded_image_bytes(&path, index, scene.paths))
        {
            s.record(decode_bytes_with_limit(&path, &bytes, MEMORY_LIMIT));
        }
    }
    for name in SCENE_PRESETS {
        black_box(CameraPath::preset_for(name, Some(&scene)));
    }
    s
}

/// Camera path JSON: `data` is the file's text. Parses and validates it, samples the
/// path at and between its keyframes and computes the view-projection matrices; asserts
/// that a valid path survives a JSON round trip unchanged.
pub fn camera(data: &[u8]) -> Summary {
    let mut s = Summary::default();
    let Some(text) = s.record(std::str::from_utf8(data)) else { return s };
    let Some(path) = s.record(CameraPath::from_json_str(text)) else { return s };
    s.accepted = true;
    let end = path.end_frame();
    for frame in [0, end / 2, end, end.saturating_add(1)] {
        black_box(path.camera_at(frame).view_projection(16.0 / 9.0));
        s.ok += 1;
    }
    for k in &path.keyframes {
        black_box(path.sample(k.frame + 0.5).view_projection(1.0));
        s.ok += 1;
    }
    let json = path.to_json();
    match CameraPath::from_json_str(&json) {
        Ok(back) => assert_eq!(back, path, "camera path changed in a JSON round trip: {json}"),
        Err(e) => panic!("a valid camera path does not read back from its own JSON: {e}\n{json}"),
    }
    s
}

/// Image source: `data` is an image file (PNG, JPEG, TIFF, DDS or KTX2). Decodes it as the baker
/// decodes its inputs, under [`MEMORY_LIMIT`], and converts it to RGBA8; asserts the RGBA8
/// size. Then reads it again through the bake's own source for that format
/// ([`open_image`](crate::bake::open::open_image): PNG row by row, JPEG in its own layout,
/// TIFF chunk by chunk, DDS block row by block row, KTX2 through the Rust transcoder) in overlapping bands, and asserts that where both read the image
/// they give the same texels.
///
/// A KTX2 input is then read again with one header or level-index field forged
/// ([`ktx2_fields::mutate`], the field and value picked by a hash of the input): forged
/// lengths and offsets must be errors, never a panic, an abort or a huge allocation. The
/// summary is the unforged file's.
pub fn image(data: &[u8]) -> Summary {
    let s = image_once(data);
    if crate::bake::open::sniff(data) == Kind::Ktx2
        && let Some((_, _, forged)) = ktx2_fields::mutate(data, u64::from(crc32fast::hash(data)))
    {
        black_box(image_once(&forged));
    }
    s
}

/// [`image`] without the forged KTX2 field.
fn image_once(data: &[u8]) -> Summary {
    let mut s = Summary::default();
    // TIFF and DDS have only the bake's readers (this build's `image` decodes neither).
    let kind = crate::bake::open::sniff(data);
    let (is_tiff, is_dds, is_ktx2) = (kind == Kind::Tiff, kind == Kind::Dds, kind == Kind::Ktx2);
    let whole = if is_tiff || is_dds || is_ktx2 {
        None
    } else {
        s.record(decode_bytes_with_limit(Path::new("<fuzz input>"), data, MEMORY_LIMIT)).map(|img| {
            let (w, h) = (img.width(), img.height());
            let rgba = img.into_rgba8();
            assert_eq!(rgba.len() as u64, u64::from(w) * u64::from(h) * 4, "RGBA8 size of a {w}x{h} image");
            (w, h, rgba.into_raw())
        })
    };
    s.accepted = whole.is_some();
    // Other formats were refused above, or are larger than the limit: nothing to stream.
    if whole.is_none() && !is_tiff && !is_dds && !is_ktx2 {
        return s;
    }
    let Some(path) = scratch::write("image", data, None) else { return s };
    let source: Option<Box<dyn RowSource>> = if is_tiff {
        s.record(TiffSource::open_with_limit(&path, MEMORY_LIMIT)).map(|t| Box::new(t) as Box<dyn RowSource>)
    } else if is_dds {
        s.record(DdsSource::open(&path)).map(|d| Box::new(d) as Box<dyn RowSource>)
    } else if is_ktx2 {
        // Under the harness's memory limit, not the process's: the level is decoded whole.
        let opened = Ktx2Source::open(&path);
        match opened {
            Ok(k) if u64::from(k.size().0) * u64::from(k.size().1) * 4 <= MEMORY_LIMIT => {
                s.record(Ok::<_, SourceError>(Box::new(k) as Box<dyn RowSource>))
            }
            Ok(_) => None,
            Err(e) => s.record(Err::<Box<dyn RowSource>, _>(e)),
        }
    } else {
        s.record(open_image(&path))
    };
    let Some(source) = source else { return s };
    let (w, h) = source.size();
    if u64::from(w) * u64::from(h) * 4 > MEMORY_LIMIT {
        return s;
    }
    s.accepted = true;
    let row = w as usize * TEXEL_BYTES;
    let mut streamed = vec![0u8; row * h as usize];
    // Bands of 136 rows, each starting 8 rows above the last one's end, as the baker reads.
    let mut y0 = 0u32;
    while y0 < h {
        let rows = 136.min(h - y0);
        let at = y0 as usize * row;
        if s.record(source.read_rows(y0, &mut streamed[at..at + rows as usize * row])).is_none() {
            return s;
        }
        if y0 + rows == h {
            break;
        }
        y0 += rows.saturating_sub(8).max(1);
    }
    if let Some((ww, wh, texels)) = whole {
        assert_eq!((w, h), (ww, wh), "the streaming source and the whole decode disagree on the size");
        assert!(streamed == texels, "the streaming source's {w}x{h} texels differ from the whole decode's");
    }
    s
}

/// The little-endian `u64` at `at` of `b`, if `b` is long enough.
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// Where a fuzz input's tile index lies: its first entry, its entry count, and what its
/// blob offsets count from.
#[derive(Clone, Copy)]
struct IndexAt {
    at: u64,
    tiles: u64,
    base: u64,
}

/// The header's tile index; for a split atlas whose index object ends at `split`, the
/// index pages of its first data object (which follows it in the input).
fn index_at(file: &[u8], split: Option<u64>) -> Option<IndexAt> {
    let (index_offset, tiles) = (le_u64(file, 32)?, le_u64(file, 24)?);
    let Some(cut) = split else { return Some(IndexAt { at: index_offset, tiles, base: 0 }) };
    let table = root_end(file)?;
    // Object record 0: size (u64), then the index offset in the object (u64).
    let in_object = le_u64(file, usize::try_from(table.checked_add(16)?).ok()?)?;
    Some(IndexAt { at: cut.checked_add(in_object)?, tiles, base: cut })
}

/// The end of a version-2 root directory (where a split atlas' object table starts).
fn root_end(file: &[u8]) -> Option<u64> {
    let layers = le_u64(file, 16)? & 0xFFFF_FFFF;
    let root = HEADER_BYTES as u64 + layers * LAYER_BYTES as u64;
    let pages = le_u64(file, usize::try_from(root).ok()?)? >> 32;
    root.checked_add(ROOT_FIXED_BYTES as u64)?.checked_add(pages.checked_mul(4)?)
}

/// Makes an atlas header consistent with the bytes after it: file size (`len`: the
/// index object's length), the CRC-32 of the layer table and index (when the header
/// places them inside the file), and the header's own CRC-32 (`docs/atlas-format.md`).
/// For version 2, the page checksums of the root directory (pages at `index`) and the
/// CRC-32 of layer table, root directory and (split) object table instead of the index.
/// Shorter inputs are left alone.
fn repair_atlas_header(file: &mut [u8], len: usize, index: Option<IndexAt>) {
    if file.len() < HEADER_BYTES || len < HEADER_BYTES {
        return;
    }
    file[48..56].copy_from_slice(&(len as u64).to_le_bytes());
    if le_u64(file, 8).map(|v| v as u32) == Some(2) {
        if let Some(index) = index {
            repair_root(file, len, index);
        }
    } else if let Some(i) = index
        && let Some(end) = i
            .tiles
            .checked_mul(ENTRY_BYTES as u64)
            .and_then(|n| n.checked_add(i.at))
            .filter(|&end| end >= HEADER_BYTES as u64 && end <= len as u64)
    {
        let crc = crc32fast::hash(&file[HEADER_BYTES..end as usize]);
        file[56..60].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&file[..60]);
    file[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// Version 2: the page checksums in the root directory (pages at `index`, anywhere in
/// `file`) and the CRC-32 of layer table, root directory and a split atlas' object table,
/// where they lie inside the first `len` bytes.
fn repair_root(file: &mut [u8], len: usize, index: IndexAt) {
    let Some(layers) = le_u64(file, 16).map(|v| v & 0xFFFF_FFFF) else { return };
    let root = HEADER_BYTES as u64 + layers * LAYER_BYTES as u64;
    let Some(fixed) = root.checked_add(ROOT_FIXED_BYTES as u64).filter(|&e| e <= len as u64) else {
        return;
    };
    let Some(head) = le_u64(file, root as usize) else { return };
    let (per, pages) = (head & 0xFFFF_FFFF, head >> 32);
    let Some(mut meta_end) = fixed.checked_add(4 * pages).filter(|&e| e <= len as u64) else { return };
    let entry = |k: u64| k.checked_mul(ENTRY_BYTES as u64).and_then(|n| n.checked_add(index.at));
    for p in 0..pages {
        let first = p.saturating_mul(per);
        let (Some(start), Some(end)) = (entry(first), entry(index.tiles.min(first.saturating_add(per))))
        else {
            return;
        };
        if start > end || end > file.len() as u64 {
            break;
        }
        let crc = crc32fast::hash(&file[start as usize..end as usize]);
        let at = (fixed + 4 * p) as usize;
        file[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    // A split atlas' object table follows the root: count, bytes of names, 32-byte records.
    let flags = le_u64(file, 16).map_or(0, |v| v >> 32);
    if flags & u64::from(crate::format::atlas::FLAG_SPLIT) != 0
        && let Some(head) = le_u64(file, meta_end as usize)
    {
        let (count, names) = (head & 0xFFFF_FFFF, head >> 32);
        let end = count
            .checked_mul(32)
            .and_then(|r| r.checked_add(8 + names))
            .and_then(|t| t.checked_add(meta_end));
        if let Some(end) = end.filter(|&e| e <= len as u64) {
            meta_end = end;
        }
    }
    // The metadata record comes last: its length (u32), then its JSON text.
    if flags & u64::from(crate::format::atlas::FLAG_META) != 0
        && let Some(record) = le_u64(file, meta_end as usize).map(|v| v & 0xFFFF_FFFF)
        && let Some(end) = meta_end.checked_add(4 + record).filter(|&e| e <= len as u64)
    {
        meta_end = end;
    }
    let crc = crc32fast::hash(&file[HEADER_BYTES..meta_end as usize]);
    file[56..60].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the CRC-32 of every tile blob that an index entry (at `index`) points at,
/// where both lie inside the file.
fn repair_tile_crcs(file: &mut [u8], index: Option<IndexAt>) {
    let Some(IndexAt { at: index_offset, tiles, base }) = index else { return };
    let len = file.len() as u64;
    for i in 0..tiles {
        let Some(at) = i.checked_mul(ENTRY_BYTES as u64).and_then(|n| n.checked_add(index_offset)) else {
            return;
        };
        if at.saturating_add(ENTRY_BYTES as u64) > len {
            return;
        }
        let at = at as usize;
        // Entry: offset (u64), length (u32), decoded length (u32), CRC-32 (u32), codec.
        let (Some(offset), Some(length)) = (le_u64(file, at), le_u64(file, at + 8).map(|v| v & 0xFFFF_FFFF))
        else {
            return;
        };
        let start = offset.saturating_add(base);
        if let Some(end) = start.checked_add(length).filter(|&end| end <= len) {
            let crc = crc32fast::hash(&file[start as usize..end as usize]);
            file[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
        }
    }
}
