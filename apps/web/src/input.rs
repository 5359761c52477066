//! The page's input, from DOM events to egui and the camera: [`InputEvent`] is what
//! the browser reported (the page's listeners collect them between frames), and
//! [`InputRouter`] turns a frame's worth into egui's events and the camera's moves.
//! egui sees every event; a drag that starts over the overlay, a wheel over it and
//! keys while it edits text are its own, everything else moves the camera.

use std::collections::HashSet;

use egui::{Event, Key, Modifiers, MouseWheelUnit, PointerButton, Pos2, Vec2};

/// How a wheel event measures its delta (`WheelEvent.deltaMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WheelUnit {
    /// CSS pixels (mode 0).
    Pixel,
    /// Lines (mode 1).
    Line,
    /// Pages (mode 2).
    Page,
}

impl WheelUnit {
    /// The unit of `WheelEvent.deltaMode` `mode` (an unknown mode counts as pixels).
    pub fn of_mode(mode: u32) -> Self {
        match mode {
            1 => Self::Line,
            2 => Self::Page,
            _ => Self::Pixel,
        }
    }

    /// Zoom steps (one per notch of a common mouse wheel) for a delta of `dy` in this unit.
    fn steps(self, dy: f32) -> f32 {
        match self {
            Self::Pixel => dy / 100.0,
            Self::Line => dy / 3.0,
            Self::Page => dy,
        }
    }
}

/// One DOM event, in CSS pixels relative to the canvas' top-left corner.
#[derive(Clone, Debug, PartialEq)]
pub enum InputEvent {
    /// `pointermove`.
    PointerMove {
        /// Where the pointer is.
        pos: [f32; 2],
    },
    /// `pointerdown` / `pointerup`: `button` as `PointerEvent.button` numbers it (0 main,
    /// 1 middle, 2 secondary).
    PointerButton {
        /// Where the pointer is.
        pos: [f32; 2],
        /// `PointerEvent.button`.
        button: i16,
        /// Down (true) or up.
        pressed: bool,
        /// The modifier keys held.
        modifiers: Modifiers,
    },
    /// `pointerleave`: the pointer left the canvas.
    PointerLeave,
    /// `wheel`, deltas as the browser gives them (positive y: scrolled down).
    Wheel {
        /// `(deltaX, deltaY)`.
        delta: [f32; 2],
        /// `deltaMode`.
        unit: WheelUnit,
        /// The modifier keys held.
        modifiers: Modifiers,
    },
    /// `keydown` / `keyup`.
    Key {
        /// `KeyboardEvent.code`: the physical key (`KeyW`, `Digit1`, `ShiftLeft`…).
        code: String,
        /// `KeyboardEvent.key`: what the key types or its name (`w`, `Enter`…).
        key: String,
        /// Down (true) or up.
        pressed: bool,
        /// An auto-repeated keydown.
        repeat: bool,
        /// The modifier keys held.
        modifiers: Modifiers,
    },
    /// The page lost focus (`blur`): keys and buttons held are let go.
    Blur,
}

/// What a drag on the canvas does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drag {
    /// Started over the overlay: egui's.
    Egui,
    /// The main button: pan over the plane.
    Pan,
    /// The secondary or middle button: turn around the point looked at.
    Turn,
}

/// The camera's share of a frame's input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CameraInput {
    /// Panning drags, CSS pixels.
    pub pan: [f32; 2],
    /// Turning drags, CSS pixels.
    pub turn: [f32; 2],
    /// Wheel steps towards the view (positive: zoom in).
    pub zoom: f32,
    /// Keys pressed this frame (not auto-repeats), by `KeyboardEvent.code`.
    pub pressed: Vec<String>,
}

impl CameraInput {
    /// Whether the pointer moved the camera.
    pub fn moved(&self) -> bool {
        self.pan != [0.0; 2] || self.turn != [0.0; 2] || self.zoom != 0.0
    }
}

/// Routes DOM events to egui and the camera, remembering the drag under way and the
/// keys held.
#[derive(Debug, Default)]
pub struct InputRouter {
    drag: Option<Drag>,
    last_pos: Option<[f32; 2]>,
    keys_down: HashSet<String>,
    modifiers: Modifiers,
}

