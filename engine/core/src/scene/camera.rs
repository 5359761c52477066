//! Cameras and keyframed camera paths (JSON files and built-in presets) that drive renders and benchmarks.

use std::path::{Path, PathBuf};

use glam::camera::rh::{proj, view};
use glam::{Mat4, Vec3};
use serde::{Deserialize, Serialize};

use crate::scene::floor_level;
use crate::scene::material_scene::MaterialScene;

/// Names accepted by [`CameraPath::preset`], in the order tools should list them.
pub const PRESETS: &[&str] = &["static", "flyover", "orbit", "cut"];

/// Names of the camera paths [`CameraPath::scene_preset`] builds for any scene from its
/// bounding box; `overview` is the default.
pub const SCENE_PRESETS: &[&str] = &["overview", "walk", "fly", "cut"];

/// Placeholder file name in errors about paths that did not come from a file.
const STRING_SOURCE: &str = "<string>";

/// A perspective camera looking from `position` at `target`.
///
/// Right-handed, Y up by default; projections map depth to `0..1` as wgpu expects.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Camera {
    /// Eye position in world units.
    pub position: Vec3,
    /// Point the camera looks at.
    pub target: Vec3,
    /// Up direction; need not be unit length or orthogonal to the view direction. Defaults to +Y.
    #[serde(default = "default_up")]
    pub up: Vec3,
    /// Vertical field of view in degrees, in `(0, 180)`. Defaults to 45.
    #[serde(default = "default_fov_y_degrees")]
    pub fov_y_degrees: f32,
    /// Near clip distance, positive. Defaults to 0.01.
    #[serde(default = "default_near")]
    pub near: f32,
    /// Far clip distance, greater than `near`. Defaults to 100.
    #[serde(default = "default_far")]
    pub far: f32,
}

fn default_up() -> Vec3 {
    Vec3::Y
}

fn default_fov_y_degrees() -> f32 {
    45.0
}

fn default_near() -> f32 {
    0.01
}

fn default_far() -> f32 {
    100.0
}

impl Default for Camera {
    /// A camera at `(0, 1, 2)` looking at the origin with the default up, fov and clip distances.
    fn default() -> Self {
        Self::look_at(Vec3::new(0.0, 1.0, 2.0), Vec3::ZERO)
    }
}

impl Camera {
    /// A camera at `position` looking at `target`, with +Y up, 45° vertical fov and clip range `0.01..100`.
    pub fn look_at(position: Vec3, target: Vec3) -> Self {
        Self {
            position,
            target,
            up: default_up(),
            fov_y_degrees: default_fov_y_degrees(),
            near: default_near(),
            far: default_far(),
        }
    }

    /// Where this camera will be `frames` frames from now if it keeps moving as it did
    /// since `previous` (one frame ago): position and target carried on linearly, the
    /// rest kept. Closing in on the target is limited to half the distance, so zooming in
    /// never predicts a view past (or onto) the target; a camera that did not move
    /// predicts itself.
    pub fn extrapolated(&self, previous: &Camera, frames: f32) -> Camera {
        let (step, target_step) = (self.position - previous.position, self.target - previous.target);
        // How fast the camera closes in on its target along the line between them.
        let offset = self.position - self.target;
        let distance = offset.length();
        let approach = if distance > 0.0 { -(step - target_step).dot(offset / distance) } else { 0.0 };
        let frames =
            if approach * frames > 0.5 * distance { (0.5 * distance / approach).min(frames) } else { frames };
        Camera {
            position: self.position + step * frames,
            target: self.target + target_step * frames,
            ..*self
        }
    }

    /// World-to-view matrix (right-handed: the camera looks down its local -Z).
    pub fn view(&self) -> Mat4 {
        view::look_at_mat4(self.position, self.target, self.up)
    }

    /// View-to-clip matrix for a viewport of the given width / height, with depth mapped to `0..1`.
    pub fn projection(&self, aspect: f32) -> Mat4 {
        // wgpu shares DirectX's clip space: depth 0..1, +Y up.
        proj::directx::perspective(self.fov_y_degrees.to_radians(), aspect, self.near, self.far)
    }

    /// World-to-clip matrix: `projection(aspect) * view()`.
    pub fn view_projection(&self, aspect: f32) -> Mat4 {
        self.projection(aspect) * self.view()
    }

    /// Describes the first thing that would make this camera's matrices meaningless, if any.
    fn problem(&self) -> Option<String> {
        let vectors = [("position", self.position), ("target", self.target), ("up", self.up)];
        for (name, v) in vectors {
            if !v.is_finite() {
                return Some(format!("camera.{name} {v} is not finite"));
            }
        }
        let scalars = [("fov_y_degrees", self.fov_y_degrees), ("near", self.near), ("far", self.far)];
        for (name, x) in scalars {
            if !x.is_finite() {
                return Some(format!("camera.{name} {x} is not finite"));
            }
        }
        if !(self.fov_y_degrees > 0.0 && self.fov_y_degrees < 180.0) {
            return Some(format!("camera.fov_y_degrees {} is not in (0, 180)", self.fov_y_degrees));
        }
        if self.near <= 0.0 {
            return Some(format!("camera.near {} is not positive", self.near));
        }
        if self.far <= self.near {
            return Some(format!("camera.far {} is not greater than near {}", self.far, self.near));
        }
        let dir = self.target - self.position;
        if dir.length_squared() < 1e-12 {
            return Some(format!("camera.position and camera.target are both {}", self.position));
        }
        if dir.normalize().cross(self.up).length_squared() < 1e-12 {
            return Some(format!("camera.up {} is zero or parallel to the view direction", self.up));
        }
        None
    }
}

/// One camera pose on a [`CameraPath`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keyframe {
    /// Frame number at which the camera is exactly `camera`; may be fractional.
    pub frame: f32,
    /// The pose at `frame`.
    pub camera: Camera,
    /// `true`: jump to this pose at `frame` instead of moving there from the previous keyframe
    /// (frames before it hold the previous keyframe). Defaults to `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// A keyframed camera animation, sampled per frame with [`CameraPath::camera_at`].
