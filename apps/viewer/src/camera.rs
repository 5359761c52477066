//! The viewer's camera rig: fly (WASD + mouse look) and orbit around a pivot, one state.

use glam::Vec3;
use tessera::core::camera::Camera;

/// How mouse drags and movement keys move the camera.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Move the eye; dragging turns the view.
    Fly,
    /// Dragging turns the eye around the pivot `distance` ahead of it.
    Orbit,
}

/// Eye position, heading and pitch, and the distance to the orbit pivot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rig {
    pub(crate) mode: Mode,
    position: Vec3,
    yaw: f32,
    pitch: f32,
    distance: f32,
    base: Camera,
}

const PITCH_LIMIT: f32 = 1.54;

impl Rig {
    /// A rig showing what `c` shows, pivoting around its target.
    pub(crate) fn from_camera(c: &Camera, mode: Mode) -> Self {
        let d = c.target - c.position;
        let distance = d.length().max(1e-3);
        let dir = d / distance;
        Self {
            mode,
            position: c.position,
            yaw: dir.z.atan2(dir.x),
            pitch: dir.y.clamp(-1.0, 1.0).asin(),
            distance,
            base: *c,
        }
    }

    fn forward(&self) -> Vec3 {
        Vec3::new(self.yaw.cos() * self.pitch.cos(), self.pitch.sin(), self.yaw.sin() * self.pitch.cos())
    }

    /// The camera to render with.
    pub(crate) fn camera(&self) -> Camera {
        Camera {
            position: self.position,
            target: self.position + self.forward() * self.distance,
            up: Vec3::Y,
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
                self.distance = (self.distance * 0.9f32.powf(steps)).clamp(0.02, 50.0);
                self.position = pivot - self.forward() * self.distance;
            }
            Mode::Fly => self.position += self.forward() * steps * 0.1,
        }
    }

    /// Moves by `(right, up, forward)` units along the view axes.
    pub(crate) fn translate(&mut self, right: f32, up: f32, forward: f32) {
        let f = self.forward();
        let r = f.cross(Vec3::Y).normalize_or_zero();
        self.position += r * right + Vec3::Y * up + f * forward;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rig_reproduces_the_camera_and_orbit_keeps_the_pivot() {
        let c = Camera::look_at(Vec3::new(0.0, 1.0, 2.0), Vec3::ZERO);
        let mut rig = Rig::from_camera(&c, Mode::Orbit);
        let back = rig.camera();
        assert!(back.position.distance(c.position) < 1e-5 && back.target.distance(c.target) < 1e-4);
        rig.drag(120.0, -40.0);
        rig.zoom(2.0);
        let moved = rig.camera();
        assert!(moved.target.distance(Vec3::ZERO) < 1e-4, "{moved:?}");
        assert!(moved.position.distance(c.position) > 0.1);
    }
}
