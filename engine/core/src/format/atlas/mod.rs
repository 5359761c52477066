//! The `.tsa` atlas file, versions 1 and 2: a validated reader (local files, with the
//! `remote` feature URLs, and byte ranges fetched by the embedder) and an atomic
//! streaming writer. The byte layout is specified in `docs/atlas-format.md`.

pub mod blocks;
pub mod disk_cache;
mod error;
mod header;
pub mod meta;
pub mod order;
#[cfg(feature = "remote")]
pub mod publish;
pub mod ranged;
pub mod ranges;
mod reader;
#[cfg(feature = "remote")]
pub mod remote;
pub mod split;
mod summary;
mod writer;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::format::codec::Codec;
pub use crate::format::color::ColorSpace;
use crate::format::tile::TextureLayout;

pub use error::{AtlasError, what_the_bytes_are};
pub use header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_META, FLAG_SPLIT, FLAG_STACKED, HEADER_BYTES, KNOWN_FLAGS, LAYER_BYTES,
    MAGIC, MAX_NAME_BYTES, MAX_PAGE_ENTRIES, MIN_PAGE_ENTRIES, OLDEST_VERSION, ROOT_FIXED_BYTES, ROOT_LIMIT,
    VERSION, truncate_name,
};
pub use meta::{AtlasMeta, GeoReference, GeoSummary, GeoTiffTags, LayerMeta, MAX_META_BYTES, RasterType};
pub use reader::{Atlas, INDEX_READ_AHEAD_BYTES, PAGE_CACHE_BYTES, REMOTE_VERIFY_BATCH};

pub use disk_cache::DiskCacheStats;
pub(crate) use header::{encode_entry, page_entries_for};
pub(crate) use reader::decode_entry;
pub use summary::{AtlasSummary, LayerSummary, MipSummary};
pub use writer::AtlasWriter;
pub(crate) use writer::blob_hash;

/// URL schemes of remote atlases (`s3://`, `gs://`, `az://` or `azure://`, `http://`,
/// `https://`): [`Atlas::open`] reads such a location over the network (with the
/// `remote` feature, on by default).
pub const REMOTE_SCHEMES: [&str; 6] = ["s3://", "gs://", "az://", "azure://", "http://", "https://"];

/// Whether `location` names a remote atlas (one of [`REMOTE_SCHEMES`], then something).
pub fn is_remote_location(location: &std::path::Path) -> bool {
    location.to_str().is_some_and(|l| {
        REMOTE_SCHEMES
            .iter()
            .any(|s| l.len() > s.len() && l.is_char_boundary(s.len()) && l[..s.len()].eq_ignore_ascii_case(s))
    })
}

/// `location` as it may be shown, logged or stored (errors, reports, `stats.json`): a
/// remote one with its query-string values and user info replaced by a marker, which for
/// a presigned or signed URL hold its credentials
/// ([`redact_url`](crate::error_text::redact_url)); a local path as it is.
pub fn display_location(location: &std::path::Path) -> PathBuf {
    match location.to_str() {
        Some(text) if is_remote_location(location) => {
            PathBuf::from(crate::error_text::redact_url(text).into_owned())
        }
        _ => location.to_path_buf(),
    }
}

/// The scheme of `location` when it looks like a URL (`scheme://…`, the scheme letters,
/// digits, `+`, `-` or `.` after a letter) but is not one of [`REMOTE_SCHEMES`]: a
/// mistyped or unsupported scheme, which is reported as such rather than looked for as a
/// local file.
pub fn url_scheme(location: &std::path::Path) -> Option<String> {
    let text = location.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let ok = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (ok && !is_remote_location(location)).then(|| scheme.to_ascii_lowercase())
}