impl InputRouter {
    /// Splits `events` between egui (all of them, as egui events) and the camera: a
    /// drag that starts where egui wants the pointer (`egui_pointer`, from the last
    /// frame) and a wheel there stay egui's, and so do keys while egui wants the keyboard
    /// (`egui_keyboard`: a text field has focus).
    pub fn route(
        &mut self,
        events: &[InputEvent],
        egui_pointer: bool,
        egui_keyboard: bool,
    ) -> (Vec<Event>, CameraInput) {
        let mut egui_events = Vec::with_capacity(events.len());
        let mut camera = CameraInput::default();
        for event in events {
            match event {
                InputEvent::PointerMove { pos } => {
                    if let (Some(drag), Some(last)) = (self.drag, self.last_pos) {
                        let sum = match drag {
                            Drag::Pan => Some(&mut camera.pan),
                            Drag::Turn => Some(&mut camera.turn),
                            Drag::Egui => None,
                        };
                        if let Some(sum) = sum {
                            sum[0] += pos[0] - last[0];
                            sum[1] += pos[1] - last[1];
                        }
                    }
                    self.last_pos = Some(*pos);
                    egui_events.push(Event::PointerMoved(pos2(*pos)));
                }
                InputEvent::PointerButton { pos, button, pressed, modifiers } => {
                    self.set_modifiers(*modifiers, &mut egui_events);
                    self.last_pos = Some(*pos);
                    if *pressed {
                        self.drag = Some(match button {
                            _ if egui_pointer => Drag::Egui,
                            0 => Drag::Pan,
                            _ => Drag::Turn,
                        });
                    } else {
                        self.drag = None;
                    }
                    let button = match button {
                        0 => Some(PointerButton::Primary),
                        1 => Some(PointerButton::Middle),
                        2 => Some(PointerButton::Secondary),
                        3 => Some(PointerButton::Extra1),
                        4 => Some(PointerButton::Extra2),
                        _ => None,
                    };
                    if let Some(button) = button {
                        egui_events.push(Event::PointerButton {
                            pos: pos2(*pos),
                            button,
                            pressed: *pressed,
                            modifiers: *modifiers,
                        });
                    }
                }
                InputEvent::PointerLeave => {
                    if self.drag.is_none() {
                        self.last_pos = None;
                    }
                    egui_events.push(Event::PointerGone);
                }
                InputEvent::Wheel { delta, unit, modifiers } => {
                    self.set_modifiers(*modifiers, &mut egui_events);
                    if !egui_pointer {
                        camera.zoom -= unit.steps(delta[1]);
                    }
                    egui_events.push(Event::MouseWheel {
                        unit: match unit {
                            WheelUnit::Pixel => MouseWheelUnit::Point,
                            WheelUnit::Line => MouseWheelUnit::Line,
                            WheelUnit::Page => MouseWheelUnit::Page,
                        },
                        delta: Vec2::new(-delta[0], -delta[1]),
                        phase: egui::TouchPhase::Move,
                        source: egui::MouseWheelSource::Wheel,
                        modifiers: *modifiers,
                    });
                }
                InputEvent::Key { code, key, pressed, repeat, modifiers } => {
                    self.set_modifiers(*modifiers, &mut egui_events);
                    if !*pressed {
                        self.keys_down.remove(code);
                    } else if !egui_keyboard {
                        if !*repeat {
                            camera.pressed.push(code.clone());
                        }
                        self.keys_down.insert(code.clone());
                    }
                    if let Some(logical) = Key::from_name(key) {
                        egui_events.push(Event::Key {
                            key: logical,
                            physical_key: physical_key(code),
                            pressed: *pressed,
                            repeat: *repeat,
                            modifiers: *modifiers,
                        });
                    }
                    if *pressed && key.chars().count() == 1 && !modifiers.ctrl && !modifiers.mac_cmd {
                        egui_events.push(Event::Text(key.clone()));
                    }
                }
                InputEvent::Blur => {
                    self.keys_down.clear();
                    self.drag = None;
                    self.set_modifiers(Modifiers::default(), &mut egui_events);
                    egui_events.push(Event::WindowFocused(false));
                }
            }
        }
        (egui_events, camera)
    }

    /// Whether the key `code` (`KeyboardEvent.code`) is held for the camera.
    pub fn held(&self, code: &str) -> bool {
        self.keys_down.contains(code)
    }

