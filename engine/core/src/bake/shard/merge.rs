//! Merging a sharded bake: the parts read and checked, then either an index over them
//! (a split atlas) or one file holding their tiles.

use super::*;

/// One part opened for merging.
pub(crate) struct Part {
    path: PathBuf,
    file: PartFile,
    /// The part's size in bytes.
    pub(crate) len: u64,
    pub(crate) manifest: PartManifest,
}

/// Where a part's bytes are read from: a local file, or an object in a store.
pub(super) enum PartFile {
    Local(File),
    #[cfg(feature = "remote")]
    Remote(crate::bake::shard_remote::Remote),
}

impl PartFile {
    /// Opens the part at `path` (a path or an `s3://` URL); returns it and its size.
    fn open(path: &Path, s3: &[(String, String)]) -> Result<(Self, u64), ShardError> {
        #[cfg(not(feature = "remote"))]
        let _ = s3;
        let io = |source| ShardError::Io { path: path.to_path_buf(), source };
        #[cfg(feature = "remote")]
        if crate::format::atlas::is_remote_location(path) {
            let r = crate::bake::shard_remote::Remote::new(path, s3).map_err(|e| io(remote_io(e)))?;
            let len = r.size().map_err(|e| io(remote_io(e)))?;
            return Ok((Self::Remote(r), len));
        }
        // A regular file inside the atlas' folder (parts lie in `OUT.shards/` beside it):
        // never a FIFO, which would block, nor a link leading elsewhere.
        let atlas_folder = crate::local_file::folder_of(crate::local_file::folder_of(path));
        let file = crate::local_file::open_confined(atlas_folder, path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok((Self::Local(file), len))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Self::Local(f) => f.read_exact_at(buf, offset),
            #[cfg(feature = "remote")]
            Self::Remote(r) => {
                let bytes = r.read(offset..offset + buf.len() as u64).map_err(remote_io)?;
                buf.copy_from_slice(&bytes);
                Ok(())
            }
        }
    }
}

/// A remote error as an I/O error (not found stays not found).
#[cfg(feature = "remote")]
pub(super) fn remote_io(e: crate::format::atlas::remote::RemoteError) -> std::io::Error {
    match e {
        crate::format::atlas::remote::RemoteError::NotFound => {
            std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
        }
        other => std::io::Error::other(other.to_string()),
    }
}

