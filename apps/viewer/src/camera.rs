//! The viewer's cameras: the presets and the `--camera` path of the scene shown, and the
//! rig that flies (WASD + mouse look) or orbits around a pivot, scaled to the scene.

use std::path::Path;

use anyhow::Result;
use glam::Vec3;
use tessera::core::scene::camera::{Camera, CameraPath, PRESETS, SCENE_PRESETS, Shot};
use tessera::core::scene::material_scene::MaterialScene;
use tessera::core::scene::terrain::{TERRAIN_PATHS, TerrainScene};

/// The cameras of one scene: the `--camera` path, the preset views that keys 1–4 and C
/// jump to, and the size that scales the rig.
#[derive(Clone, Debug)]
pub(crate) struct SceneCameras {
    /// The path `--screenshot` follows and P plays.
    pub(crate) path: CameraPath,
    /// The first camera of each preset, then the view `cut` cuts to.
    pub(crate) views: Vec<Camera>,
    /// The names of the presets keys 1–4 choose.
    pub(crate) names: &'static [&'static str],
    /// World units per unit of the built-in scene (about 2 units across): 1 for the
    /// built-in scene, half the bounding box's diagonal for a material scene.
    pub(crate) unit: f32,
}

impl SceneCameras {
    /// The cameras for `scene` (`None`: the built-in scene) with the path `spec` (a preset
    /// of the scene's kind or a camera JSON file; `None`: the kind's default preset).
    pub(crate) fn new(spec: Option<&str>, scene: Option<&MaterialScene>) -> Result<Self> {
        let unit = scene.map_or(1.0, |s| ((s.bounds_max - s.bounds_min).length() * 0.5).max(1e-3));
        let names = CameraPath::preset_names(scene);
        let path = CameraPath::for_scene(spec, scene, Shot::Still)?;
        let preset = |n: &str| CameraPath::preset_for(n, scene);
        let mut views: Vec<Camera> = names.iter().filter_map(|n| preset(n)).map(|p| p.camera_at(0)).collect();
        if let Some(cut) = preset("cut") {
            views.push(cut.camera_at(cut.end_frame()));
        }
        anyhow::ensure!(!views.is_empty(), "the scene has an empty bounding box, so no camera presets");
        Ok(Self { path, views, names, unit })
    }
}

impl SceneCameras {
    /// The cameras of the runtime-virtual-texture terrain: its paths (walk, fly, cut,
    /// overview) as presets, `spec` (one of them or a camera JSON file; `None`: the
    /// overview) as the path; the rig moves at about 2 world units a second.
    pub(crate) fn terrain(spec: Option<&str>, terrain: &TerrainScene) -> Result<Self> {
        let path = match spec {
            None => terrain.camera_path("overview"),
            Some(name) => terrain.camera_path(name),
        };
        let path = match (path, spec) {
            (Some(p), _) => p,
            (None, Some(file)) => CameraPath::load(file)?,
            (None, None) => anyhow::bail!("the terrain has no overview camera"),
        };
        let mut views: Vec<Camera> =
            TERRAIN_PATHS.iter().filter_map(|n| terrain.camera_path(n)).map(|p| p.camera_at(0)).collect();
        if let Some(cut) = terrain.camera_path("cut") {
            views.push(cut.camera_at(cut.end_frame()));
        }
        Ok(Self { path, views, names: TERRAIN_PATHS, unit: 2.0 })
    }
}

/// Checks `spec` before anything opens: a preset of the built-in scene or of material
/// scenes, or an existing file (read once the scene is known).
pub(crate) fn check_spec(spec: &str) -> Result<()> {
    anyhow::ensure!(
        PRESETS.contains(&spec)
            || SCENE_PRESETS.contains(&spec)
            || TERRAIN_PATHS.contains(&spec)
            || Path::new(spec).is_file(),
        "camera '{spec}' is neither a preset (built-in scene: {}; material scenes: {}; the terrain: {}) nor an \
         existing JSON file",
        PRESETS.join(", "),
        SCENE_PRESETS.join(", "),
        TERRAIN_PATHS.join(", ")
    );
    Ok(())
}

/// How mouse drags and movement keys move the camera.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Move the eye; dragging turns the view.
    Fly,
    /// Dragging turns the eye around the pivot `distance` ahead of it.
    Orbit,
}

