//! The bake pipeline of one layer: one thread reads bands, cuts tiles and filters the
//! next mip; encoder threads encode tiles; one thread writes them in storage order.

use super::*;

/// Where a bake writes: the atlas, or a shard's part.
pub(super) enum Output {
    Atlas(AtlasWriter),
    Part(ShardWriter),
}

impl Output {
    pub(super) fn sink(&mut self) -> &mut dyn TileSink {
        match self {
            Output::Atlas(writer) => writer,
            Output::Part(part) => part,
        }
    }
}

/// What one layer's bake reads, encodes with and where it spills.
pub(super) struct Stage<'a> {
    pub(super) input: &'a BakeInput,
    pub(super) layer: &'a LayerInfo,
    pub(super) codec: Codec,
    pub(super) encode: &'a EncodeOptions,
    pub(super) scratch: &'a Path,
    pub(super) threads: usize,
}

/// Tiles read and queued for encoding but not yet written, per encoding thread: enough
/// to keep every thread busy across tiles of uneven cost (a Basis tile takes 2–3× longer
/// on detailed imagery) and across band and mip boundaries, few enough that memory stays
/// small (a 136² RGBA8 tile is 74 KB: 16 threads hold about 10 MB).
pub(super) const QUEUED_TILES_PER_THREAD: usize = 8;

/// What the reading thread hands to the writing thread, in storage order.
pub(super) enum Planned {
    /// The tiles from here on belong to mip `mip`; repeat keys start afresh.
    Mip(u32),
    /// One tile: how the plan treats it and, unless it is a copy, its encoding in progress.
    Tile { mip: u32, tx: u32, ty: u32, keyed: Keyed, encoded: Option<Receiver<Result<Encoded, CodecError>>> },
}

/// One tile for an encoding thread: its bordered texels and where the result goes.
pub(super) struct EncodeJob {
    pub(super) texels: Vec<u8>,
    pub(super) done: Sender<Result<Encoded, CodecError>>,
}

/// Bakes one layer as a pipeline of three stages, so that no core waits for another's
/// slowest tile: this thread reads bands of rows, cuts tiles and filters the next mip
/// level; `threads` encoding threads take tiles in reading order, one at a time; a writing
/// thread appends the results to the atlas in storage order. A bounded queue between
/// reading and writing ([`QUEUED_TILES_PER_THREAD`]) keeps memory fixed. (The first
/// baker encoded each row of tiles in parallel and waited for its slowest tile before
/// reading the next: 56% of 16 cores.)
/// Only tiles `(mip, x, y)` for which `keep` says yes are encoded and written (a shard's);
/// every level is still read and filtered.
pub(super) fn bake_layer(
    stage: &Stage<'_>,
    keep: &(dyn Fn(u32, u32, u32) -> bool + Sync),
    writer: &mut dyn TileSink,
    progress: &dyn Progress,
) -> Result<LayerReport, BakeError> {
    let Stage { input, layer, codec, encode, scratch, threads } = *stage;
    let layout = layer.layout;
    let p = layout.padded_tile_size();
    let raw_len = (p * p) as usize * TEXEL_BYTES;
    let report = LayerReport {
        name: layer.name.clone(),
        width: layout.width(),
        height: layout.height(),
        mips: layout.mip_count(),
        // Counted as they are written: a shard writes only its own.
        tiles: 0,
        shared_tiles: 0,
        stored_bytes: 0,
        raw_bytes: 0,
    };
    let threads = threads.max(1);
    let (plan_tx, plan_rx) = crossbeam_channel::bounded::<Planned>(threads * QUEUED_TILES_PER_THREAD);
    let (job_tx, job_rx) = crossbeam_channel::unbounded::<EncodeJob>();
    let encode = *encode;
    std::thread::scope(|s| {
        for _ in 0..threads {
            let jobs = job_rx.clone();
            s.spawn(move || {
                for job in jobs {
                    // The writer may have given up (an error): then nobody waits for it.
                    let _ = job.done.send(codec.encode(&job.texels, p, &encode));
                }
            });
        }
        drop(job_rx);
        let writing = s.spawn(move || write_layer(plan_rx, input, layer, raw_len, report, writer, progress));
        // Dropping the senders on every way out ends the encoding threads and the writer.
        let read = read_layer(input, layer, scratch, keep, &plan_tx, &job_tx);
        drop((plan_tx, job_tx));
        let written = writing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // A reading error explains a writer that stopped early; a writing error stops the reader.
        read.and(written)
    })
}

