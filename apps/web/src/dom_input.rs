//! The page's input listeners (wasm32 only): pointer and wheel events on the canvas,
//! keys and focus on the window, queued as [`InputEvent`]s for the next frame.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::input::{InputEvent, WheelUnit, modifiers};

/// The events that arrived since the last frame took them.
pub(crate) type InputQueue = Rc<RefCell<Vec<InputEvent>>>;

/// Listens to `canvas` (pointer, wheel, context menu) and the window (keys, blur) for
/// the page's lifetime; returns the queue they fill.
pub(crate) fn listen(canvas: &web_sys::HtmlCanvasElement) -> Result<InputQueue, String> {
    let window = web_sys::window().ok_or("no window to listen to")?;
    let queue: InputQueue = Rc::new(RefCell::new(Vec::new()));
    let position = |canvas: &web_sys::HtmlCanvasElement, e: &web_sys::MouseEvent| {
        let rect = canvas.get_bounding_client_rect();
        [(f64::from(e.client_x()) - rect.left()) as f32, (f64::from(e.client_y()) - rect.top()) as f32]
    };
    let mouse_modifiers =
        |e: &web_sys::MouseEvent| modifiers(e.alt_key(), e.ctrl_key(), e.shift_key(), e.meta_key());

    let (q, c) = (queue.clone(), canvas.clone());
    on(canvas, "pointerdown", false, move |e: web_sys::PointerEvent| {
        // Drags go on outside the canvas; keys go to the page, not a focused control.
        let _ = c.set_pointer_capture(e.pointer_id());
        q.borrow_mut().push(InputEvent::PointerButton {
            pos: position(&c, &e),
            button: e.button(),
            pressed: true,
            modifiers: mouse_modifiers(&e),
        });
    })?;
    for name in ["pointerup", "pointercancel"] {
        let (q, c) = (queue.clone(), canvas.clone());
        on(canvas, name, false, move |e: web_sys::PointerEvent| {
            q.borrow_mut().push(InputEvent::PointerButton {
                pos: position(&c, &e),
                button: e.button(),
                pressed: false,
                modifiers: mouse_modifiers(&e),
            });
        })?;
    }
    let (q, c) = (queue.clone(), canvas.clone());
    on(canvas, "pointermove", false, move |e: web_sys::PointerEvent| {
        q.borrow_mut().push(InputEvent::PointerMove { pos: position(&c, &e) });
    })?;
    let q = queue.clone();
    on(canvas, "pointerleave", false, move |_: web_sys::PointerEvent| {
        q.borrow_mut().push(InputEvent::PointerLeave);
    })?;
    let q = queue.clone();
    // Not passive: the page must not scroll or zoom under the wheel.
    on(canvas, "wheel", true, move |e: web_sys::WheelEvent| {
        e.prevent_default();
        q.borrow_mut().push(InputEvent::Wheel {
            delta: [e.delta_x() as f32, e.delta_y() as f32],
            unit: WheelUnit::of_mode(e.delta_mode()),
            modifiers: modifiers(e.alt_key(), e.ctrl_key(), e.shift_key(), e.meta_key()),
        });
    })?;
    // The right button turns the camera: no context menu.
    on(canvas, "contextmenu", true, |e: web_sys::MouseEvent| e.prevent_default())?;
    for (name, pressed) in [("keydown", true), ("keyup", false)] {
        let q = queue.clone();
        on(&window, name, false, move |e: web_sys::KeyboardEvent| {
            q.borrow_mut().push(InputEvent::Key {
                code: e.code(),
                key: e.key(),
                pressed,
                repeat: e.repeat(),
                modifiers: modifiers(e.alt_key(), e.ctrl_key(), e.shift_key(), e.meta_key()),
            });
        })?;
    }
    let q = queue.clone();
    on(&window, "blur", false, move |_: web_sys::Event| q.borrow_mut().push(InputEvent::Blur))?;
    Ok(queue)
}

/// Adds `handler` for `name` events on `target` for the page's lifetime (`active`: it
/// may call `preventDefault`, so the browser must wait for it).
fn on<E: JsCast + 'static>(
    target: &web_sys::EventTarget,
    name: &str,
    active: bool,
    mut handler: impl FnMut(E) + 'static,
) -> Result<(), String> {
    let closure = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
        if let Ok(event) = event.dyn_into::<E>() {
            handler(event);
        }
    });
    let options = web_sys::AddEventListenerOptions::new();
    options.set_passive(!active);
    target
        .add_event_listener_with_callback_and_add_event_listener_options(
            name,
            closure.as_ref().unchecked_ref(),
            &options,
        )
        .map_err(|e| format!("listening to {name} events failed: {e:?}"))?;
    // The listener lives as long as the page.
    closure.forget();
    Ok(())
}
