//! [`TesseraPlugin`](crate::TesseraPlugin)'s figures in Bevy's `DiagnosticsStore`
//! (what Bevy's own diagnostics overlays and `LogDiagnosticsPlugin` read), summed over
//! every atlas in use, updated each frame from [`TesseraStats`](crate::TesseraStats).

use bevy::diagnostic::{Diagnostic, DiagnosticPath, Diagnostics, RegisterDiagnostic};
use bevy::prelude::*;

use crate::TesseraStats;

/// The share (%) of the tiles the view wants that are resident at their wanted mip:
/// the lowest of the atlases (100 until feedback arrives for any).
pub const RESIDENT_PERCENT: DiagnosticPath = DiagnosticPath::const_new("tessera/resident_percent");
/// Tiles in the VRAM pools.
pub const VRAM_TILES: DiagnosticPath = DiagnosticPath::const_new("tessera/vram_tiles");
/// Slots of the VRAM pools, used or not.
pub const VRAM_SLOTS: DiagnosticPath = DiagnosticPath::const_new("tessera/vram_slots");
/// Tiles in the host caches.
pub const HOST_TILES: DiagnosticPath = DiagnosticPath::const_new("tessera/host_tiles");
/// MiB the host caches hold.
pub const HOST_MIB: DiagnosticPath = DiagnosticPath::const_new("tessera/host_mib");
/// Tiles uploaded to VRAM in the frame.
pub const UPLOADS: DiagnosticPath = DiagnosticPath::const_new("tessera/uploads");
/// Tiles the frame's feedback wanted that were not resident.
pub const MISSES: DiagnosticPath = DiagnosticPath::const_new("tessera/misses");
/// MiB of GPU memory the virtual textures take (pools, page tables, feedback).
pub const GPU_MIB: DiagnosticPath = DiagnosticPath::const_new("tessera/gpu_mib");
/// MiB fetched over the network so far by remote atlases (0 for local files).
pub const NETWORK_MIB: DiagnosticPath = DiagnosticPath::const_new("tessera/network_mib");
/// Network requests of remote atlases in flight.
pub const NETWORK_IN_FLIGHT: DiagnosticPath = DiagnosticPath::const_new("tessera/network_in_flight");

/// Every path above, with its suffix.
const ALL: [(DiagnosticPath, &str); 10] = [
    (RESIDENT_PERCENT, "%"),
    (VRAM_TILES, " tiles"),
    (VRAM_SLOTS, " slots"),
    (HOST_TILES, " tiles"),
    (HOST_MIB, " MiB"),
    (UPLOADS, " tiles"),
    (MISSES, " tiles"),
    (GPU_MIB, " MiB"),
    (NETWORK_MIB, " MiB"),
    (NETWORK_IN_FLIGHT, " requests"),
];

/// Registers the diagnostics and the system that measures them.
pub(crate) fn register(app: &mut App) {
    for (path, suffix) in ALL {
        app.register_diagnostic(Diagnostic::new(path).with_suffix(suffix));
    }
    app.add_systems(PreUpdate, measure.after(crate::receive_stats));
}

/// One measurement of each diagnostic from the latest statistics.
fn measure(stats: Res<TesseraStats>, mut diagnostics: Diagnostics) {
    if stats.atlases.is_empty() {
        return;
    }
    let atlases = || stats.atlases.values();
    let sum = |f: fn(&crate::AtlasStats) -> f64| atlases().map(f).sum::<f64>();
    let mib = |bytes: u64| bytes as f64 / f64::from(1u32 << 20);
    let resident = atlases().filter_map(|a| a.resident_fraction).fold(1.0f64, f64::min);
    diagnostics.add_measurement(&RESIDENT_PERCENT, || 100.0 * resident);
    diagnostics.add_measurement(&VRAM_TILES, || sum(|a| a.vram_slots.0 as f64));
    diagnostics.add_measurement(&VRAM_SLOTS, || sum(|a| a.vram_slots.1 as f64));
    diagnostics.add_measurement(&HOST_TILES, || sum(|a| a.host_tiles.0 as f64));
    diagnostics.add_measurement(&HOST_MIB, || sum(|a| a.host_tiles.1 as f64) / f64::from(1u32 << 20));
    diagnostics.add_measurement(&UPLOADS, || sum(|a| a.stream.uploads as f64));
    diagnostics.add_measurement(&MISSES, || sum(|a| a.stream.misses as f64));
    diagnostics.add_measurement(&GPU_MIB, || mib(atlases().map(|a| a.gpu_bytes).sum()));
    let network = || atlases().filter_map(|a| a.stream.network);
    diagnostics.add_measurement(&NETWORK_MIB, || mib(network().map(|n| n.bytes).sum()));
    diagnostics.add_measurement(&NETWORK_IN_FLIGHT, || network().map(|n| n.in_flight).sum::<u64>() as f64);
}