/// Where and how much a remote atlas may cache on the local disk.
///
/// `Default` is [`RemoteOptions::from_env`]. Its `Debug` shows the settings' names, never
/// their values.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteOptions {
    /// The disk cache's root directory (each URL and identity gets its own below);
    /// `None`: no disk cache.
    pub disk_cache_dir: Option<PathBuf>,
    /// The disk cache's budget in bytes for one atlas identity.
    pub disk_cache_bytes: u64,
    /// Object-store settings on top of the environment variables, as object_store's
    /// configuration keys and values: `aws_*` for `s3://` (`("aws_endpoint",
    /// "http://127.0.0.1:9000")`, `("aws_allow_http", "true")`...), `google_*` for `gs://`
    /// (`("google_service_account", "/path/key.json")`...), `azure_*` for `az://`
    /// (`("azure_storage_account_name", ...)`...). Each store takes the keys of its own
    /// prefix and leaves the others'. Never logged.
    pub s3: Vec<(String, String)>,
    /// Never contact the server: open from the disk cache and read only what it holds
    /// (the CLI's `--offline`, `TESSERA_OFFLINE=1`). Without it, only a server that
    /// cannot be reached falls back to the cache; one that refuses access is an error.
    pub offline: bool,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.s3.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("RemoteOptions")
            .field("disk_cache_dir", &self.disk_cache_dir)
            .field("disk_cache_bytes", &self.disk_cache_bytes)
            .field("s3 (names only)", &names)
            .field("offline", &self.offline)
            .finish()
    }
}

/// The disk cache budget when `TESSERA_DISK_CACHE_MIB` is not set: 2 GiB.
pub const DEFAULT_DISK_CACHE_MIB: u64 = 2048;

impl Default for RemoteOptions {
    fn default() -> Self {
        Self::from_env()
    }
}

impl RemoteOptions {
    /// No disk cache: every tile not in host RAM comes from the network.
    pub fn without_disk_cache() -> Self {
        Self { disk_cache_dir: None, disk_cache_bytes: 0, s3: Vec::new(), offline: false }
    }

    /// A disk cache of `mib` MiB under `dir`.
    pub fn with_disk_cache(dir: impl Into<PathBuf>, mib: u64) -> Self {
        Self { disk_cache_dir: Some(dir.into()), disk_cache_bytes: mib << 20, s3: Vec::new(), offline: false }
    }

    /// From the environment: `TESSERA_DISK_CACHE_DIR` (default
    /// `$XDG_CACHE_HOME/tessera/remote`, else `~/.cache/tessera/remote`) and
    /// `TESSERA_DISK_CACHE_MIB` (default [`DEFAULT_DISK_CACHE_MIB`]; 0 turns the disk
    /// cache off).
    pub fn from_env() -> Self {
        let mib = match std::env::var("TESSERA_DISK_CACHE_MIB") {
            Ok(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    tracing::warn!(
                        "TESSERA_DISK_CACHE_MIB={v:?} is not a whole number of MiB (0 turns the cache off); \
                         using {DEFAULT_DISK_CACHE_MIB}"
                    );
                });
                DEFAULT_DISK_CACHE_MIB
            }),
            Err(_) => DEFAULT_DISK_CACHE_MIB,
        };
        let dir = std::env::var_os("TESSERA_DISK_CACHE_DIR").map(PathBuf::from).or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|c| c.join("tessera").join("remote"))
        });
        let offline =
            std::env::var("TESSERA_OFFLINE").is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        Self { disk_cache_dir: dir.filter(|_| mib > 0), disk_cache_bytes: mib << 20, s3: Vec::new(), offline }
    }
}

/// Counters of a remote atlas' range requests ([`Atlas::network_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkStats {
    /// Opened from the disk cache while the server could not be reached.
    pub offline: bool,
    /// The local disk cache tier's counters (`None` without one).
    pub disk_cache: Option<DiskCacheStats>,
    /// Range requests made (each may have been retried inside the client).
    pub requests: u64,
    /// Requests that failed after their retries.
    pub failures: u64,
    /// Requests abandoned in flight because their tiles were no longer wanted.
    pub cancelled: u64,
    /// Bytes received (index pages and tile ranges, gaps between coalesced blobs included).
    pub bytes: u64,
    /// Tile blobs (and index pages) received.
    pub blobs: u64,
    /// Bytes of those blobs: `bytes - blob_bytes` is what coalescing read and threw away.
    pub blob_bytes: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Median latency of the last 1024 requests, ms.
    pub latency_p50_ms: f64,
    /// 95th percentile of the same, ms.
    pub latency_p95_ms: f64,
}

