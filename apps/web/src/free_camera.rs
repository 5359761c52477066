//! The page's interactive camera (`?camera=free`): it looks at a point of the plane
//! from a distance, a heading and an elevation; dragging pans over the plane, the
//! right button turns around the point, the wheel zooms, keys move as in the native
//! viewer. Speeds scale with the distance, so it handles a whole-plane view and a
//! close-up alike.

use glam::Vec3;
use tessera::core::scene::camera::Camera;

use crate::plane::CameraPath;

/// Lowest and highest elevation of the eye above the plane, radians.
const ELEVATION: (f32, f32) = (0.05, 1.55);
/// Radians per pixel of a turning drag.
const TURN_PER_PIXEL: f32 = 0.005;
/// Distance per wheel step: `0.9^steps`.
const ZOOM_BASE: f32 = 0.9;
/// Nearest distance to the plane's point, world units (the plane is 2 deep).
const MIN_DISTANCE: f32 = 0.01;
/// Keyboard speed: distances per second across the plane, and the factor of Shift.
const SPEED: f32 = 1.0;
/// How much faster Shift moves.
pub const BOOST: f32 = 4.0;

/// A camera orbiting a point of a plane `2 × half_width` wide and 2 deep (the
/// [`crate::plane::PlaneScene`]'s), with the field of view of the camera paths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FreeCamera {
    /// The point looked at, on the plane (y = 0).
    target: Vec3,
    /// Eye to target, world units.
    distance: f32,
    /// Direction from the target to the eye in the plane, radians from +x towards +z.
    heading: f32,
    /// The eye's angle above the plane, radians.
    elevation: f32,
    half_width: f32,
    fov_y_degrees: f32,
}

impl FreeCamera {
    /// A free camera showing what `c` shows over a plane `half_width` wide (its target
    /// moved onto the plane and inside it).
    pub fn from_camera(c: &Camera, half_width: f32) -> Self {
        let half_width = if half_width.is_finite() && half_width > 0.0 { half_width } else { 1.0 };
        let target = Vec3::new(c.target.x, 0.0, c.target.z);
        let offset = c.position - target;
        let distance = offset.length().max(MIN_DISTANCE);
        let mut camera = Self {
            target,
            distance,
            heading: offset.z.atan2(offset.x),
            elevation: (offset.y / distance).clamp(-1.0, 1.0).asin(),
            half_width,
            fov_y_degrees: c.fov_y_degrees,
        };
        camera.clamp();
        camera
    }

    /// The camera at the start of `path` over a plane `half_width` wide.
    pub fn from_path(path: CameraPath, frame: u64, half_width: f32) -> Self {
        Self::from_camera(&path.camera(frame, half_width), half_width)
    }

    fn max_distance(&self) -> f32 {
        6.0 * self.half_width.max(1.0)
    }

    fn clamp(&mut self) {
        self.target.x = self.target.x.clamp(-self.half_width, self.half_width);
        self.target.z = self.target.z.clamp(-1.0, 1.0);
        self.target.y = 0.0;
        self.distance = self.distance.clamp(MIN_DISTANCE, self.max_distance());
        self.elevation = self.elevation.clamp(ELEVATION.0, ELEVATION.1);
    }

    /// From the target towards the eye, unit length.
    fn backward(&self) -> Vec3 {
        let (s, c) = self.elevation.sin_cos();
        Vec3::new(c * self.heading.cos(), s, c * self.heading.sin())
    }

    /// The view's forward and right directions along the plane.
    fn ground_axes(&self) -> (Vec3, Vec3) {
        let forward = -Vec3::new(self.heading.cos(), 0.0, self.heading.sin());
        (forward, forward.cross(Vec3::Y))
    }

    /// The camera to render with.
    pub fn camera(&self) -> Camera {
        let camera = Camera::look_at(self.target + self.backward() * self.distance, self.target);
        Camera {
            fov_y_degrees: self.fov_y_degrees,
            near: (self.distance * 0.01).clamp(1e-4, 0.01),
            far: (self.distance * 4.0).max(100.0),
            ..camera
        }
    }