///
/// Position and target follow a cubic Hermite spline through the keyframes (Catmull-Rom tangents
/// scaled for uneven keyframe spacing, one-sided at the ends of the path and around cuts, so a
/// path of two keyframes moves at constant speed); up, fov and clip distances are interpolated
/// linearly. Before the first keyframe the camera is the first keyframe's; after the last, the
/// last's.
///
/// # JSON schema
///
/// An object with one field, `keyframes`: a non-empty array, in strictly increasing `frame`
/// order, of objects with
/// - `frame` (number): the frame at which the pose is reached;
/// - `camera` (object): `position` and `target` (`[x, y, z]` arrays, required), `up`
///   (`[x, y, z]`, default `[0, 1, 0]`), `fov_y_degrees` (default 45), `near` (default 0.01) and
///   `far` (default 100);
/// - `cut` (bool, default `false`): jump to this pose at `frame` instead of moving there.
///
/// Unknown fields are errors, so typos are caught. Example: dolly in for 60 frames, then cut to
/// a close-up and hold it.
///
/// ```json
/// {
///   "keyframes": [
///     { "frame": 0, "camera": { "position": [0, 1.2, 1.0], "target": [0, 0, 0] } },
///     { "frame": 60, "camera": { "position": [0, 0.6, 0.5], "target": [0, 0, 0], "fov_y_degrees": 40 } },
///     { "frame": 61, "cut": true,
///       "camera": { "position": [0.7, 0.06, -0.2], "target": [0.75, 0, -0.3], "near": 0.002 } }
///   ]
/// }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CameraPath {
    /// The keyframes, in strictly increasing frame order.
    pub keyframes: Vec<Keyframe>,
}

/// Everything that can be wrong with a camera path file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CameraError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid JSON or does not match the camera path schema.
    #[error("{path}: invalid camera path JSON at line {line}, column {column}: {message}")]
    Json {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the JSON parser objected to.
        message: String,
    },
    /// The path has no keyframes, so there is no camera to sample.
    #[error("{path}: camera path has no keyframes")]
    NoKeyframes {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
    },
    /// A keyframe's frame is not finite.
    #[error("{path}: keyframe {index}: frame {frame} is not finite")]
    NonFiniteFrame {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
        /// 0-based keyframe index.
        index: usize,
        /// The offending frame value.
        frame: f32,
    },
    /// Keyframes are not in strictly increasing frame order.
    #[error(
        "{path}: keyframe {index} is at frame {frame}, not after keyframe {} at frame {previous}",
        index - 1
    )]
    NotIncreasing {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
        /// 0-based index of the keyframe that is out of order.
        index: usize,
        /// Its frame.
        frame: f32,
        /// The frame of the keyframe before it.
        previous: f32,
    },
    /// A keyframe's camera has non-finite numbers or degenerate settings.
    #[error("{path}: keyframe {index} (frame {frame}): {problem}")]
    InvalidCamera {
        /// The camera path file (`<string>` when parsed from a string).
        path: PathBuf,
        /// 0-based keyframe index.
        index: usize,
        /// Its frame.
        frame: f32,
        /// What is wrong, naming the field and its value.
        problem: String,
    },
    /// A camera named by neither a preset of the scene nor an existing file.
    #[error("camera '{spec}' is neither a preset of this scene ({presets}) nor an existing JSON file")]
    Unknown {
        /// The name given.
        spec: String,
        /// The scene's presets, comma-separated.
        presets: String,
    },
}

/// What a camera path is for when none is named: it decides the default preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shot {
    /// One still view of the whole scene (captures, the viewer's start).
    Still,
    /// A path that moves through the scene (the demo, benchmarks).
    Tour,
}

impl CameraPath {
    /// A soak path: `cuts` random views, one every `every` frames (each a cut), looking
    /// at random points of the box `min..max` (its floor at `min.y`) from random heights
    /// and distances, from grazing to straight down. The same `seed` gives the same
    /// path. `every` 0 is taken as 1.
    pub fn random_cuts(seed: u64, cuts: u32, every: u32, min: Vec3, max: Vec3) -> Self {
        let mut rng = seed | 1;
        let mut next = move || {
            // xorshift64, in [0, 1).
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f32 / (1u64 << 53) as f32
        };
        let size = (max - min).max(Vec3::splat(1e-3));
        let extent = size.x.max(size.z);
        let keyframes = (0..cuts)
            .map(|i| {
                let target = Vec3::new(min.x + next() * size.x, min.y, min.z + next() * size.z);
                let height = extent * (0.002 + 0.3 * next() * next());
                let reach = extent * 0.2 * next();
                let angle = next() * std::f32::consts::TAU;
                let eye =
                    target + Vec3::new(reach * angle.cos(), height, reach * angle.sin() + 1e-4 * extent);
                let camera =
                    Camera { near: extent * 2e-4, far: extent * 4.0, ..Camera::look_at(eye, target) };
                Keyframe { frame: (i as f32) * every.max(1) as f32, camera, cut: i > 0 }
            })
            .collect();
        Self { keyframes }
    }
}

impl CameraPath {
    /// A path that holds one camera forever.
    pub fn fixed(camera: Camera) -> Self {
        Self { keyframes: vec![Keyframe { frame: 0.0, camera, cut: false }] }
    }

    /// Parses and validates a camera path from JSON text (errors name the file as `<string>`).
    pub fn from_json_str(json: &str) -> Result<Self, CameraError> {
        Self::parse(json, Path::new(STRING_SOURCE))
    }