/// The writing stage of [`bake_layer`]: takes planned tiles in storage order, waits for
/// each one's encoding and appends it (or a copy of the first tile of its repeat key).
pub(super) fn write_layer(
    plan: Receiver<Planned>,
    input: &BakeInput,
    layer: &LayerInfo,
    raw_len: usize,
    mut report: LayerReport,
    writer: &mut dyn TileSink,
    progress: &dyn Progress,
) -> Result<LayerReport, BakeError> {
    let mut written = 0u64;
    let name = &input.name;
    // A tile the plan lost track of: a bug here, never a reason to write a short atlas.
    let internal = |mip: u32, tx: u32, ty: u32| BakeError::Read {
        name: name.clone(),
        source: std::io::Error::other(format!("mip {mip} tile ({tx}, {ty}): no blob planned for it")),
    };
    let lost = || BakeError::Read {
        name: name.clone(),
        source: std::io::Error::other("an encoding thread stopped before finishing its tile"),
    };
    // The first tile of each repeat key on the current mip, by its number in storage order.
    let mut firsts: HashMap<u64, usize> = HashMap::new();
    for item in plan {
        let (mip, tx, ty, keyed, encoded) = match item {
            Planned::Mip(mip) => {
                firsts.clear();
                progress.set_message(&format!("{name} mip {mip}"));
                continue;
            }
            Planned::Tile { mip, tx, ty, keyed, encoded } => (mip, tx, ty, keyed, encoded),
        };
        let enc = match encoded {
            Some(rx) => Some(
                rx.recv()
                    .map_err(|_| lost())?
                    .map_err(|source| BakeError::Encode { name: name.clone(), source })?,
            ),
            None => None,
        };
        let index = writer.tiles_written();
        let tile =
            layer.first_tile + layer.layout.tile_index(mip, tx, ty).ok_or_else(|| internal(mip, tx, ty))?;
        written += 1;
        match (keyed, enc) {
            (Keyed::Copy(k), None) => {
                // The first of the key was pushed before: in an earlier row, or earlier in this one.
                let first = firsts.get(&k).copied().ok_or_else(|| internal(mip, tx, ty))?;
                writer.push_copy(tile, first)?;
                report.shared_tiles += 1;
            }
            (Keyed::Check(k), Some(enc)) => {
                let first = firsts.get(&k).copied().ok_or_else(|| internal(mip, tx, ty))?;
                let same = writer.entry(first).is_some_and(|e| {
                    e.length as usize == enc.data.len() && e.crc32 == crc32fast::hash(&enc.data)
                });
                if !same {
                    return Err(BakeError::Read {
                        name: name.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "mip {mip} tile ({tx}, {ty}) differs from tile {first} of the same source \
                                 tile key: the source's tile keys are wrong"
                            ),
                        ),
                    });
                }
                writer.push_copy(tile, first)?;
                report.shared_tiles += 1;
            }
            (Keyed::First(_) | Keyed::Alone, Some(enc)) => {
                if let Keyed::First(k) = keyed {
                    firsts.insert(k, index);
                }
                let shared = writer.shared_tiles();
                writer.push_tile(tile, &enc.data, enc.codec, raw_len as u32)?;
                if writer.shared_tiles() == shared {
                    report.stored_bytes += enc.data.len() as u64;
                } else {
                    report.shared_tiles += 1;
                }
            }
            _ => return Err(internal(mip, tx, ty)),
        }
        progress.inc(1);
    }
    report.tiles = written;
    report.raw_bytes = written * raw_len as u64;
    Ok(report)
}

