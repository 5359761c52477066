//! Split atlases (header flag [`FLAG_SPLIT`], version 2 only): an *index object*
//! holding the header, layer table, root directory and an *object table*, and *data
//! objects* it names (the parts of a sharded bake, `OUT.shards/I-of-N.part`), each
//! holding the blobs and the index pages of one run of the storage order. A merge then
//! reads and writes only the root directory's page checksums and the object table: no
//! tile and no index entry moves. See `docs/atlas-format.md`, "Split atlases".
//!
//! An index entry's offset is relative to the data object holding its page. A reader
//! adds the object's *base*, its start in one virtual file (the index object, then each
//! data object in table order, each starting at the next multiple of 16 after the one
//! before), so that every blob has one offset, as in a single file.

use std::path::{Path, PathBuf};

use super::LayerInfo;
use super::header::{
    BLOB_ALIGN, FLAG_META, FLAG_SPLIT, HEADER_BYTES, Header, LAYER_BYTES, Root, encode_layer, rd_u32, rd_u64,
};
use super::meta::{AtlasMeta, record_bytes};

/// Most data objects one split atlas names.
pub const MAX_DATA_OBJECTS: usize = 4096;
/// Longest data object name, in bytes.
pub const MAX_OBJECT_NAME_BYTES: usize = 255;
/// Largest object table a reader accepts (every name as long as it may be).
pub(super) const MAX_TABLE_BYTES: u64 =
    (TABLE_FIXED_BYTES + MAX_DATA_OBJECTS * (RECORD_BYTES + MAX_OBJECT_NAME_BYTES)) as u64;
/// The fixed part of the object table: object count and bytes of names (u32 each).
const TABLE_FIXED_BYTES: usize = 8;
/// One object record: size (u64), index offset (u64), first page, page count, name
/// length and a reserved zero (u32 each).
const RECORD_BYTES: usize = 32;

/// One data object of a split atlas, as its index object names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataObject {
    /// Where it lies, relative to the index object's folder (or URL prefix):
    /// `/`-separated, no `.` or `..` components, no scheme.
    pub name: String,
    /// Its exact size in bytes.
    pub size: u64,
    /// Where its index pages start in it (a multiple of 16); its blobs lie before.
    pub index_offset: u64,
    /// The first index page it holds.
    pub first_page: u32,
    /// How many index pages it holds (0 for a shard with no tiles).
    pub pages: u32,
}

/// Bytes of the encoded object table of `objects`.
pub(super) fn table_len(objects: &[DataObject]) -> u64 {
    (TABLE_FIXED_BYTES + RECORD_BYTES * objects.len() + objects.iter().map(|o| o.name.len()).sum::<usize>())
        as u64
}

/// The object table: count, bytes of names, one record per object, then the names.
pub(super) fn encode_table(objects: &[DataObject]) -> Vec<u8> {
    let names: usize = objects.iter().map(|o| o.name.len()).sum();
    let mut b = Vec::with_capacity(table_len(objects) as usize);
    b.extend_from_slice(&(objects.len() as u32).to_le_bytes());
    b.extend_from_slice(&(names as u32).to_le_bytes());
    for o in objects {
        b.extend_from_slice(&o.size.to_le_bytes());
        b.extend_from_slice(&o.index_offset.to_le_bytes());
        for v in [o.first_page, o.pages, o.name.len() as u32, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    for o in objects {
        b.extend_from_slice(o.name.as_bytes());
    }
    b
}

/// Decodes the object table at the start of `b`; returns it and its length in bytes.
pub(super) fn decode_table(b: &[u8]) -> Result<(Vec<DataObject>, usize), String> {
    let short = || "object table: past the bytes read at open".to_string();
    if b.len() < TABLE_FIXED_BYTES {
        return Err(short());
    }
    let (count, names) = (rd_u32(b, 0) as usize, rd_u32(b, 4) as usize);
    if count == 0 || count > MAX_DATA_OBJECTS || names > MAX_DATA_OBJECTS * MAX_OBJECT_NAME_BYTES {
        return Err(format!("object table: {count} data objects, {names} bytes of names"));
    }
    let names_at = TABLE_FIXED_BYTES + RECORD_BYTES * count;
    let end = names_at + names;
    if end > b.len() {
        return Err(short());
    }
    let mut objects = Vec::with_capacity(count);
    let mut at = names_at;
    for k in 0..count {
        let r = TABLE_FIXED_BYTES + RECORD_BYTES * k;
        let (size, index_offset) = (rd_u64(b, r), rd_u64(b, r + 8));
        let (first_page, pages, len) = (rd_u32(b, r + 16), rd_u32(b, r + 20), rd_u32(b, r + 24) as usize);
        if rd_u32(b, r + 28) != 0 {
            return Err(format!("object table: record {k} has reserved bits set"));
        }
        let name = at
            .checked_add(len)
            .filter(|&e| e <= end)
            .and_then(|e| std::str::from_utf8(&b[at..e]).ok())
            .ok_or_else(|| format!("object table: name {k} is not UTF-8 inside the table"))?;
        check_name(name).map_err(|why| format!("object table: data object {k} {name:?}: {why}"))?;
        if index_offset > size || !index_offset.is_multiple_of(BLOB_ALIGN) {
            return Err(format!(
                "object table: data object {name:?}: index at {index_offset} of {size} bytes"
            ));
        }
        objects.push(DataObject { name: name.to_string(), size, index_offset, first_page, pages });
        at += len;
    }
    if at != end {
        return Err(format!("object table: {names} bytes of names, the records use {}", at - names_at));
    }
    Ok((objects, end))
}

/// Whether `name` may name a data object: a relative, `/`-separated path below the index
/// object's folder (no empty, `.` or `..` components, no scheme, no backslash or control
/// characters), at most [`MAX_OBJECT_NAME_BYTES`] bytes.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_OBJECT_NAME_BYTES {
        return Err("empty or longer than 255 bytes");
    }
    if name.contains("://") || name.contains('\\') || name.chars().any(char::is_control) {
        return Err("not a relative path");
    }
    if name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("has an empty, `.` or `..` component");
    }
    Ok(())
}

