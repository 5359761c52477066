//! What the frame loop does after a frame: go on, exit after the screenshot, or stop
//! with one error. A lost GPU device always stops the viewer with the loss as its one
//! message, whatever else failed on the way (those failures are its consequences).

use anyhow::Error;
use tessera::DeviceLost;

/// The frame loop's next step.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Draw the next frame.
    Continue,
    /// The screenshot was written: close the window and exit successfully.
    Done,
    /// Close the window and exit with this error (printed once by `main`).
    Fail(Error),
}

/// Decides the next step from the frame's result (`Ok(true)`: the screenshot was
/// written) and the device's state after it.
pub(crate) fn after_frame(frame: anyhow::Result<bool>, lost: Option<DeviceLost>) -> Outcome {
    match (lost, frame) {
        (Some(lost), _) => Outcome::Fail(Error::new(lost)),
        (None, Ok(false)) => Outcome::Continue,
        (None, Ok(true)) => Outcome::Done,
        (None, Err(e)) => Outcome::Fail(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use anyhow::anyhow;
    use tessera::lost::LostCause;

    use super::*;

    fn lost() -> DeviceLost {
        DeviceLost { cause: LostCause::Driver, message: "VK_ERROR_DEVICE_LOST".into() }
    }

    #[test]
    fn frames_go_on_until_the_screenshot_or_an_error() {
        assert!(matches!(after_frame(Ok(false), None), Outcome::Continue));
        assert!(matches!(after_frame(Ok(true), None), Outcome::Done));
        let Outcome::Fail(e) = after_frame(Err(anyhow!("writing shot.png")), None) else { panic!() };
        assert_eq!(e.to_string(), "writing shot.png");
    }

    #[test]
    fn a_lost_device_stops_the_viewer_with_the_loss_as_its_one_message() {
        // Even when the frame itself went on, or failed in a way the loss caused.
        for frame in [Ok(false), Ok(true), Err(anyhow!("reading back a frame from the GPU failed"))] {
            let Outcome::Fail(e) = after_frame(frame, Some(lost())) else { panic!("must stop") };
            let text = tessera::core::error_text::chain(e.as_ref());
            assert!(text.starts_with("the GPU device was lost (driver reset or GPU removed)"), "{text}");
            assert_eq!(text.matches("lost").count(), 1, "said once: {text}");
        }
    }
}