/// The reading stage of [`bake_layer`]: reads each mip level band by band (a row of
/// tiles with their borders), cuts the tiles, queues their encoding and plans their
/// writing in storage order, and filters the band into the next level. Returns early,
/// without error, when the writer has stopped (it reports why).
pub(super) fn read_layer(
    input: &BakeInput,
    layer: &LayerInfo,
    scratch: &Path,
    keep: &dyn Fn(u32, u32, u32) -> bool,
    plan: &Sender<Planned>,
    jobs: &Sender<EncodeJob>,
) -> Result<(), BakeError> {
    let read_err = |source| BakeError::Read { name: input.name.clone(), source };
    let layout = layer.layout;
    let (t, b, p) = (layout.tile_size(), layout.border(), layout.padded_tile_size());
    let mut stored: Option<LevelStore> = None;
    // A level the source supplies itself replaces the filtered one (see `RowSource::mip_level`).
    let supplied = |mip: u32| (mip > 0).then(|| input.source.mip_level(mip, layer.color)).flatten();
    for mip in 0..layout.mip_count() {
        if plan.send(Planned::Mip(mip)).is_err() {
            return Ok(());
        }
        let (w, h) = layout.mip_size(mip);
        let level: &dyn RowSource = match (supplied(mip), &stored) {
            (Some(l), _) => {
                if l.size() != (w, h) {
                    let (sw, sh) = l.size();
                    return Err(read_err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the source's own mip {mip} is {sw}x{sh}, the layout needs {w}x{h}"),
                    )));
                }
                l
            }
            (None, Some(s)) => s,
            (None, None) => input.source.as_ref(),
        };
        let mut next = if mip + 1 < layout.mip_count() && supplied(mip + 1).is_none() {
            let (nw, nh) = layout.mip_size(mip + 1);
            Some(LevelStore::new(nw, nh, scratch).map_err(read_err)?)
        } else {
            None
        };
        let (tiles_x, tiles_y) = layout.tiles_at(mip);
        let row_bytes = w as usize * TEXEL_BYTES;
        let rects: Vec<[u32; 4]> = input.regions.iter().map(Region::rect).collect();
        let regions: Vec<([u32; 4], [Wrap; 2])> = input
            .regions
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((r.at_mip(&rects, i, mip, t)?, r.wrap)))
            .collect();
        // Tiles planned per source tile key on this mip.
        let mut repeats: HashMap<u64, u32> = HashMap::new();
        let mut band = Vec::new();
        for ty in 0..tiles_y {
            let y0 = ty * t;
            // Tiles the source says repeat: the first of a key is encoded and stored, the
            // second encoded again to check the promise, the others copied unread.
            let keyed: Vec<Keyed> = (0..tiles_x)
                .map(|tx| match input.source.tile_key(mip, t, b, tx, ty) {
                    // Another shard's tile: neither read nor planned, its key not counted.
                    _ if !keep(mip, tx, ty) => Keyed::Skip,
                    None => Keyed::Alone,
                    Some(k) => {
                        let n = repeats.entry(k).or_insert(0);
                        *n = n.saturating_add(1);
                        match *n {
                            1 => Keyed::First(k),
                            2 => Keyed::Check(k),
                            _ => Keyed::Copy(k),
                        }
                    }
                })
                .collect();
            // Each read tile's source rows and columns: its region's rule inside a region,
            // else the layer's.
            let maps: Vec<Option<(Vec<u32>, Vec<u32>)>> = (0..tiles_x)
                .map(|tx| {
                    if matches!(keyed[tx as usize], Keyed::Copy(_) | Keyed::Skip) {
                        return None;
                    }
                    let x0 = tx * t;
                    let region = regions.iter().find(|([rx, ry, rw, rh], _)| {
                        (*rx..rx + rw).contains(&x0) && (*ry..ry + rh).contains(&y0)
                    });
                    let axis = |start: u32, n: u32, wrap: Wrap, r: Option<(u32, u32, Wrap)>| -> Vec<u32> {
                        (0..i64::from(p))
                            .map(|k| {
                                let c = i64::from(start) - i64::from(b) + k;
                                match r {
                                    Some((o, len, rw)) => o + edge(c - i64::from(o), len, rw),
                                    None => edge(c, n, wrap),
                                }
                            })
                            .collect()
                    };
                    let (rx, ry) = match region {
                        Some(([rx, ry, rw, rh], wr)) => (Some((*rx, *rw, wr[0])), Some((*ry, *rh, wr[1]))),
                        None => (None, None),
                    };
                    Some((axis(y0, h, layer.wrap, ry), axis(x0, w, layer.wrap, rx)))
                })
                .collect();
            // The union of the rows any tile of this row needs, read once each (coalesced),
            // and the payload rows the next level is filtered from.
            let mut rows: Vec<u32> = maps.iter().flatten().flat_map(|(r, _)| r.iter().copied()).collect();
            if next.is_some() {
                rows.extend(y0..y0 + (h - y0).min(t));
            }
            rows.sort_unstable();
            rows.dedup();
            band.resize(rows.len() * row_bytes, 0);
            if !rows.is_empty() {
                read_mapped_rows(level, &rows, &mut band, row_bytes).map_err(read_err)?;
            }
            let slot = |y: u32| rows.binary_search(&y).unwrap_or(0);
            for (tx, (keyed, map)) in keyed.into_iter().zip(&maps).enumerate() {
                if matches!(keyed, Keyed::Skip) {
                    continue;
                }
                let encoded = match map {
                    Some((tile_rows, cols)) => {
                        let slots: Vec<usize> = tile_rows.iter().map(|&y| slot(y)).collect();
                        let (done, result) = crossbeam_channel::bounded(1);
                        let texels = cut_tile(&band, row_bytes, &slots, cols);
                        if jobs.send(EncodeJob { texels, done }).is_err() {
                            return Ok(());
                        }
                        Some(result)
                    }
                    None => None,
                };
                // Blocks while the queue is full: the writer drains it in order.
                if plan.send(Planned::Tile { mip, tx: tx as u32, ty, keyed, encoded }).is_err() {
                    return Ok(());
                }
            }
            if let Some(next) = &mut next {
                // Rows y0.. are consecutive integers, hence consecutive in the sorted union.
                let payload_rows = (h - y0).min(t) as usize;
                let first = slot(y0);
                let payload = &band[first * row_bytes..(first + payload_rows) * row_bytes];
                let out = downsample(payload, w, mip, layout.width(), y0, layout.height(), layer.color);
                next.append_rows(&out).map_err(read_err)?;
            }
        }
        stored = next;
    }
    Ok(())
}