    /// Pans by a drag of `(dx, dy)` CSS pixels in a view `height` pixels high: the
    /// plane follows the pointer (about: exactly at the point looked at).
    pub fn pan(&mut self, dx: f32, dy: f32, height: f32) {
        let visible = 2.0 * self.distance * (self.fov_y_degrees.to_radians() * 0.5).tan();
        let per_pixel = visible / height.max(1.0);
        // Seen at a slant, a pixel up the screen covers more of the plane.
        let slant = 1.0 / self.elevation.sin().max(0.25);
        let (forward, right) = self.ground_axes();
        self.target += (forward * dy * slant - right * dx) * per_pixel;
        self.clamp();
    }

    /// Turns around the point looked at by a drag of `(dx, dy)` pixels (down lowers the
    /// eye, as orbiting in the native viewer does).
    pub fn turn(&mut self, dx: f32, dy: f32) {
        self.heading += dx * TURN_PER_PIXEL;
        self.elevation -= dy * TURN_PER_PIXEL;
        self.clamp();
    }

    /// Moves towards the point looked at by `steps` wheel steps (negative: away).
    pub fn zoom(&mut self, steps: f32) {
        self.distance *= ZOOM_BASE.powf(steps);
        self.clamp();
    }

    /// Moves for `seconds` in the direction `(right, up, forward)` (components -1..1,
    /// as W A S D Q E give them): along the plane, and up or down, at a speed that
    /// scales with the distance, times `boost`.
    pub fn fly(&mut self, right: f32, up: f32, forward: f32, seconds: f32, boost: f32) {
        let step = SPEED * self.distance * seconds * boost;
        let (ahead, side) = self.ground_axes();
        self.target += (side * right + ahead * forward) * step;
        self.distance *= (up * SPEED * seconds * boost).exp();
        self.clamp();
    }
}

/// Which camera the page draws with (`?camera=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CameraChoice {
    /// A fixed path: the same frames every run, for the tests and benchmarks.
    Path(CameraPath),
    /// The interactive camera, starting at the static view (the default).
    Free,
}

impl CameraChoice {
    /// The choice named `name` (`free`, `static` or `fly`), or a message listing them.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "free" => Ok(Self::Free),
            other => CameraPath::parse(other).map(Self::Path).map_err(|_| {
                format!("unknown camera \"{other}\" (use camera=free, camera=static or camera=fly)")
            }),
        }
    }

    /// The choice's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Path(path) => path.name(),
            Self::Free => "free",
        }
    }
}

/// The keys that move the free camera and what they do, by `KeyboardEvent.code`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeldKeys {
    /// D minus A.
    pub right: f32,
    /// E minus Q.
    pub up: f32,
    /// W minus S.
    pub forward: f32,
    /// Shift is held.
    pub boost: bool,
}

impl HeldKeys {
    /// The keys `held` reports down (`held(code)`).
    pub fn of(held: impl Fn(&str) -> bool) -> Self {
        let k = |code: &str| if held(code) { 1.0 } else { 0.0 };
        Self {
            right: k("KeyD") - k("KeyA"),
            up: k("KeyE") - k("KeyQ"),
            forward: k("KeyW") - k("KeyS"),
            boost: held("ShiftLeft") || held("ShiftRight"),
        }
    }

    fn any(&self) -> bool {
        self.right != 0.0 || self.up != 0.0 || self.forward != 0.0
    }
}

/// The page's camera from frame to frame: a path, or the free camera with its views
/// (keys 1, 2 and C) and the flyover it can play (P).
#[derive(Clone, Debug)]
pub struct PageCamera {
    choice: CameraChoice,
    half_width: f32,
    free: FreeCamera,
    /// The views keys 1 and 2 jump to: the whole plane, the end of the flyover.
    views: [Camera; 2],
    view: usize,
    /// The flyover's frame while P plays it.
    playing: Option<u64>,
    /// The camera of the frame before, to tell whether it stands still.
    previous: Option<Camera>,
    still: bool,
}