    /// Reads, parses and validates a camera path JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CameraError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| CameraError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// The path as pretty-printed JSON in the schema [`CameraPath::from_json_str`] reads.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a camera path always serialises to JSON")
    }

    /// Writes the path as JSON to `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CameraError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json() + "\n")
            .map_err(|source| CameraError::Io { path: path.to_path_buf(), source })
    }

    /// Checks what [`CameraPath::load`] checks: at least one keyframe, finite numbers, sane
    /// cameras and strictly increasing frames (errors name the file as `<string>`).
    pub fn validate(&self) -> Result<(), CameraError> {
        self.validate_for(Path::new(STRING_SOURCE))
    }

    /// The last keyframe's frame rounded up (0 for an empty path): playing frames
    /// `0..=end_frame()` shows the whole path.
    pub fn end_frame(&self) -> u32 {
        // `as` saturates: negative or NaN frames give 0.
        self.keyframes.last().map_or(0, |k| k.frame.ceil() as u32)
    }

    /// The camera at an integer frame; see [`CameraPath::sample`].
    pub fn camera_at(&self, frame: u32) -> Camera {
        self.sample(frame as f32)
    }

    /// The camera at a possibly fractional frame.
    ///
    /// Exactly the keyframe's camera at each keyframe's frame; the first keyframe's camera before
    /// it and the last's after it; [`Camera::default`] for a path with no keyframes.
    pub fn sample(&self, frame: f32) -> Camera {
        let keys = &self.keyframes;
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Camera::default();
        };
        if frame.is_nan() || frame <= first.frame {
            return first.camera;
        }
        if frame >= last.frame {
            return last.camera;
        }
        // first.frame < frame < last.frame, so 1 <= after <= len - 1.
        let after = keys.partition_point(|k| k.frame <= frame);
        let i = after.saturating_sub(1);
        let (a, b) = (&keys[i], &keys[after.min(keys.len() - 1)]);
        let span = b.frame - a.frame;
        if frame == a.frame || b.cut || span.is_nan() || span <= 0.0 {
            return a.camera;
        }
        let s = (frame - a.frame) / span;
        let (h00, h10, h01, h11) = hermite_basis(s);
        let spline = |get: fn(&Camera) -> Vec3| {
            let m0 = self.tangent(i, get) * span;
            let m1 = self.tangent(i + 1, get) * span;
            get(&a.camera) * h00 + m0 * h10 + get(&b.camera) * h01 + m1 * h11
        };
        let (ca, cb) = (&a.camera, &b.camera);
        let up = ca.up.lerp(cb.up, s);
        Camera {
            position: spline(|c| c.position),
            target: spline(|c| c.target),
            up: if ca.up == cb.up { ca.up } else { up.try_normalize().unwrap_or(ca.up) },
            fov_y_degrees: lerp(ca.fov_y_degrees, cb.fov_y_degrees, s),
            near: lerp(ca.near, cb.near, s),
            far: lerp(ca.far, cb.far, s),
        }
    }

    /// Velocity (world units per frame) of a spline quantity at keyframe `j`: central difference
    /// over the neighbours it is interpolated with, one-sided at path ends and cuts.
    fn tangent(&self, j: usize, get: fn(&Camera) -> Vec3) -> Vec3 {
        let keys = &self.keyframes;
        let here = &keys[j];
        let prev = (j > 0 && !here.cut).then(|| &keys[j - 1]);
        let next = keys.get(j + 1).filter(|k| !k.cut);
        let (from, to) = match (prev, next) {
            (Some(p), Some(n)) => (p, n),
            (Some(p), None) => (p, here),
            (None, Some(n)) => (here, n),
            (None, None) => return Vec3::ZERO,
        };
        let dt = to.frame - from.frame;
        if dt > 0.0 { (get(&to.camera) - get(&from.camera)) / dt } else { Vec3::ZERO }
    }

    fn parse(json: &str, path: &Path) -> Result<Self, CameraError> {
        let parsed: Self = serde_json::from_str(json).map_err(|e| CameraError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: strip_position(&e),
        })?;
        parsed.validate_for(path)?;
        Ok(parsed)
    }

    fn validate_for(&self, path: &Path) -> Result<(), CameraError> {
        if self.keyframes.is_empty() {
            return Err(CameraError::NoKeyframes { path: path.to_path_buf() });
        }
        let mut previous: Option<f32> = None;
        for (index, k) in self.keyframes.iter().enumerate() {
            if !k.frame.is_finite() {
                return Err(CameraError::NonFiniteFrame { path: path.to_path_buf(), index, frame: k.frame });
            }
            if let Some(prev) = previous
                && k.frame <= prev
            {
                return Err(CameraError::NotIncreasing {
                    path: path.to_path_buf(),
                    index,
                    frame: k.frame,
                    previous: prev,
                });
            }
            if let Some(problem) = k.camera.problem() {
                return Err(CameraError::InvalidCamera {
                    path: path.to_path_buf(),
                    index,
                    frame: k.frame,
                    problem,
                });
            }
            previous = Some(k.frame);
        }
        Ok(())
    }

    /// A built-in path named in [`PRESETS`], designed for [`crate::scene::builtin_scene`] with a 2:1
    /// ground (half-extents [`crate::scene::PRESET_GROUND_HALF_EXTENTS`]) seen at 16:9; `None` for
    /// other names.
    ///
    /// - `static`: one camera about 55° above the horizon showing most of the ground, the globe
    ///   and the cube.
    /// - `flyover`: a grazing pass about 0.1 above the ground along +x over 120 frames, beside
    ///   the globe and cube, so many mip levels and strong anisotropy are on screen at once.
    /// - `orbit`: one turn around the scene at moderate height over 120 frames.
    /// - `cut`: a slow wide dolly for 30 frames, then a hard cut to a close-up of a ground corner
    ///   that needs the finest mip, held until frame 120.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "static" => Some(Self::fixed(static_camera())),
            "flyover" => Some(flyover()),
            "orbit" => Some(orbit()),
            "cut" => Some(cut()),
            _ => None,
        }
    }
}

