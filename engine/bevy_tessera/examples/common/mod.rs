//! What the examples share: a fly camera, the statistics panel and bake progress.

use std::sync::atomic::{AtomicU64, Ordering};

use bevy::input::mouse::AccumulatedMouseMotion;
use bevy::prelude::*;
use bevy_tessera::TesseraStats;

/// A camera flown with WASD (Q/E down and up, Shift faster) while the right mouse
/// button turns it.
#[derive(Component, Default)]
pub(crate) struct Fly {
    /// Metres per second.
    pub(crate) speed: f32,
    yaw: f32,
    pitch: f32,
}

impl Fly {
    /// A fly camera at `speed` metres per second, facing like `transform`.
    pub(crate) fn new(speed: f32, transform: &Transform) -> Self {
        let (yaw, pitch, _) = transform.rotation.to_euler(EulerRot::YXZ);
        Self { speed, yaw, pitch }
    }
}

/// Moves and turns [`Fly`] cameras.
pub(crate) fn fly(
    time: Res<Time>,
    keys: Res<ButtonInput<KeyCode>>,
    buttons: Res<ButtonInput<MouseButton>>,
    motion: Res<AccumulatedMouseMotion>,
    mut cameras: Query<(&mut Transform, &mut Fly)>,
) {
    for (mut transform, mut fly) in &mut cameras {
        if buttons.pressed(MouseButton::Right) {
            fly.yaw -= motion.delta.x * 0.003;
            fly.pitch = (fly.pitch - motion.delta.y * 0.003).clamp(-1.55, 1.55);
            transform.rotation = Quat::from_euler(EulerRot::YXZ, fly.yaw, fly.pitch, 0.0);
        }
        let axis = |plus: KeyCode, minus: KeyCode| {
            keys.pressed(plus) as i32 as f32 - keys.pressed(minus) as i32 as f32
        };
        let local = Vec3::new(
            axis(KeyCode::KeyD, KeyCode::KeyA),
            axis(KeyCode::KeyE, KeyCode::KeyQ),
            -axis(KeyCode::KeyW, KeyCode::KeyS),
        );
        let boost = if keys.pressed(KeyCode::ShiftLeft) { 5.0 } else { 1.0 };
        let step = transform.rotation * local * fly.speed * boost * time.delta_secs();
        transform.translation += step;
    }
}

/// The text panel showing [`TesseraStats`].
///
/// A panel of Bevy UI text, not Tessera's egui overlay: bevy_egui's release for Bevy
/// 0.20 (0.43) is built on egui 0.36, and `tessera-egui` on egui 0.37, so the two
/// cannot share one egui context.
#[derive(Component)]
pub(crate) struct StatsPanel;

/// Spawns the [`StatsPanel`].
pub(crate) fn spawn_panel(mut commands: Commands) {
    commands.spawn((
        Text::new("Tessera: waiting for the first frame"),
        TextFont { font_size: FontSize::Px(14.0), ..default() },
        Node { position_type: PositionType::Absolute, top: px(8), left: px(8), ..default() },
        BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.6)),
        StatsPanel,
    ));
}

/// Writes the residency of every atlas into the [`StatsPanel`].
pub(crate) fn show_stats(stats: Res<TesseraStats>, mut panel: Query<&mut Text, With<StatsPanel>>) {
    if !stats.is_changed() {
        return;
    }
    let mut lines = Vec::new();
    for (atlas, s) in &stats.atlases {
        let name = atlas.rsplit('/').next().unwrap_or(atlas);
        let resident = s.resident_fraction.map_or("-".to_owned(), |f| format!("{:.1}%", f * 100.0));
        lines.push(format!(
            "{name}  frame {}\n  resident (wanted tiles in VRAM) {resident}\n  VRAM pool {} / {} tiles ({:.1} MiB of GPU memory)\n  host cache {} tiles, {:.1} MiB\n  uploads {} this frame, misses {}",
            s.frame,
            s.vram_slots.0,
            s.vram_slots.1,
            s.gpu_bytes as f64 / (1 << 20) as f64,
            s.host_tiles.0,
            s.host_tiles.1 as f64 / (1 << 20) as f64,
            s.stream.uploads,
            s.stream.misses,
        ));
    }
    for (atlas, why) in &stats.failed {
        lines.push(format!("{atlas}: not streamed: {why}"));
    }
    for mut text in &mut panel {
        text.0 = lines.join("\n");
    }
}

/// Bake progress printed as whole percents on one line.
#[derive(Default)]
#[allow(dead_code)] // Not every example bakes in the foreground.
pub(crate) struct Percent {
    length: AtomicU64,
    done: AtomicU64,
    shown: AtomicU64,
}

impl tessera::core::progress::Progress for Percent {
    fn set_length(&self, n: u64) {
        self.length.store(n.max(1), Ordering::Relaxed);
    }

    fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        let percent = done * 100 / self.length.load(Ordering::Relaxed).max(1);
        if self.shown.fetch_max(percent, Ordering::Relaxed) < percent {
            eprint!("\rbaking: {percent:>3}%");
        }
    }

    fn finish(&self) {
        eprintln!("\rbaking: done");
    }
}