/// Where data object `name` of the index object at `index` lies: in the same folder (or
/// under the same URL prefix).
pub fn resolve(index: &Path, name: &str) -> PathBuf {
    match index.to_str().and_then(|s| s.rsplit_once('/')) {
        // A URL or a path with folders: replace the last component textually (a URL's
        // `//` must survive, which `Path::join` would also keep, but `parent` would not
        // for `s3://bucket`).
        Some((dir, _)) => PathBuf::from(format!("{dir}/{name}")),
        None => PathBuf::from(name),
    }
}

/// The virtual offset at which each data object starts, when the index object is
/// `data_offset` bytes long: the first there, each next one at the next multiple of
/// 16 after the end of the one before. `None` when the total overflows.
pub(super) fn bases(data_offset: u64, objects: &[DataObject]) -> Option<Vec<u64>> {
    let mut at = data_offset;
    let mut out = Vec::with_capacity(objects.len());
    for o in objects {
        out.push(at);
        at = at.checked_add(o.size)?.checked_next_multiple_of(BLOB_ALIGN)?;
    }
    Some(out)
}

/// The bytes of the index object of a split atlas of `tiles` tiles whose index pages
/// (`page_entries` entries each, checksums `page_crcs`) lie in `objects`: header, layer
/// table, root directory, object table and, when `info` says something, the metadata
/// record (refused, with the reason, when it is too large or does not fit the layers).
/// `stored_bytes` counts the distinct blobs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn index_object(
    layers: &[LayerInfo],
    flags: u32,
    tiles: u64,
    page_entries: u32,
    page_crcs: Vec<u32>,
    stored_bytes: u64,
    objects: &[DataObject],
    info: &AtlasMeta,
) -> Result<Vec<u8>, String> {
    let record = if info.is_empty() { Vec::new() } else { record_bytes(&info.encode(layers.len())?) };
    let root_end =
        (HEADER_BYTES + layers.len() * LAYER_BYTES) as u64 + Root::encoded_len(page_crcs.len() as u64);
    let end = (root_end + table_len(objects) + record.len() as u64).next_multiple_of(BLOB_ALIGN);
    let mut meta = Vec::new();
    for l in layers {
        meta.extend_from_slice(&encode_layer(l));
    }
    meta.extend_from_slice(&Root { page_entries, stored_bytes, page_crcs }.encode());
    meta.extend_from_slice(&encode_table(objects));
    meta.extend_from_slice(&record);
    let header = Header {
        version: 2,
        layer_count: layers.len() as u32,
        flags: flags | FLAG_SPLIT | if record.is_empty() { 0 } else { FLAG_META },
        tile_count: tiles,
        index_offset: end,
        data_offset: end,
        file_size: end,
        meta_crc: crc32fast::hash(&meta),
    };
    let mut out = Vec::with_capacity(end as usize);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(&meta);
    out.resize(end as usize, 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn object_tables_round_trip_and_bad_names_are_refused() {
        let objects = vec![
            DataObject {
                name: "a.tsa.shards/0-of-2.part".into(),
                size: 17,
                index_offset: 16,
                first_page: 0,
                pages: 1,
            },
            DataObject {
                name: "a.tsa.shards/1-of-2.part".into(),
                size: 1 << 40,
                index_offset: 1 << 39,
                first_page: 1,
                pages: 7,
            },
        ];
        let b = encode_table(&objects);
        assert_eq!(b.len() as u64, table_len(&objects));
        assert_eq!(decode_table(&b), Ok((objects.clone(), b.len())));
        assert!(decode_table(&b[..b.len() - 1]).is_err());
        assert_eq!(bases(100, &objects).unwrap(), vec![100, 128]);
        for bad in ["", "../x", "a//b", "/etc/passwd", "s3://b/k", "a/./b", "a\\b", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            resolve(Path::new("s3://bucket/k.tsa"), "k.tsa.shards/0-of-1.part").to_str().unwrap(),
            "s3://bucket/k.tsa.shards/0-of-1.part"
        );
        assert_eq!(resolve(Path::new("k.tsa"), "x").to_str().unwrap(), "x");
        assert_eq!(resolve(Path::new("/d/k.tsa"), "x/y").to_str().unwrap(), "/d/x/y");
    }
}