impl NetworkStats {
    /// `op` applied to each cumulative count of `self` and `other` (requests,
    /// failures, cancellations, bytes, blobs, and the disk cache's hits, misses, bytes
    /// served, writes, evictions and rejections); `self`'s instantaneous figures (in
    /// flight, latencies, bytes held, offline) as they are. A missing disk cache in
    /// `other` counts zeros.
    pub fn zip_counts(&self, other: &NetworkStats, op: impl Fn(u64, u64) -> u64) -> NetworkStats {
        let disk_cache = self.disk_cache.map(|a| {
            let b = other.disk_cache.unwrap_or_default();
            DiskCacheStats {
                hits: op(a.hits, b.hits),
                misses: op(a.misses, b.misses),
                hit_bytes: op(a.hit_bytes, b.hit_bytes),
                writes: op(a.writes, b.writes),
                evictions: op(a.evictions, b.evictions),
                rejected: op(a.rejected, b.rejected),
                bytes: a.bytes,
            }
        });
        NetworkStats {
            disk_cache,
            requests: op(self.requests, other.requests),
            failures: op(self.failures, other.failures),
            cancelled: op(self.cancelled, other.cancelled),
            bytes: op(self.bytes, other.bytes),
            blobs: op(self.blobs, other.blobs),
            blob_bytes: op(self.blob_bytes, other.blob_bytes),
            ..*self
        }
    }

    /// The counts since `earlier`, with this snapshot's instantaneous figures.
    pub fn since(&self, earlier: &NetworkStats) -> NetworkStats {
        self.zip_counts(earlier, u64::saturating_sub)
    }
}

/// How texels outside a texture are found when building borders (and sampling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Wrap {
    /// Repeat the edge texel.
    Clamp = 0,
    /// Continue from the opposite edge.
    Repeat = 1,
}

/// One layer (independent virtual texture) of an atlas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerInfo {
    /// Name given at bake time (usually the input file's stem).
    pub name: String,
    /// Size, tiles and mips.
    pub layout: TextureLayout,
    /// The codec tiles were baked with (a tile may still be stored raw when that is smaller).
    pub codec: Codec,
    /// Border and sampling behaviour at the edges.
    pub wrap: Wrap,
    /// How texels are encoded.
    pub color: ColorSpace,
    /// Index of this layer's first entry in the atlas tile index.
    pub first_tile: u64,
}

/// Where one tile is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileEntry {
    /// Byte offset of the blob in the file.
    pub offset: u64,
    /// Blob length in bytes.
    pub length: u32,
    /// Decoded length in bytes.
    pub raw_length: u32,
    /// CRC-32 (IEEE) of the blob.
    pub crc32: u32,
    /// Codec the blob is stored with.
    pub codec: Codec,
}

/// Why a set of layers cannot be stacked: the first layer whose layout differs from layer 0's.
fn stacked_mismatch(layers: &[LayerInfo]) -> Option<String> {
    let first = layers.first()?;
    layers.iter().enumerate().skip(1).find(|(_, l)| l.layout != first.layout).map(|(i, l)| {
        let d = |l: &LayerInfo| {
            let y = l.layout;
            format!(
                "{}x{} tile {} border {} mips {}",
                y.width(),
                y.height(),
                y.tile_size(),
                y.border(),
                y.mip_count()
            )
        };
        format!(
            "stacked layers: layer {i} '{}' is {}, layer 0 '{}' is {} (stacked layers share one layout)",
            l.name,
            d(l),
            first.name,
            d(first)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn remote_options_never_print_setting_values() {
        let o = RemoteOptions {
            s3: vec![("aws_secret_access_key".into(), "s3cr3t-value".into())],
            ..RemoteOptions::without_disk_cache()
        };
        let shown = format!("{o:?}");
        assert!(shown.contains("aws_secret_access_key") && !shown.contains("s3cr3t-value"), "{shown}");
    }

    #[test]
    fn network_counters_since_an_earlier_snapshot() {
        let cache = |hits, bytes| Some(DiskCacheStats { hits, bytes, writes: hits, ..Default::default() });
        let earlier = NetworkStats {
            requests: 3,
            bytes: 100,
            blobs: 5,
            disk_cache: cache(2, 10),
            ..Default::default()
        };
        let now = NetworkStats {
            requests: 7,
            bytes: 250,
            blobs: 9,
            in_flight: 2,
            latency_p50_ms: 4.0,
            disk_cache: cache(6, 30),
            ..Default::default()
        };
        let d = now.since(&earlier);
        assert_eq!((d.requests, d.bytes, d.blobs, d.in_flight), (4, 150, 4, 2));
        assert_eq!(d.latency_p50_ms, 4.0);
        let c = d.disk_cache.unwrap();
        assert_eq!((c.hits, c.writes, c.bytes), (4, 4, 30), "bytes held as now");
        assert_eq!(now.since(&NetworkStats::default()).requests, 7);
    }
}