/// Eye position, heading and pitch, the distance to the orbit pivot, and the scene's
/// size, which scales speeds, zoom steps and clip distances.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rig {
    pub(crate) mode: Mode,
    position: Vec3,
    yaw: f32,
    pitch: f32,
    distance: f32,
    /// World units per unit of the built-in scene ([`SceneCameras::unit`]).
    unit: f32,
    base: Camera,
}

const PITCH_LIMIT: f32 = 1.54;
/// Move speed in scene units per second (Shift: four times that).
const SPEED: f32 = 0.5;
/// Fly-mode scroll step, scene units.
const ZOOM_STEP: f32 = 0.1;
/// Nearest and farthest orbit distances, scene units.
const ORBIT_DISTANCE: (f32, f32) = (0.02, 10.0);
/// The rig's clip range reaches at least from `NEAR` to `FAR` scene units.
const NEAR: f32 = 0.002;
const FAR: f32 = 20.0;

impl Rig {
    /// A rig showing what `c` shows, pivoting around its target, in a scene of `unit`
    /// world units per unit of the built-in scene.
    pub(crate) fn from_camera(c: &Camera, mode: Mode, unit: f32) -> Self {
        let d = c.target - c.position;
        let distance = d.length().max(1e-3);
        let dir = d / distance;
        Self {
            mode,
            position: c.position,
            yaw: dir.z.atan2(dir.x),
            pitch: dir.y.clamp(-1.0, 1.0).asin(),
            distance,
            unit: if unit.is_finite() && unit > 0.0 { unit } else { 1.0 },
            base: *c,
        }
    }

    fn forward(&self) -> Vec3 {
        Vec3::new(self.yaw.cos() * self.pitch.cos(), self.pitch.sin(), self.yaw.sin() * self.pitch.cos())
    }

    /// The camera to render with: the base camera's field of view, and its clip range
    /// widened to the scene's size so flying close or far away keeps the scene in view.
    pub(crate) fn camera(&self) -> Camera {
        Camera {
            position: self.position,
            target: self.position + self.forward() * self.distance,
            up: Vec3::Y,
            near: self.base.near.min(NEAR * self.unit),
            far: self.base.far.max(FAR * self.unit),
            ..self.base
        }
    }

    /// Turns by a mouse drag of `(dx, dy)` pixels.
    pub(crate) fn drag(&mut self, dx: f32, dy: f32) {
        let pivot = self.position + self.forward() * self.distance;
        let k = 0.004;
        match self.mode {
            Mode::Fly => {
                self.yaw += dx * k;
                self.pitch = (self.pitch - dy * k).clamp(-PITCH_LIMIT, PITCH_LIMIT);
            }
            Mode::Orbit => {
                self.yaw += dx * k;
                self.pitch = (self.pitch + dy * k).clamp(-PITCH_LIMIT, PITCH_LIMIT);
                self.position = pivot - self.forward() * self.distance;
            }
        }
    }

    /// Scroll: orbit moves toward the pivot, fly moves forward.
    pub(crate) fn zoom(&mut self, steps: f32) {
        match self.mode {
            Mode::Orbit => {
                let pivot = self.position + self.forward() * self.distance;
                let (lo, hi) = (ORBIT_DISTANCE.0 * self.unit, ORBIT_DISTANCE.1 * self.unit);
                self.distance = (self.distance * 0.9f32.powf(steps)).clamp(lo, hi.max(lo));
                self.position = pivot - self.forward() * self.distance;
            }
            Mode::Fly => self.position += self.forward() * steps * ZOOM_STEP * self.unit,
        }
    }