impl CameraPath {
    /// The preset names of a scene: [`PRESETS`] for the built-in meshes (`scene` `None`,
    /// which also draw the atlases of mosaics and plain textures), [`SCENE_PRESETS`] for a
    /// material scene.
    pub fn preset_names(scene: Option<&MaterialScene>) -> &'static [&'static str] {
        if scene.is_some() { SCENE_PRESETS } else { PRESETS }
    }

    /// The preset `name` of a scene (`None`: the built-in meshes): [`CameraPath::preset`],
    /// or [`CameraPath::scene_preset`] fitted to the material scene's bounds and floor.
    pub fn preset_for(name: &str, scene: Option<&MaterialScene>) -> Option<Self> {
        match scene {
            None => Self::preset(name),
            Some(s) => {
                let floor = floor_level(s.meshes.iter().map(|m| &m.mesh));
                Self::scene_preset(name, s.bounds_min, s.bounds_max, floor)
            }
        }
    }

    /// The preset that suits a scene (`None`: the built-in meshes) for `shot`:
    /// - still: `static` on the built-in meshes, `overview` of a material scene;
    /// - tour: `flyover` on the built-in meshes; for a material scene, `walk` when it has a
    ///   floor and is at most half as high as it is wide or deep (a level, like the
    ///   dungeon), else `fly` around it (an object, like the globe).
    pub fn default_preset(scene: Option<&MaterialScene>, shot: Shot) -> &'static str {
        match (scene, shot) {
            (None, Shot::Still) => "static",
            (None, Shot::Tour) => "flyover",
            (Some(_), Shot::Still) => "overview",
            (Some(s), Shot::Tour) => {
                let size = s.bounds_max - s.bounds_min;
                let flat = size.y <= 0.5 * size.x.max(size.z);
                if flat && floor_level(s.meshes.iter().map(|m| &m.mesh)).is_some() { "walk" } else { "fly" }
            }
        }
    }

    /// The camera path for a scene (`None`: the built-in meshes): `spec` names a preset
    /// of the scene ([`CameraPath::preset_names`]) or a camera path JSON file; without
    /// `spec`, the scene's default preset for `shot` ([`CameraPath::default_preset`]).
    pub fn for_scene(
        spec: Option<&str>,
        scene: Option<&MaterialScene>,
        shot: Shot,
    ) -> Result<Self, CameraError> {
        let spec = spec.unwrap_or_else(|| Self::default_preset(scene, shot));
        if let Some(path) = Self::preset_for(spec, scene) {
            return Ok(path);
        }
        let file = Path::new(spec);
        if !file.is_file() {
            return Err(CameraError::Unknown {
                spec: spec.to_string(),
                presets: Self::preset_names(scene).join(", "),
            });
        }
        Self::load(file)
    }
}

impl CameraPath {
    /// A camera path named in [`SCENE_PRESETS`] for a scene whose bounding box is
    /// `min..max` (world units, Y up) and whose floor, when known, is at height `floor`
    /// (see [`crate::scene::floor_level`]); `None` for other names or an empty box.
    ///
    /// - `overview`: one camera above and in front of the box, 30° down, far enough
    ///   for the whole box to fit a 16:9 frame.
    /// - `walk`: a walk at eye height (1.7 units above the floor, at most 30% of the box
    ///   height) along the longer horizontal axis through the centre, 150 frames.
    /// - `fly`: one turn around the box, above it and outside it, over 120 frames.
    /// - `cut`: the overview for 30 frames, then a hard cut to a close view of the
    ///   floor at the centre, held until frame 120.
    pub fn scene_preset(name: &str, min: Vec3, max: Vec3, floor: Option<f32>) -> Option<Self> {
        let size = max - min;
        if size.max_element() <= 0.0 || !size.is_finite() {
            return None;
        }
        let centre = (min + max) * 0.5;
        let radius = (size.length() * 0.5).max(1e-3);
        let fov = 50.0_f32;
        // Distance at which a sphere of `radius` fits the vertical fov.
        let distance = radius / (fov.to_radians() * 0.5).sin();
        let clip = |near: f32, c: Camera| Camera {
            near,
            far: distance * 4.0 + radius * 4.0,
            fov_y_degrees: fov,
            ..c
        };
        let overview = {
            let dir = Vec3::new(0.0, 30f32.to_radians().sin(), 30f32.to_radians().cos());
            clip(distance * 0.01, Camera::look_at(centre + dir * distance, centre))
        };
        let fixed = |frame: f32, camera: Camera, cut: bool| Keyframe { frame, camera, cut };
        match name {
            "overview" => Some(Self::fixed(overview)),
            "walk" => {
                let ground = floor.unwrap_or(min.y).clamp(min.y, max.y);
                let eye = ground + (size.y * 0.3).min(1.7);
                let (axis, half) =
                    if size.x >= size.z { (Vec3::X, size.x * 0.4) } else { (Vec3::Z, size.z * 0.4) };
                let near = (radius * 0.0005).max(1e-4);
                let base = Vec3::new(centre.x, eye, centre.z);
                let keyframes = (0..=5)
                    .map(|i| {
                        let s = i as f32 / 5.0;
                        let position = base + axis * (-half + 2.0 * half * s);
                        let target = position + axis * radius * 0.3 - Vec3::Y * (eye - ground) * 0.3;
                        fixed(150.0 * s, clip(near, Camera::look_at(position, target)), false)
                    })
                    .collect();
                Some(Self { keyframes })
            }
            "fly" => {
                const STEPS: u32 = 24;
                let keyframes = (0..=STEPS)
                    .map(|i| {
                        let a = std::f32::consts::TAU * i as f32 / STEPS as f32;
                        let position = centre
                            + Vec3::new(
                                a.sin() * distance * 0.8,
                                size.y * 0.5 + distance * 0.35,
                                a.cos() * distance * 0.8,
                            );
                        fixed(
                            120.0 * i as f32 / STEPS as f32,
                            clip(distance * 0.01, Camera::look_at(position, centre)),
                            false,
                        )
                    })
                    .collect();
                Some(Self { keyframes })
            }
            "cut" => {
                let floor = Vec3::new(centre.x, floor.unwrap_or(min.y).clamp(min.y, max.y), centre.z);
                let up = (size.y * 0.15).max(radius * 0.02);
                let close = clip(
                    (up * 0.01).max(1e-4),
                    Camera::look_at(
                        floor + Vec3::new(0.0, up, up * 0.8),
                        floor - Vec3::new(0.0, 0.0, up * 0.5),
                    ),
                );
                Some(Self {
                    keyframes: vec![
                        fixed(0.0, overview, false),
                        fixed(30.0, close, true),
                        fixed(120.0, close, false),
                    ],
                })
            }
            _ => None,
        }
    }
}