pub(crate) fn read_part(path: &Path, s3: &[(String, String)]) -> Result<Part, ShardError> {
    let bad = |reason: String| ShardError::Part { path: path.to_path_buf(), reason };
    let io = |source| ShardError::Io { path: path.to_path_buf(), source };
    let (file, len) = PartFile::open(path, s3)?;
    if len < TRAILER_BYTES as u64 {
        return Err(bad(format!("{len} bytes, shorter than a part's trailer: truncated")));
    }
    let mut trailer = [0u8; TRAILER_BYTES];
    file.read_exact_at(&mut trailer, len - TRAILER_BYTES as u64).map_err(io)?;
    if &trailer[..8] != TRAILER_MAGIC {
        return Err(
            bad("not a Tessera shard part of this format (or truncated): no TSRSHRD2 trailer".into()),
        );
    }
    let u64_at = |at: usize| u64::from_le_bytes(trailer[at..at + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |at: usize| u32::from_le_bytes(trailer[at..at + 4].try_into().unwrap_or([0; 4]));
    let (index_offset, manifest_offset, manifest_len, crc) = (u64_at(8), u64_at(16), u32_at(24), u32_at(28));
    let tail_end = len - TRAILER_BYTES as u64;
    if index_offset > manifest_offset
        || manifest_offset.checked_add(u64::from(manifest_len)) != Some(tail_end)
        || u64::from(manifest_len) > MANIFEST_MAX
    {
        return Err(bad("its trailer's offsets do not fit the file: damaged".into()));
    }
    let mut manifest = vec![0u8; manifest_len as usize];
    file.read_exact_at(&mut manifest, manifest_offset).map_err(io)?;
    if crc32fast::hash(&manifest) != crc {
        return Err(bad("checksum mismatch over its manifest: damaged".into()));
    }
    let manifest: PartManifest =
        serde_json::from_slice(&manifest).map_err(|e| bad(format!("unreadable manifest: {e}")))?;
    if manifest.format != PART_FORMAT {
        return Err(bad(format!(
            "part format {}, this tessera reads {PART_FORMAT}: rerun the shard",
            manifest.format
        )));
    }
    let [first, last] = manifest.range;
    let tiles = last.checked_sub(first).ok_or_else(|| bad(format!("range {:?}", manifest.range)))?;
    let per = u64::from(manifest.page_entries.max(1));
    if manifest.index_offset != index_offset
        || !index_offset.is_multiple_of(BLOB_ALIGN)
        || tiles.checked_mul(ENTRY_BYTES as u64).and_then(|n| n.checked_add(index_offset))
            != Some(manifest_offset)
        || manifest.page_crcs.len() as u64 != tiles.div_ceil(per)
        || manifest.stored_bytes > index_offset
    {
        return Err(bad(format!("its index does not fit its range {:?}: damaged", manifest.range)));
    }
    Ok(Part { path: path.to_path_buf(), file, len, manifest })
}

impl Part {
    /// The part's index entries, one per storage position of its range, each page
    /// checked against its CRC-32 and each blob against the part's bounds.
    fn entries(&self) -> Result<Vec<TileEntry>, ShardError> {
        let bad = |reason: String| ShardError::Part { path: self.path.clone(), reason };
        let m = &self.manifest;
        let mut index = vec![0u8; ((m.range[1] - m.range[0]) as usize) * ENTRY_BYTES];
        self.file
            .read_exact_at(&mut index, m.index_offset)
            .map_err(|source| ShardError::Io { path: self.path.clone(), source })?;
        let per = m.page_entries.max(1) as usize * ENTRY_BYTES;
        for (p, (page, &crc)) in index.chunks(per).zip(&m.page_crcs).enumerate() {
            if crc32fast::hash(page) != crc {
                return Err(bad(format!(
                    "index page {p} fails its CRC-32: damaged, rerun shard {}",
                    m.shard
                )));
            }
        }
        index
            .chunks_exact(ENTRY_BYTES)
            .enumerate()
            .map(|(i, b)| {
                let e = decode_entry(b).map_err(|code| bad(format!("entry {i}: unknown codec {code}")))?;
                if e.offset.checked_add(u64::from(e.length)).is_none_or(|end| end > m.index_offset)
                    || !e.offset.is_multiple_of(BLOB_ALIGN)
                {
                    return Err(bad(format!("entry {i}: its blob lies outside the part or is not aligned")));
                }
                Ok(e)
            })
            .collect()
    }
}

/// Shard counts of the parts in a folder, and the indices (ascending) present of each.
pub(crate) type PartsByCount = BTreeMap<u32, Vec<u32>>;

/// The shard counts of the parts in `OUT.shards/` and their indices (ascending), from the
/// file names ([`Shard::from_part_name`]); and the names ending in `.part` that name no
/// part (`0-of-4294967295.part`, `7-of-7.part`): strays, never read.
pub(crate) fn parts_present(
    dir: &Path,
    s3: &[(String, String)],
) -> Result<(PartsByCount, Vec<String>), ShardError> {
    let mut found: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut strays = Vec::new();
    for name in list_dir(dir, s3)? {
        match Shard::from_part_name(&name) {
            Some(s) => found.entry(s.count).or_default().push(s.index),
            None if name.ends_with(".part") => strays.push(name),
            None => {}
        }
    }
    found.values_mut().for_each(|v| {
        v.sort_unstable();
        v.dedup();
    });
    strays.sort_unstable();
    Ok((found, strays))
}

/// The names of the files in `dir` (a folder, or the objects under an `s3://` prefix);
/// [`ShardError::NoParts`] when there is no such folder.
pub(crate) fn list_dir(dir: &Path, s3: &[(String, String)]) -> Result<Vec<String>, ShardError> {
    #[cfg(not(feature = "remote"))]
    let _ = s3;
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(dir) {
        let r = crate::bake::shard_remote::Remote::new(dir, s3)
            .and_then(|r| r.list())
            .map_err(|e| ShardError::Io { path: dir.to_path_buf(), source: remote_io(e) })?;
        return Ok(r.into_iter().map(|(name, _)| name).collect());
    }
    match std::fs::read_dir(dir) {
        Ok(e) => Ok(e.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ShardError::NoParts(dir.to_path_buf())),
        Err(source) => Err(ShardError::Io { path: dir.to_path_buf(), source }),
    }
}

/// What [`merge_shards`] did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MergeReport {
    /// Parts merged.
    pub parts: u32,
    /// Tiles in the atlas.
    pub tiles: u64,
    /// Bytes of blobs read from the parts (0 for a split atlas: none is read).
    pub blob_bytes: u64,
    /// Bytes of the parts' entries and manifests read.
    pub record_bytes: u64,
    /// Size of the atlas written (the index object of a split atlas).
    pub file_bytes: u64,
    /// Size of the atlas' tile data: the blobs of a single file, the data objects of a
    /// split atlas.
    pub data_bytes: u64,
    /// Whether a split atlas was written.
    pub split: bool,
}

/// Which atlas [`merge_shards`] writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MergeForm {
    /// A split atlas: an index object naming the parts as its data objects. Only the
    /// parts' records are read and only the index is written; the parts must stay.
    /// Needs format version 2.
    #[default]
    Split,
    /// One file: every blob copied, byte for byte the file of a single-process bake.
    OneFile,
}