    /// Tells egui when the modifier keys held change.
    fn set_modifiers(&mut self, modifiers: Modifiers, egui_events: &mut Vec<Event>) {
        if modifiers != self.modifiers {
            self.modifiers = modifiers;
            egui_events.push(Event::ModifiersChanged(modifiers));
        }
    }
}

fn pos2(p: [f32; 2]) -> Pos2 {
    Pos2::new(p[0], p[1])
}

/// egui's key for the physical key `code` (`KeyW` → W, `Digit1` → 1, `ArrowUp`…).
fn physical_key(code: &str) -> Option<Key> {
    let name = code.strip_prefix("Key").or_else(|| code.strip_prefix("Digit")).unwrap_or(code);
    Key::from_name(name)
}

/// The modifiers of a DOM event's `altKey`, `ctrlKey`, `shiftKey` and `metaKey`.
pub fn modifiers(alt: bool, ctrl: bool, shift: bool, meta: bool) -> Modifiers {
    Modifiers { alt, ctrl, shift, mac_cmd: meta, command: ctrl || meta }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn button(x: f32, button: i16, pressed: bool) -> InputEvent {
        InputEvent::PointerButton { pos: [x, 10.0], button, pressed, modifiers: Modifiers::default() }
    }

    fn key(code: &str, key: &str, pressed: bool) -> InputEvent {
        InputEvent::Key {
            code: code.into(),
            key: key.into(),
            pressed,
            repeat: false,
            modifiers: Modifiers::default(),
        }
    }

    #[test]
    fn drags_pan_or_turn_unless_they_start_over_egui() {
        let mut router = InputRouter::default();
        let events = [
            button(10.0, 0, true),
            InputEvent::PointerMove { pos: [30.0, 5.0] },
            button(30.0, 0, false),
            button(30.0, 2, true),
            InputEvent::PointerMove { pos: [40.0, 5.0] },
            button(40.0, 2, false),
            InputEvent::PointerMove { pos: [90.0, 5.0] },
        ];
        let (egui_events, camera) = router.route(&events, false, false);
        assert_eq!(camera.pan, [20.0, -5.0]);
        assert_eq!(camera.turn, [10.0, -5.0]);
        assert_eq!(egui_events.len(), events.len(), "egui sees every event");

        let (_, camera) = router.route(&[button(0.0, 0, true)], true, false);
        assert!(!camera.moved());
        let (_, camera) = router.route(&[InputEvent::PointerMove { pos: [50.0, 50.0] }], false, false);
        assert!(!camera.moved(), "a drag that started over egui stays egui's");
    }

    #[test]
    fn the_wheel_zooms_outside_egui() {
        let mut router = InputRouter::default();
        let wheel =
            |dy: f32, unit| InputEvent::Wheel { delta: [0.0, dy], unit, modifiers: Modifiers::default() };
        let (egui_events, camera) =
            router.route(&[wheel(-200.0, WheelUnit::Pixel), wheel(3.0, WheelUnit::Line)], false, false);
        assert_eq!(camera.zoom, 2.0 - 1.0);
        assert!(matches!(egui_events[0], Event::MouseWheel { delta, .. } if delta.y == 200.0));
        let (_, camera) = router.route(&[wheel(-200.0, WheelUnit::Pixel)], true, false);
        assert_eq!(camera.zoom, 0.0);
    }

    #[test]
    fn keys_are_held_pressed_and_typed() {
        let mut router = InputRouter::default();
        let (egui_events, camera) =
            router.route(&[key("KeyW", "w", true), key("KeyH", "h", true)], false, false);
        assert!(router.held("KeyW"));
        assert_eq!(camera.pressed, ["KeyW", "KeyH"]);
        assert!(egui_events.contains(&Event::Text("w".into())));
        assert!(
            egui_events.iter().any(|e| matches!(
                e,
                Event::Key { key: Key::W, physical_key: Some(Key::W), pressed: true, .. }
            ))
        );
        router.route(&[key("KeyW", "w", false)], false, false);
        assert!(!router.held("KeyW"));
        // While egui edits text, keys are its own.
        let (_, camera) = router.route(&[key("KeyS", "s", true)], false, true);
        assert!(camera.pressed.is_empty() && !router.held("KeyS"));
        router.route(&[key("KeyD", "d", true), InputEvent::Blur], false, false);
        assert!(!router.held("KeyD"), "blur lets go of every key");
    }
}