fn lerp(a: f32, b: f32, s: f32) -> f32 {
    a + (b - a) * s
}

/// Cubic Hermite basis weights `(h00, h10, h01, h11)` at `s` in `0..1`.
fn hermite_basis(s: f32) -> (f32, f32, f32, f32) {
    let s2 = s * s;
    let s3 = s2 * s;
    (2.0 * s3 - 3.0 * s2 + 1.0, s3 - 2.0 * s2 + s, -2.0 * s3 + 3.0 * s2, s3 - s2)
}

/// serde_json's message without its trailing " at line L column C", which the error reports itself.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).map_or(text.clone(), str::to_owned)
}

/// Presets look at the ground, so the near plane can be close for the low shots.
fn preset_camera(position: Vec3, target: Vec3, fov_y_degrees: f32, near: f32) -> Camera {
    Camera { fov_y_degrees, near, far: 20.0, ..Camera::look_at(position, target) }
}

fn static_camera() -> Camera {
    // 60° above the horizon, 1.3 from the ground centre: at 16:9 about 93% of the ground is on
    // screen and covers about 80% of it.
    let elevation = 60.0_f32.to_radians();
    let distance = 1.3;
    let position = Vec3::new(0.0, distance * elevation.sin(), distance * elevation.cos());
    preset_camera(position, Vec3::ZERO, 45.0, 0.01)
}

fn flyover() -> CameraPath {
    // Along z = 0.4, outside the globe (|z| <= 0.25) and cube (|z| <= 0.15), looking ahead and
    // across the ground towards -z with a shallow pitch.
    let look = Vec3::new(0.6, -0.1, -0.35);
    let stops = [(0.0, -1.0, 0.13), (60.0, -0.2, 0.09), (120.0, 0.6, 0.12)];
    let keyframes = stops
        .iter()
        .map(|&(frame, x, y)| {
            let position = Vec3::new(x, y, 0.4);
            Keyframe { frame, camera: preset_camera(position, position + look, 50.0, 0.002), cut: false }
        })
        .collect();
    CameraPath { keyframes }
}

fn orbit() -> CameraPath {
    const FRAMES: u32 = 120;
    const STEPS: u32 = 24;
    let target = Vec3::new(0.0, 0.1, 0.0);
    let keyframes = (0..=STEPS)
        .map(|i| {
            let angle = std::f32::consts::TAU * i as f32 / STEPS as f32;
            let position = Vec3::new(1.4 * angle.sin(), 0.8, 1.4 * angle.cos());
            let frame = (FRAMES * i / STEPS) as f32;
            Keyframe { frame, camera: preset_camera(position, target, 45.0, 0.01), cut: false }
        })
        .collect();
    CameraPath { keyframes }
}