    /// Moves for `seconds` along the view axes in the direction `(right, up, forward)`
    /// (components -1..1) at the scene's speed, times `boost`.
    pub(crate) fn fly(&mut self, right: f32, up: f32, forward: f32, seconds: f32, boost: f32) {
        let s = SPEED * self.unit * boost * seconds;
        let f = self.forward();
        let r = f.cross(Vec3::Y).normalize_or_zero();
        self.position += (r * right + Vec3::Y * up + f * forward) * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rig_reproduces_the_camera_and_orbit_keeps_the_pivot() {
        let c = Camera::look_at(Vec3::new(0.0, 1.0, 2.0), Vec3::ZERO);
        let mut rig = Rig::from_camera(&c, Mode::Orbit, 1.0);
        let back = rig.camera();
        assert!(back.position.distance(c.position) < 1e-5 && back.target.distance(c.target) < 1e-4);
        rig.drag(120.0, -40.0);
        rig.zoom(2.0);
        let moved = rig.camera();
        assert!(moved.target.distance(Vec3::ZERO) < 1e-4, "{moved:?}");
        assert!(moved.position.distance(c.position) > 0.1);
    }

    #[test]
    fn speeds_zoom_and_clip_range_scale_with_the_scene() {
        let c = Camera::look_at(Vec3::new(0.0, 1.0, 2.0), Vec3::ZERO);
        let moved = |unit: f32| {
            let mut rig = Rig::from_camera(&c, Mode::Fly, unit);
            rig.fly(0.0, 0.0, 1.0, 0.5, 1.0);
            rig.camera().position.distance(c.position)
        };
        assert!((moved(1.0) - SPEED * 0.5).abs() < 1e-5);
        assert!((moved(30.0) - 30.0 * SPEED * 0.5).abs() < 1e-3);
        let big = Rig::from_camera(&c, Mode::Orbit, 30.0).camera();
        assert!(big.far >= FAR * 30.0 && big.near <= NEAR * 30.0 + 1e-6, "{big:?}");
        // Orbit zoom-out stops at a distance that scales with the scene.
        let mut small = Rig::from_camera(&c, Mode::Orbit, 1.0);
        let mut large = Rig::from_camera(&c, Mode::Orbit, 30.0);
        for rig in [&mut small, &mut large] {
            rig.zoom(-200.0);
        }
        let d = |r: &Rig| r.camera().position.distance(r.camera().target);
        assert!((d(&small) - ORBIT_DISTANCE.1).abs() < 1e-3, "{}", d(&small));
        assert!((d(&large) - 30.0 * ORBIT_DISTANCE.1).abs() < 1e-2, "{}", d(&large));
    }

    /// A box-shaped test scene of `size` world units with its floor at y = 0.
    fn box_scene(size: Vec3) -> MaterialScene {
        use tessera::core::scene::{Mesh, Vertex};
        let v = |x: f32, z: f32| Vertex { position: [x, 0.0, z], normal: [0.0, 1.0, 0.0], uv: [0.0, 0.0] };
        let floor = Mesh {
            vertices: vec![v(0.0, 0.0), v(size.x, 0.0), v(size.x, size.z), v(0.0, size.z)],
            indices: vec![0, 2, 1, 0, 3, 2],
        };
        MaterialScene {
            meshes: vec![tessera::core::scene::material_scene::SceneMesh {
                name: "floor".into(),
                mesh: floor,
                material: 0,
            }],
            materials: vec![Default::default()],
            default_material: None,
            bounds_min: Vec3::ZERO,
            bounds_max: size,
            sun_direction: None,
            source: "box.gltf".into(),
            paths: Default::default(),
        }
    }

    #[test]
    fn material_scenes_get_the_scene_presets_scaled_to_their_bounds() {
        let builtin = SceneCameras::new(None, None).expect("built-in cameras");
        assert_eq!(builtin.names, PRESETS);
        assert_eq!(builtin.unit, 1.0);
        assert_eq!(builtin.views.len(), PRESETS.len() + 1);
        assert_eq!(builtin.path.camera_at(0), CameraPath::preset("static").expect("static").camera_at(0));

        let scene = box_scene(Vec3::new(60.0, 8.0, 40.0));
        let cams = SceneCameras::new(Some("walk"), Some(&scene)).expect("scene cameras");
        assert_eq!(cams.names, SCENE_PRESETS);
        assert_eq!(cams.views.len(), SCENE_PRESETS.len() + 1);
        assert!((cams.unit - Vec3::new(60.0, 8.0, 40.0).length() * 0.5).abs() < 1e-3);
        // The walk is at eye height above the floor, inside the box.
        let eye = cams.path.camera_at(0).position;
        assert!((eye.y - 1.7).abs() < 1e-3 && eye.x > 0.0 && eye.x < 60.0, "{eye}");
        let default = SceneCameras::new(None, Some(&scene)).expect("default");
        assert_eq!(default.path.camera_at(0), cams.views[0], "overview is the default");

        // A preset of the other kind is refused, naming the kind's presets.
        let e = SceneCameras::new(Some("flyover"), Some(&scene)).expect_err("flyover on a scene");
        assert!(e.to_string().contains("overview, walk, fly, cut"), "{e}");
        let e = SceneCameras::new(Some("walk"), None).expect_err("walk on the built-in scene");
        assert!(e.to_string().contains("static, flyover, orbit, cut"), "{e}");
        assert!(check_spec("walk").is_ok() && check_spec("flyover").is_ok());
        assert!(check_spec("nowhere.json").is_err());
    }
}