/// The complete, consistent set of parts of `out`, checked against each other, with the
/// atlas' layers (`first_tile` set) and storage order.
pub(super) struct Parts {
    dir: PathBuf,
    parts: Vec<Part>,
    layers: Vec<LayerInfo>,
    order: StorageOrder,
    total: u64,
}

impl Parts {
    fn open(out: &Path, s3: &[(String, String)]) -> Result<Self, ShardError> {
        let dir = shard_dir(out);
        let (present, strays) = parts_present(&dir, s3)?;
        if let Some(first) = strays.first() {
            tracing::warn!(
                "{}: ignoring {} file(s) named like parts of no bake (shard counts 1 to {MAX_SHARDS}), e.g. {first}",
                dir.display(),
                strays.len()
            );
        }
        let (&count, indices) = match present.len() {
            0 => return Err(ShardError::NoParts(dir)),
            1 => present.iter().next().ok_or_else(|| ShardError::NoParts(dir.clone()))?,
            _ => {
                let counts: Vec<String> = present.keys().map(|n| format!("{n}")).collect();
                return Err(ShardError::Part {
                    path: dir,
                    reason: format!(
                        "parts of bakes cut into {} shards are mixed here; remove the stale ones",
                        counts.join(" and ")
                    ),
                });
            }
        };
        if indices.len() as u32 != count {
            // At most MAX_SHARDS indices; named in runs, so the message stays one line.
            let mut missing = Vec::new();
            let mut next = 0;
            for &i in indices.iter().chain([count].iter()) {
                missing.extend(next..i);
                next = i + 1;
            }
            let n = count - indices.len() as u32;
            return Err(ShardError::Part {
                path: dir,
                reason: format!("{n} of {count} parts missing: {}", part_runs(&missing, count)),
            });
        }
        let mut parts: Vec<Part> = Vec::with_capacity(count as usize);
        for i in 0..count {
            let shard = Shard { index: i, count };
            let part = read_part(&part_path(out, shard), s3)?;
            let bad = |reason: String| ShardError::Part { path: part.path.clone(), reason };
            if part.manifest.shard != shard {
                return Err(bad(format!("holds shard {}, its name says {shard}", part.manifest.shard)));
            }
            if let Some(first) = parts.first() {
                let m = &part.manifest;
                if (m.fingerprint.as_str(), &m.layers, m.flags, m.format_version, &m.meta)
                    != (
                        first.manifest.fingerprint.as_str(),
                        &first.manifest.layers,
                        first.manifest.flags,
                        first.manifest.format_version,
                        &first.manifest.meta,
                    )
                {
                    return Err(bad(format!(
                        "from another bake than {} (other inputs or options): rerun it",
                        first.path.display()
                    )));
                }
            }
            parts.push(part);
        }
        let manifest = &parts[0].manifest;
        let layers = manifest.layers.clone();
        let mut first = 0;
        for l in &layers {
            // The layout as the reader would derive it: a forged manifest cannot smuggle one in.
            let y = l.layout;
            let valid = TextureLayout::new(y.width(), y.height(), y.tile_size(), y.border()).ok();
            if valid != Some(y) || l.first_tile != first {
                return Err(ShardError::Part {
                    path: parts[0].path.clone(),
                    reason: format!("layer '{}': invalid layout", l.name),
                });
            }
            first += y.tile_count();
        }
        let order = StorageOrder::new(
            layers.iter().map(|l| l.layout).collect(),
            manifest.flags & crate::format::atlas::FLAG_STACKED != 0,
        );
        let total = first;
        let per = shard_page_entries(layers.len(), total, count);
        let mut expect = 0;
        for p in &parts {
            let want = Shard { index: p.manifest.shard.index, count }.range(total, per);
            if p.manifest.range != [want.start, want.end]
                || want.start != expect
                || p.manifest.page_entries != per
            {
                return Err(ShardError::Part {
                    path: p.path.clone(),
                    reason: format!(
                        "covers storage positions {:?}, its shard's are {want:?}",
                        p.manifest.range
                    ),
                });
            }
            expect = want.end;
        }
        Ok(Self { dir, parts, layers, order, total })
    }

