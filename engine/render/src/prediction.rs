//! A predicted view's feedback: a second request bitset, fed through a feedback target
//! of its own by passes that draw where the camera is going (the built-in drawers'
//! `draw_predicted`, or any pass of yours writing `vt_request_at` to
//! [`crate::VirtualTextures::predicted_attachment`]), read back like the main feedback
//! and handed to the streamer as `FrameInput::predicted`: its tiles stream at the lowest
//! priority, never evicting what the current view needs, and a prediction not repeated
//! is dropped.

use tessera_core::stream::streamer::{ShaderParams, SparseFeedback};

use crate::feedback::Feedback;
use crate::feedback_target::{FeedbackAttachment, FeedbackTargets};

/// Readback buffers of the predicted view's feedback.
const RING: usize = 3;

/// The predicted view's bitset, its readback and its feedback target (with depth).
pub(crate) struct Prediction {
    feedback: Feedback,
    targets: FeedbackTargets,
}

impl Prediction {
    /// A bitset of `words` words, like the main feedback's.
    pub(crate) fn new(device: &wgpu::Device, words: usize) -> Self {
        let feedback = Feedback::new(device, words, RING);
        let targets = FeedbackTargets::new(device, feedback.bitset(), true);
        Self { feedback, targets }
    }

    /// The newest predicted feedback that arrived (never waits).
    pub(crate) fn collect(&mut self) -> Option<SparseFeedback> {
        self.feedback.collect().map(SparseFeedback::from)
    }

    /// A new frame: clears the bitset and the target's state in `encoder`, before the
    /// frame's passes; the feedback block read is the main feedback's (`shader`'s mask and
    /// phase).
    pub(crate) fn begin(
        &self,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        shader: &ShaderParams,
    ) {
        self.feedback.begin(encoder);
        self.targets.begin(queue, encoder, shader);
    }

    /// The target (and its depth buffer) for a predicted view of `width × height`: one
    /// predicted view per frame (a second one would be depth-tested against the first
    /// and overwrite its requests).
    pub(crate) fn attachment(&self, width: u32, height: u32) -> FeedbackAttachment {
        self.targets.attachment(width, height)
    }

    /// After the frame's passes: when a predicted view was drawn, resolves its target
    /// into the bitset and records its readback.
    pub(crate) fn end(&mut self, encoder: &mut wgpu::CommandEncoder, frame: u64) {
        if self.targets.unresolved() {
            self.targets.resolve(encoder, false);
            self.feedback.end(encoder, frame, None);
        }
    }

    /// Starts mapping the readback of the last submission.
    pub(crate) fn after_submit(&mut self) {
        self.feedback.after_submit();
    }

    /// GPU bytes: bitset, readback ring, target and depth.
    pub(crate) fn gpu_bytes(&self) -> u64 {
        self.feedback.gpu_bytes() + self.targets.gpu_bytes()
    }
}