fn cut() -> CameraPath {
    let wide_start = preset_camera(Vec3::new(-0.1, 1.3, 1.0), Vec3::new(0.0, 0.0, 0.0), 45.0, 0.01);
    let wide_end = preset_camera(Vec3::new(0.05, 1.2, 0.9), Vec3::new(0.05, 0.0, 0.0), 45.0, 0.01);
    // About 0.13 from the ground near the (+x, -z) corner, away from the cube.
    let close = preset_camera(Vec3::new(0.7, 0.06, -0.2), Vec3::new(0.75, 0.0, -0.3), 45.0, 0.002);
    CameraPath {
        keyframes: vec![
            Keyframe { frame: 0.0, camera: wide_start, cut: false },
            Keyframe { frame: 29.0, camera: wide_end, cut: false },
            Keyframe { frame: 30.0, camera: close, cut: true },
            Keyframe { frame: 120.0, camera: close, cut: false },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene;
    use glam::Vec4;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn cam(x: f32) -> Camera {
        Camera::look_at(Vec3::new(x, 1.0, 2.0), Vec3::new(x, 0.0, 0.0))
    }

    /// A camera moving 0.5 per frame along x is predicted 8 frames on at +4; a still
    /// one predicts itself; the lens is kept.
    #[test]
    fn extrapolation_carries_the_motion_on() {
        let (before, now) = (cam(1.0), Camera { fov_y_degrees: 30.0, ..cam(1.5) });
        let ahead = now.extrapolated(&before, 8.0);
        assert_eq!(ahead.position, Vec3::new(5.5, 1.0, 2.0));
        assert_eq!(ahead.target, Vec3::new(5.5, 0.0, 0.0));
        assert_eq!(ahead.fov_y_degrees, 30.0);
        assert_eq!(now.extrapolated(&now, 8.0), now);
        // Zooming in at 0.5 a frame from 2.0 away: carried on at most 1.0, not past the target.
        let (far, near) = (
            Camera::look_at(Vec3::new(0.0, 0.0, 2.5), Vec3::ZERO),
            Camera::look_at(Vec3::new(0.0, 0.0, 2.0), Vec3::ZERO),
        );
        let ahead = near.extrapolated(&far, 8.0);
        assert!((ahead.position.z - 1.0).abs() < 1e-6, "{ahead:?}");
    }

    fn path_with_cut() -> CameraPath {
        CameraPath {
            keyframes: vec![
                Keyframe { frame: 0.0, camera: cam(0.0), cut: false },
                Keyframe { frame: 20.0, camera: cam(1.0), cut: false },
                Keyframe { frame: 50.0, camera: cam(1.5), cut: false },
                Keyframe { frame: 60.0, camera: cam(10.0), cut: true },
                Keyframe { frame: 90.0, camera: cam(11.0), cut: false },
            ],
        }
    }

    #[test]
    fn json_round_trip() {
        for name in PRESETS.iter().copied() {
            let path = CameraPath::preset(name).unwrap();
            let back = CameraPath::from_json_str(&path.to_json()).unwrap();
            assert_eq!(back, path, "{name}");
        }
        let path = path_with_cut();
        assert_eq!(CameraPath::from_json_str(&path.to_json()).unwrap(), path);
    }

    /// A material scene of one mesh filling the box `min..max`, with a floor.
    fn boxed_scene(min: Vec3, max: Vec3) -> MaterialScene {
        let ground = scene::Mesh {
            vertices: [(min.x, min.z), (max.x, min.z), (max.x, max.z), (min.x, max.z)]
                .map(|(x, z)| scene::Vertex {
                    position: [x, min.y, z],
                    normal: [0.0, 1.0, 0.0],
                    uv: [0.0, 0.0],
                })
                .into(),
            indices: vec![0, 2, 1, 0, 3, 2],
        };
        MaterialScene {
            meshes: vec![crate::scene::material_scene::SceneMesh {
                name: "box".into(),
                mesh: ground,
                material: 0,
            }],
            materials: vec![Default::default()],
            default_material: None,
            bounds_min: min,
            bounds_max: max,
            sun_direction: None,
            source: PathBuf::from("box.gltf"),
            paths: Default::default(),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn for_scene_picks_the_presets_of_the_scene_kind() {
        // The built-in meshes: their presets, static when still, flyover on tour.
        assert_eq!(
            CameraPath::for_scene(None, None, Shot::Still).unwrap(),
            CameraPath::preset("static").unwrap()
        );
        assert_eq!(
            CameraPath::for_scene(None, None, Shot::Tour).unwrap(),
            CameraPath::preset("flyover").unwrap()
        );
        assert_eq!(
            CameraPath::for_scene(Some("orbit"), None, Shot::Tour).unwrap(),
            CameraPath::preset("orbit").unwrap()
        );
        let e = CameraPath::for_scene(Some("walk"), None, Shot::Still).unwrap_err();
        assert!(e.to_string().contains("static, flyover, orbit, cut"), "{e}");
        // A flat level is walked through, an object flown around.
        let level = boxed_scene(Vec3::new(-20.0, 0.0, -10.0), Vec3::new(20.0, 4.0, 10.0));
        let object = boxed_scene(Vec3::splat(-1.0), Vec3::splat(1.0));
        assert_eq!(CameraPath::default_preset(Some(&level), Shot::Tour), "walk");
        assert_eq!(CameraPath::default_preset(Some(&object), Shot::Tour), "fly");
        assert_eq!(CameraPath::default_preset(Some(&object), Shot::Still), "overview");
        let walk = CameraPath::for_scene(None, Some(&level), Shot::Tour).unwrap();
        assert_eq!(
            walk,
            CameraPath::scene_preset("walk", level.bounds_min, level.bounds_max, Some(0.0)).unwrap()
        );
        let e = CameraPath::for_scene(Some("flyover"), Some(&level), Shot::Still).unwrap_err();
        assert!(e.to_string().contains("overview, walk, fly, cut"), "{e}");
        assert_eq!(CameraPath::preset_names(Some(&level)), SCENE_PRESETS);
        // A file is read whatever the scene.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cam.json");
        let orbit = CameraPath::preset("orbit").unwrap();
        orbit.save(&file).unwrap();
        let spec = file.to_str().unwrap();
        assert_eq!(CameraPath::for_scene(Some(spec), Some(&level), Shot::Still).unwrap(), orbit);
    }

    #[test]
    fn random_cuts_are_valid_and_repeatable() {
        let (min, max) = (Vec3::new(-1.0, 0.0, -0.5), Vec3::new(1.0, 0.0, 0.5));
        let a = CameraPath::random_cuts(7, 50, 6, min, max);
        a.validate().unwrap();
        assert_eq!(a.keyframes.len(), 50);
        assert_eq!(a.end_frame(), 49 * 6);
        assert!(a.keyframes.iter().skip(1).all(|k| k.cut));
        for k in &a.keyframes {
            let c = k.camera;
            assert!(c.position.y > 0.0 && c.near > 0.0 && c.far > c.near, "{c:?}");
            assert!(c.target.x >= min.x && c.target.x <= max.x && c.target.z >= min.z && c.target.z <= max.z);
        }
        let b = CameraPath::random_cuts(7, 50, 6, min, max);
        assert_eq!(a.keyframes, b.keyframes);
        assert_ne!(a.keyframes, CameraPath::random_cuts(8, 50, 6, min, max).keyframes);
    }

    #[test]
    fn scene_presets_see_the_box() {
        let (min, max) = (Vec3::new(-10.0, 0.0, -4.0), Vec3::new(12.0, 5.0, 6.0));
        let centre = (min + max) * 0.5;
        for name in SCENE_PRESETS.iter().copied() {
            let path = CameraPath::scene_preset(name, min, max, Some(1.0)).unwrap();
            path.validate().unwrap();
            for f in 0..path.end_frame() {
                let c = path.camera_at(f);
                assert!(c.position.is_finite() && c.near > 0.0 && c.far > c.near, "{name} {f}");
                // The centre of the box lies inside the far plane.
                assert!(c.position.distance(centre) < c.far, "{name} {f}");
            }
        }
        // The overview sees all eight corners.
        let c = CameraPath::scene_preset("overview", min, max, None).unwrap().camera_at(0);
        let vp = c.view_projection(16.0 / 9.0);
        for i in 0..8 {
            let p = Vec3::new(
                if i & 1 == 0 { min.x } else { max.x },
                if i & 2 == 0 { min.y } else { max.y },
                if i & 4 == 0 { min.z } else { max.z },
            );
            let q = vp * p.extend(1.0);
            let ndc = q.truncate() / q.w;
            assert!(q.w > 0.0 && ndc.x.abs() <= 1.0 && ndc.y.abs() <= 1.0, "corner {p} at {ndc}");
        }
        assert!(CameraPath::scene_preset("nope", min, max, None).is_none());
        assert!(CameraPath::scene_preset("overview", min, min, None).is_none());
        // The walk keeps eye height above the floor.
        let walk = CameraPath::scene_preset("walk", min, max, Some(1.0)).unwrap();
        assert!((walk.camera_at(10).position.y - 2.5).abs() < 1e-4);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cut.json");
        let path = path_with_cut();
        path.save(&file).unwrap();
        assert_eq!(CameraPath::load(&file).unwrap(), path);
        let err = CameraPath::load(dir.path().join("missing.json")).unwrap_err();
        assert!(matches!(err, CameraError::Io { .. }));
        assert!(err.to_string().contains("missing.json"), "{err}");
    }

    #[test]
    fn documented_example_parses_with_defaults() {
        let json = r#"{
  "keyframes": [
    { "frame": 0, "camera": { "position": [0, 1.2, 1.0], "target": [0, 0, 0] } },
    { "frame": 60, "camera": { "position": [0, 0.6, 0.5], "target": [0, 0, 0], "fov_y_degrees": 40 } },
    { "frame": 61, "cut": true,
      "camera": { "position": [0.7, 0.06, -0.2], "target": [0.75, 0, -0.3], "near": 0.002 } }
  ]
}"#;
        let path = CameraPath::from_json_str(json).unwrap();
        assert_eq!(path.keyframes.len(), 3);
        assert!(path.keyframes[2].cut && !path.keyframes[0].cut);
        assert_eq!(path.keyframes[0].camera.up, Vec3::Y);
        assert_eq!(path.keyframes[0].camera.fov_y_degrees, 45.0);
        assert_eq!(path.keyframes[2].camera.near, 0.002);
        assert_eq!(path.keyframes[2].camera.far, 100.0);
        assert_eq!(path.end_frame(), 61);
    }

    #[test]
    fn hits_keyframes_exactly() {
        let path = path_with_cut();
        for k in &path.keyframes {
            assert_eq!(path.camera_at(k.frame as u32), k.camera, "frame {}", k.frame);
        }
        let orbit = CameraPath::preset("orbit").unwrap();
        for k in &orbit.keyframes {
            assert_eq!(orbit.sample(k.frame), k.camera);
        }
    }

    #[test]
    fn clamps_outside_the_keyframes() {
        let mut path = path_with_cut();
        for k in &mut path.keyframes {
            k.frame += 10.0;
        }
        assert_eq!(path.camera_at(0), path.keyframes[0].camera);
        assert_eq!(path.sample(f32::NAN), path.keyframes[0].camera);
        assert_eq!(path.camera_at(1000), path.keyframes[4].camera);
        assert_eq!(CameraPath::default().camera_at(5), Camera::default());
    }

    #[test]
    fn two_keyframes_move_at_constant_speed() {
        let path = CameraPath {
            keyframes: vec![
                Keyframe { frame: 0.0, camera: cam(0.0), cut: false },
                Keyframe { frame: 10.0, camera: cam(1.0), cut: false },
            ],
        };
        for f in 0..=10 {
            let x = path.camera_at(f).position.x;
            assert!((x - f as f32 / 10.0).abs() < 1e-5, "frame {f}: {x}");
        }
    }

    #[test]
    fn cut_is_discontinuous_only_at_the_cut_frame() {
        let path = path_with_cut();
        let mut jumps = Vec::new();
        for f in 0..100 {
            let (a, b) = (path.camera_at(f), path.camera_at(f + 1));
            let step = a.position.distance(b.position).max(a.target.distance(b.target));
            if step > 0.2 {
                jumps.push(f + 1);
            }
        }
        assert_eq!(jumps, vec![60]);
        // Frames before the cut hold the keyframe before it.
        assert_eq!(path.camera_at(55), path.keyframes[2].camera);
        assert_eq!(path.sample(59.999), path.keyframes[2].camera);
        assert_eq!(path.camera_at(60), path.keyframes[3].camera);
        assert!(path.sample(60.5).position.x > 10.0);

        let preset = CameraPath::preset("cut").unwrap();
        let jump = preset.camera_at(29).position.distance(preset.camera_at(30).position);
        assert!(jump > 0.5, "{jump}");
        for f in (0..29).chain(30..130) {
            let step = preset.camera_at(f).position.distance(preset.camera_at(f + 1).position);
            assert!(step < 0.05, "frame {f}: step {step}");
        }
    }

    #[test]
    fn bad_json_errors_name_the_problem() {
        let err = |json: &str| CameraPath::from_json_str(json).unwrap_err().to_string();

        let e = err("{\n  \"keyframes\": [\n    { \"frame\": 0, }\n  ]\n}");
        assert!(e.starts_with("<string>: invalid camera path JSON at line 3, column"), "{e}");
        assert!(!e.ends_with("column 19"), "position reported twice: {e}");

        let e = err(r#"{"keyframes": []}"#);
        assert_eq!(e, "<string>: camera path has no keyframes");

        let e = err(r#"{"keyframes": [{"frame": 0, "camera": {"postion": [0,1,2], "target": [0,0,0]}}]}"#);
        assert!(e.contains("unknown field `postion`"), "{e}");

        let e = err(r#"{"keyframes": [{"frame": 0, "camera": {"position": [0,1,2]}}]}"#);
        assert!(e.contains("missing field `target`"), "{e}");

        // Numbers past f32 are refused where they stand (serde_json's exact float parsing,
        // which the atlas metadata's geotransforms need, reports them as out of range).
        let e =
            err(r#"{"keyframes": [{"frame": 0, "camera": {"position": [0,1e39,2], "target": [0,0,0]}}]}"#);
        assert!(e.ends_with("at line 1, column 58: number out of range"), "{e}");

        let e =
            err(r#"{"keyframes": [{"frame": 1e39, "camera": {"position": [0,1,2], "target": [0,0,0]}}]}"#);
        assert!(e.contains("at line 1, column ") && e.ends_with("number out of range"), "{e}");

        let two = r#"{"keyframes": [
            {"frame": 10, "camera": {"position": [0,1,2], "target": [0,0,0]}},
            {"frame": 5, "camera": {"position": [0,1,2], "target": [0,0,0]}}]}"#;
        assert_eq!(err(two), "<string>: keyframe 1 is at frame 5, not after keyframe 0 at frame 10");

        let e = err(r#"{"keyframes": [{"frame": 0, "camera": {"position": [0,1,0], "target": [0,0,0]}}]}"#);
        assert!(e.contains("camera.up") && e.contains("parallel"), "{e}");

        let e = err(
            r#"{"keyframes": [{"frame": 0, "camera": {"position": [0,1,2], "target": [0,0,0], "near": 0}}]}"#,
        );
        assert!(e.contains("camera.near 0 is not positive"), "{e}");
    }

    /// Whether `p` lies inside the view volume.
    fn in_view(vp: Mat4, p: Vec3) -> bool {
        let c = vp * Vec4::new(p.x, p.y, p.z, 1.0);
        let n = c.truncate() / c.w;
        c.w > 0.0 && n.x.abs() <= 1.0 && n.y.abs() <= 1.0 && (0.0..=1.0).contains(&n.z)
    }

    /// Fractions of the screen covered by the ground plane, and of the ground plane on screen.
    fn ground_coverage(vp: Mat4, hx: f32, hz: f32) -> (f32, f32) {
        let inv = vp.inverse();
        let (w, h) = (64, 36);
        let mut screen_hits = 0;
        for (i, j) in (0..w).flat_map(|i| (0..h).map(move |j| (i, j))) {
            let (x, y) = ((i as f32 + 0.5) / w as f32 * 2.0 - 1.0, (j as f32 + 0.5) / h as f32 * 2.0 - 1.0);
            let near = inv.project_point3(Vec3::new(x, y, 0.0));
            let far = inv.project_point3(Vec3::new(x, y, 1.0));
            if near.y > 0.0 && far.y < 0.0 {
                let hit = near + (far - near) * (near.y / (near.y - far.y));
                screen_hits += usize::from(hit.x.abs() <= hx && hit.z.abs() <= hz);
            }
        }
        let n = 40;
        let mut ground_hits = 0;
        for (i, j) in (0..n).flat_map(|i| (0..n).map(move |j| (i, j))) {
            let x = ((i as f32 + 0.5) / n as f32 * 2.0 - 1.0) * hx;
            let z = ((j as f32 + 0.5) / n as f32 * 2.0 - 1.0) * hz;
            ground_hits += usize::from(in_view(vp, Vec3::new(x, 0.0, z)));
        }
        (screen_hits as f32 / (w * h) as f32, ground_hits as f32 / (n * n) as f32)
    }

    #[test]
    fn presets_give_finite_matrices() {
        for name in PRESETS.iter().copied() {
            let path = CameraPath::preset(name).unwrap();
            path.validate().unwrap();
            for f in 0..=200 {
                let c = path.camera_at(f);
                for aspect in [16.0 / 9.0, 2.0] {
                    let m = c.view_projection(aspect);
                    assert!(m.is_finite(), "{name} frame {f}: {m}");
                }
                assert!(c.problem().is_none(), "{name} frame {f}: {:?}", c.problem());
            }
        }
        assert!(CameraPath::preset("nope").is_none());
    }

    #[test]
    fn presets_frame_the_builtin_scene() {
        let aspect = 16.0 / 9.0;
        let (hx, hz) = scene::PRESET_GROUND_HALF_EXTENTS;
        let ground_center = Vec3::ZERO;
        let objects = [scene::GLOBE_CENTER, scene::CUBE_CENTER];

        let vp = CameraPath::preset("static").unwrap().camera_at(0).view_projection(aspect);
        for p in objects.into_iter().chain([ground_center]) {
            assert!(in_view(vp, p), "static: {p} off screen");
        }
        // Most of the plane: the far corners and near edge's middle are visible.
        for p in [Vec3::new(-0.8, 0.0, -hz), Vec3::new(0.8, 0.0, -hz), Vec3::new(0.0, 0.0, hz)] {
            assert!(in_view(vp, p), "static: {p} off screen");
        }
        let (screen, ground) = ground_coverage(vp, hx, hz);
        assert!(
            screen > 0.75 && ground > 0.85,
            "static: ground covers {screen} of the screen, {ground} visible"
        );

        let orbit = CameraPath::preset("orbit").unwrap();
        for f in 0..=120 {
            let vp = orbit.camera_at(f).view_projection(aspect);
            for p in objects {
                assert!(in_view(vp, p), "orbit frame {f}: {p} off screen");
            }
        }
        assert_eq!(orbit.end_frame(), 120);

        // The flyover stays low, above the ground and clear of the objects.
        let fly = CameraPath::preset("flyover").unwrap();
        for f in 0..=120 {
            let p = fly.camera_at(f).position;
            assert!((0.08..=0.15).contains(&p.y), "flyover frame {f}: height {}", p.y);
            assert!(p.distance(scene::GLOBE_CENTER) > scene::GLOBE_RADIUS + 0.05, "frame {f}: {p}");
            let d = (p - scene::CUBE_CENTER).abs() - Vec3::splat(scene::CUBE_SIDE / 2.0);
            assert!(d.max_element() > 0.05, "flyover frame {f}: {p} inside the cube");
        }
        let travel = fly.camera_at(120).position.x - fly.camera_at(0).position.x;
        assert!(travel > 1.0, "{travel}");

        // The cut's close-up is close to the ground, far from where the wide shot looked.
        let cut = CameraPath::preset("cut").unwrap();
        let close = cut.camera_at(30);
        assert!(close.position.distance(close.target) < 0.2);
        assert!(close.target.y == 0.0 && close.target.x.abs() <= hx && close.target.z.abs() <= hz);
        assert!(close.target.distance(cut.camera_at(0).target) > 0.5);
        assert_eq!(cut.camera_at(200), close);
    }
}