    /// The part holding storage position `pos`, and its number.
    fn holding(&self, pos: u64) -> Option<(usize, &Part)> {
        let k = self.parts.partition_point(|p| p.manifest.range[1] <= pos);
        self.parts.get(k).map(|p| (k, p))
    }

    /// Bytes of the parts' manifests and trailers (what a split merge reads).
    fn record_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| {
                p.len
                    - p.manifest.index_offset
                    - (p.manifest.range[1] - p.manifest.range[0]) * ENTRY_BYTES as u64
            })
            .sum()
    }
}

/// Writes the atlas `out` from the complete set of parts in `OUT.shards/` (all `N` parts
/// of one shard count, from one bake: same fingerprint, layers, flags and format
/// version, ranges covering every tile once), without decoding or encoding a tile.
///
/// [`MergeForm::Split`] writes only an index object at `out`, naming the parts as its
/// data objects: the merge reads the parts' records and writes about 24 bytes per tile.
/// Every tile has the entry (codec, length, CRC-32) of the single-process bake; the
/// parts must stay where they are. [`MergeForm::OneFile`] copies every blob, checked
/// against its CRC-32, in tile order into an [`AtlasWriter`], so the atlas is byte for
/// byte the file of a single-process bake; the parts may be deleted afterwards.
pub fn merge_shards(out: &Path, form: MergeForm, progress: &dyn Progress) -> Result<MergeReport, ShardError> {
    merge_shards_with(out, form, &[], progress)
}

/// [`merge_shards`] with S3 settings for an `s3://` destination, on top of the `AWS_*`
/// environment (as [`RemoteOptions::s3`](crate::format::atlas::RemoteOptions::s3)).
pub fn merge_shards_with(
    out: &Path,
    form: MergeForm,
    s3: &[(String, String)],
    progress: &dyn Progress,
) -> Result<MergeReport, ShardError> {
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(out) {
        // Shards into object storage staged their parts here; a killed one left its own.
        sweep_stages(&std::env::temp_dir());
    }
    let parts = Parts::open(out, s3)?;
    let version = parts.parts[0].manifest.format_version;
    match form {
        MergeForm::Split if version < 2 => Err(ShardError::Part {
            path: parts.dir,
            reason: format!(
                "a split atlas needs format version 2, these parts were baked for version {version}: \
                 merge them into one file (--one-file)"
            ),
        }),
        MergeForm::Split if parts.parts.len() > split::MAX_DATA_OBJECTS => Err(ShardError::Part {
            path: parts.dir,
            reason: format!(
                "a split atlas names at most {} parts, this bake has {}: merge it into one file (--one-file)",
                split::MAX_DATA_OBJECTS,
                parts.parts.len()
            ),
        }),
        MergeForm::Split => merge_split(out, &parts, s3, progress),
        MergeForm::OneFile if crate::format::atlas::is_remote_location(out) => Err(ShardError::Part {
            path: out.to_path_buf(),
            reason: "a one-file merge writes a local file; merge a remote bake as a split atlas \
                     (the default), which moves no tile"
                .into(),
        }),
        MergeForm::OneFile => merge_one_file(out, &parts, progress),
    }
}