/// What the baker does with one tile of a row, by its source tile key.
#[derive(Clone, Copy)]
pub(super) enum Keyed {
    /// No key: read and encoded.
    Alone,
    /// The first tile of its key: read, encoded and stored.
    First(u64),
    /// The second: read and encoded to check it equals the first, stored as a copy.
    Check(u64),
    /// Any later one: stored as a copy of the first, unread.
    Copy(u64),
    /// Not this shard's: skipped.
    Skip,
}

/// Reads `rows` (any order, repeats allowed) into consecutive rows of `out`,
/// coalescing runs of consecutive rows into one read.
pub(super) fn read_mapped_rows(
    src: &dyn RowSource,
    rows: &[u32],
    out: &mut [u8],
    row_bytes: usize,
) -> std::io::Result<()> {
    let mut i = 0;
    while i < rows.len() {
        let mut j = i + 1;
        while j < rows.len() && rows[j] == rows[j - 1] + 1 {
            j += 1;
        }
        src.read_rows(rows[i], &mut out[i * row_bytes..j * row_bytes])?;
        i = j;
    }
    Ok(())
}

/// Cuts a `p × p` tile out of a band of rows: stored row `r` is band row `slots[r]`,
/// stored column `c` is texel column `cols[c]`.
pub(super) fn cut_tile(band: &[u8], row_bytes: usize, slots: &[usize], cols: &[u32]) -> Vec<u8> {
    let p = cols.len();
    // Runs of consecutive source columns (all but the wrapped or clamped ones): one copy each.
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for (k, &c) in cols.iter().enumerate() {
        match runs.last_mut() {
            Some((_, start, len)) if *start + *len == c as usize => *len += 1,
            _ => runs.push((k, c as usize, 1)),
        }
    }
    let mut out = vec![0u8; p * slots.len() * TEXEL_BYTES];
    for (&slot, dst) in slots.iter().zip(out.chunks_exact_mut(p * TEXEL_BYTES)) {
        let src = &band[slot * row_bytes..(slot + 1) * row_bytes];
        for &(k, c, n) in &runs {
            dst[k * TEXEL_BYTES..(k + n) * TEXEL_BYTES]
                .copy_from_slice(&src[c * TEXEL_BYTES..(c + n) * TEXEL_BYTES]);
        }
    }
    out
}