impl PageCamera {
    /// The camera `choice` over a plane `half_width` wide.
    pub fn new(choice: CameraChoice, half_width: f32) -> Self {
        let views = [
            CameraPath::Static.camera(0, half_width),
            CameraPath::Fly.camera(CameraPath::FLY_FRAMES, half_width),
        ];
        Self {
            choice,
            half_width,
            free: FreeCamera::from_camera(&views[0], half_width),
            views,
            view: 0,
            playing: None,
            previous: None,
            still: false,
        }
    }

    /// The choice's name (`free`, `static`, `fly`).
    pub fn name(&self) -> &'static str {
        self.choice.name()
    }

    /// Whether the user moves this camera.
    pub fn is_free(&self) -> bool {
        self.choice == CameraChoice::Free
    }

    /// Acts on a key pressed (`KeyboardEvent.code`): views, cut, play. Other keys and
    /// a path camera ignore it.
    pub fn key(&mut self, code: &str) {
        if !self.is_free() {
            return;
        }
        let view = match code {
            "Digit1" => Some(0),
            "Digit2" => Some(1),
            "KeyC" => Some((self.view + 1) % self.views.len()),
            "KeyP" => {
                self.playing = Some(0);
                None
            }
            _ => None,
        };
        if let Some(i) = view {
            self.view = i;
            self.playing = None;
            self.free = FreeCamera::from_camera(&self.views[i], self.half_width);
        }
    }

    /// The camera of `frame`: the path's, or the free camera after this frame's drags
    /// and wheel (`pointer`, in a view `height` CSS pixels high) and the keys `keys`
    /// held for `seconds`. Any of those stops the flyover P plays.
    pub fn camera(
        &mut self,
        frame: u64,
        pointer: &crate::input::CameraInput,
        keys: HeldKeys,
        seconds: f32,
        height: f32,
    ) -> Camera {
        let camera = match self.choice {
            CameraChoice::Path(path) => path.camera(frame, self.half_width),
            CameraChoice::Free => {
                if pointer.moved() || keys.any() {
                    self.playing = None;
                }
                if let Some(f) = self.playing {
                    self.free = FreeCamera::from_path(CameraPath::Fly, f, self.half_width);
                    self.playing = (f < CameraPath::FLY_FRAMES).then_some(f + 1);
                }
                self.free.pan(pointer.pan[0], pointer.pan[1], height);
                self.free.turn(pointer.turn[0], pointer.turn[1]);
                self.free.zoom(pointer.zoom);
                let boost = if keys.boost { BOOST } else { 1.0 };
                self.free.fly(keys.right, keys.up, keys.forward, seconds, boost);
                self.free.camera()
            }
        };
        self.still = match self.choice {
            CameraChoice::Path(path) => frame >= path.still_from(),
            CameraChoice::Free => self.playing.is_none() && self.previous.is_none_or(|p| p == camera),
        };
        self.previous = Some(camera);
        camera
    }

    /// Whether the camera of the last frame stood still: a path from its last frame on,
    /// the free camera when it did not move since the frame before.
    pub fn still(&self) -> bool {
        self.still
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Vec3, b: Vec3) -> bool {
        a.distance(b) < 1e-3
    }

    #[test]
    fn a_free_camera_starts_where_the_path_is() {
        for (path, frame) in [(CameraPath::Static, 0), (CameraPath::Fly, CameraPath::FLY_FRAMES)] {
            let c = path.camera(frame, 2.0);
            let free = FreeCamera::from_camera(&c, 2.0).camera();
            assert!(close(free.position, c.position), "{path:?}: {free:?} vs {c:?}");
            assert!(close(free.target, c.target), "{path:?}: {free:?} vs {c:?}");
            assert_eq!(free.fov_y_degrees, c.fov_y_degrees);
        }
    }

    #[test]
    fn panning_zooming_and_turning_stay_over_the_plane() {
        let mut cam = FreeCamera::from_path(CameraPath::Static, 0, 2.0);
        let start = cam.camera();
        // Dragging right moves the view left over the plane.
        cam.pan(100.0, 0.0, 600.0);
        assert!(cam.camera().target.x < start.target.x, "{:?}", cam.camera());
        // A drag far beyond the plane stops at its edge.
        cam.pan(1e6, -1e6, 600.0);
        let t = cam.camera().target;
        assert!(t.x >= -2.0 && t.x <= 2.0 && t.z.abs() <= 1.0 && t.y == 0.0, "{t}");
        let d = |c: &FreeCamera| c.camera().position.distance(c.camera().target);
        let before = d(&cam);
        cam.zoom(3.0);
        assert!((d(&cam) - before * 0.9f32.powi(3)).abs() < 1e-4);
        cam.zoom(-1000.0);
        assert!((d(&cam) - 12.0).abs() < 1e-3, "zooming out stops: {}", d(&cam));
        cam.turn(0.0, 1e5);
        assert!(cam.camera().position.y > 0.0, "the eye stays above the plane");
        let target = cam.camera().target;
        cam.turn(300.0, 0.0);
        assert!(close(cam.camera().target, target), "turning keeps the point looked at");
    }

    #[test]
    fn the_page_camera_follows_its_path_or_the_user() {
        let input = crate::input::CameraInput::default();
        let mut fly = PageCamera::new(CameraChoice::Path(CameraPath::Fly), 2.0);
        let c = fly.camera(10, &input, HeldKeys::default(), 0.016, 600.0);
        assert_eq!(c, CameraPath::Fly.camera(10, 2.0));
        assert!(!fly.still());
        fly.camera(CameraPath::FLY_FRAMES, &input, HeldKeys::default(), 0.016, 600.0);
        assert!(fly.still());

        // Without input the free camera is the static view, and still.
        let mut free = PageCamera::new(CameraChoice::parse("free").expect("free"), 2.0);
        let c = free.camera(0, &input, HeldKeys::default(), 0.016, 600.0);
        assert!(close(c.position, CameraPath::Static.camera(0, 2.0).position));
        assert!(free.still());
        let drag = crate::input::CameraInput { pan: [40.0, 0.0], ..Default::default() };
        free.camera(1, &drag, HeldKeys::default(), 0.016, 600.0);
        assert!(!free.still());
        free.camera(2, &input, HeldKeys::default(), 0.016, 600.0);
        assert!(free.still());
        let keys = HeldKeys::of(|code| code == "KeyW");
        assert_eq!(keys.forward, 1.0);
        free.camera(3, &input, keys, 0.016, 600.0);
        assert!(!free.still());
        // 2 jumps to the end of the flyover; P plays it from the start.
        free.key("Digit2");
        let c = free.camera(4, &input, HeldKeys::default(), 0.016, 600.0);
        let end = CameraPath::Fly.camera(CameraPath::FLY_FRAMES, 2.0);
        assert!(close(c.position, end.position), "{c:?} vs {end:?}");
        free.key("KeyP");
        free.camera(5, &input, HeldKeys::default(), 0.016, 600.0);
        assert!(!free.still(), "playing");
        assert!(CameraChoice::parse("orbit").unwrap_err().contains("camera=free"));
    }

    #[test]
    fn keys_move_along_the_view_and_scale_with_the_distance() {
        let mut near = FreeCamera::from_path(CameraPath::Fly, CameraPath::FLY_FRAMES, 2.0);
        let mut far = near;
        far.zoom(-5.0);
        let (t_near, t_far) = (near.camera().target, far.camera().target);
        near.fly(0.0, 0.0, 1.0, 0.1, 1.0);
        far.fly(0.0, 0.0, 1.0, 0.1, 1.0);
        let moved = |c: &FreeCamera, t: Vec3| c.camera().target.distance(t);
        assert!(moved(&far, t_far) > moved(&near, t_near) * 1.5);
        let before = near.camera();
        near.fly(0.0, 1.0, 0.0, 0.5, BOOST);
        assert!(near.camera().position.y > before.position.y, "E moves up");
    }
}