pub(super) fn merge_one_file(
    out: &Path,
    parts: &Parts,
    progress: &dyn Progress,
) -> Result<MergeReport, ShardError> {
    let manifest = &parts.parts[0].manifest;
    let mut writer = AtlasWriter::create_with_flags(out, parts.layers.clone(), manifest.flags)?;
    writer.set_format_version(manifest.format_version)?;
    writer.set_meta(&manifest.meta)?;
    progress.set_length(parts.total);
    progress.set_message("merging shard parts");
    let entries: Vec<Vec<TileEntry>> = parts.parts.iter().map(Part::entries).collect::<Result<_, _>>()?;
    let (mut blob, mut blob_bytes) = (Vec::new(), 0u64);
    for tile in 0..parts.total {
        let no_place =
            || ShardError::Part { path: parts.dir.clone(), reason: format!("tile {tile}: no part holds it") };
        let pos = tile_position(&parts.layers, &parts.order, tile).ok_or_else(no_place)?;
        let (k, part) = parts.holding(pos).ok_or_else(no_place)?;
        let e = *entries[k].get((pos - part.manifest.range[0]) as usize).ok_or_else(no_place)?;
        blob.resize(e.length as usize, 0);
        part.file
            .read_exact_at(&mut blob, e.offset)
            .map_err(|source| ShardError::Io { path: part.path.clone(), source })?;
        if crc32fast::hash(&blob) != e.crc32 {
            return Err(ShardError::Part {
                path: part.path.clone(),
                reason: format!(
                    "tile {tile}: its blob fails its CRC-32: damaged, rerun shard {}",
                    part.manifest.shard
                ),
            });
        }
        writer.push_tile(&blob, e.codec, e.raw_length)?;
        blob_bytes += u64::from(e.length);
        progress.inc(1);
    }
    let file_bytes = writer.finish()?;
    let index_bytes: u64 = entries.iter().map(|e| e.len() as u64 * ENTRY_BYTES as u64).sum();
    Ok(MergeReport {
        parts: parts.parts.len() as u32,
        tiles: parts.total,
        blob_bytes,
        record_bytes: parts.record_bytes() + index_bytes,
        file_bytes,
        data_bytes: file_bytes,
        split: false,
    })
}

pub(super) fn merge_split(
    out: &Path,
    parts: &Parts,
    s3: &[(String, String)],
    progress: &dyn Progress,
) -> Result<MergeReport, ShardError> {
    progress.set_length(parts.parts.len() as u64);
    progress.set_message("indexing shard parts");
    let file_name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (mut objects, mut page_crcs, mut stored_bytes) = (Vec::new(), Vec::new(), 0u64);
    for p in &parts.parts {
        let m = &p.manifest;
        let name = format!("{file_name}.shards/{}-of-{}.part", m.shard.index, m.shard.count);
        split::check_name(&name).map_err(|why| ShardError::Part {
            path: out.to_path_buf(),
            reason: format!("cannot name data object {name:?}: {why}"),
        })?;
        objects.push(DataObject {
            name,
            size: p.len,
            index_offset: m.index_offset,
            first_page: page_crcs.len() as u32,
            pages: m.page_crcs.len() as u32,
        });
        page_crcs.extend_from_slice(&m.page_crcs);
        stored_bytes += m.stored_bytes;
        progress.inc(1);
    }
    let manifest = &parts.parts[0].manifest;
    let per = manifest.page_entries;
    let index = split::index_object(
        &parts.layers,
        manifest.flags,
        parts.total,
        per,
        page_crcs,
        stored_bytes,
        &objects,
        &manifest.meta,
    )
    .map_err(|reason| ShardError::Part { path: parts.parts[0].path.clone(), reason })?;
    write_atomically(out, &index, s3)?;
    Ok(MergeReport {
        parts: parts.parts.len() as u32,
        tiles: parts.total,
        blob_bytes: 0,
        record_bytes: parts.record_bytes(),
        file_bytes: index.len() as u64,
        data_bytes: objects.iter().map(|o| o.size).sum(),
        split: true,
    })
}

/// Writes `bytes` to `dest` through a temporary file beside it: written, fsynced,
/// renamed into place. An `s3://` destination gets one PUT, atomic too.
pub(super) fn write_atomically(dest: &Path, bytes: &[u8], s3: &[(String, String)]) -> Result<(), ShardError> {
    #[cfg(not(feature = "remote"))]
    let _ = s3;
    #[cfg(feature = "remote")]
    if crate::format::atlas::is_remote_location(dest) {
        return crate::bake::shard_remote::Remote::new(dest, s3)
            .and_then(|r| r.put(bytes.to_vec()))
            .map_err(|e| ShardError::Io { path: dest.to_path_buf(), source: remote_io(e) });
    }
    crate::bake::overwrite::check_output_file(dest)
        .map_err(|e| AtlasError::NotAFile { path: e.path, kind: e.kind })?;
    let file_name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = TempPath::new(dest.with_file_name(temp_name(&format!(".{file_name}."), "")));
    let io = |source| ShardError::Io { path: dest.to_path_buf(), source };
    let mut f = File::create(tmp.path()).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    AtlasWriter::publish(&mut tmp, dest)?;
    Ok(())
}
