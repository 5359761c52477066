//! The frame guard: [`VtFrame`] from `begin` to `finish`, [`DetachedFrame`] for engines
//! that own submission, and the end of a frame (feedback readback).

use super::*;

/// One frame of a [`VirtualTextures`], from [`VirtualTextures::begin`] to
/// [`VtFrame::finish`]. While it lives the virtual textures can be sampled (through
/// [`VtFrame::vt`] or [`VtFrame::bind_group`]) but not reconfigured.
///
/// Misuse does not compile. Reconfiguring during a frame:
/// ```compile_fail,E0499
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder) {
/// let frame = vt.begin(ctx, &mut encoder);
/// vt.set_mip_bias(1.0); // error: `vt` is borrowed by `frame`
/// let _ = frame.finish(ctx, encoder);
/// # }
/// ```
/// Finishing twice:
/// ```compile_fail,E0382
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder, again: tessera::wgpu::CommandEncoder) {
/// let frame = vt.begin(ctx, &mut encoder);
/// let _ = frame.finish(ctx, encoder);
/// let _ = frame.finish(ctx, again); // error: `frame` was moved by the first `finish`
/// # }
/// ```
/// Starting a second frame before finishing the first:
/// ```compile_fail,E0499
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder) {
/// let first = vt.begin(ctx, &mut encoder);
/// let second = vt.begin(ctx, &mut encoder); // error: `vt` is still borrowed by `first`
/// let _ = first.finish(ctx, encoder);
/// # }
/// ```
/// Keeping a frame's bind group past `finish`:
/// ```compile_fail,E0505
/// # fn f(ctx: &tessera::GpuContext, vt: &mut tessera::VirtualTextures, mut encoder: tessera::wgpu::CommandEncoder, layer: tessera::VtLayer) {
/// let frame = vt.begin(ctx, &mut encoder);
/// let group = frame.bind_group(layer);
/// let _ = frame.finish(ctx, encoder); // error: `frame` is borrowed by `group`
/// let _ = group;
/// # }
/// ```
#[must_use = "call VtFrame::finish after the passes, or this frame's feedback is lost"]
pub struct VtFrame<'a> {
    vt: &'a mut VirtualTextures,
    stats: StreamFrame,
    number: u64,
    readback_recorded: bool,
    finished: bool,
}

impl<'a> VtFrame<'a> {
    /// The frame `number` of `vt`, begun with these streaming figures.
    pub(super) fn started(vt: &'a mut VirtualTextures, stats: StreamFrame, number: u64) -> Self {
        Self { vt, stats, number, readback_recorded: false, finished: false }
    }
}

impl VtFrame<'_> {
    /// This frame's number (0 for the first frame of the virtual textures).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// What streaming did before this frame (uploads, misses, residency...).
    pub fn stats(&self) -> &StreamFrame {
        &self.stats
    }

    /// The virtual textures, to sample in this frame's passes.
    pub fn vt(&self) -> &VirtualTextures {
        self.vt
    }

    /// See [`VirtualTextures::bind_group`].
    pub fn bind_group(&self, layer: VtLayer) -> &wgpu::BindGroup {
        self.vt.bind_group(layer)
    }

    /// See [`VirtualTextures::feedback_attachment`].
    pub fn feedback_attachment(&self, width: u32, height: u32) -> FeedbackAttachment {
        self.vt.feedback_attachment(width, height)
    }

    /// See [`VirtualTextures::predicted_attachment`].
    pub fn predicted_attachment(&self, width: u32, height: u32) -> Option<FeedbackAttachment> {
        self.vt.predicted_attachment(width, height)
    }

    /// See [`VirtualTextures::resolve_feedback`].
    pub fn resolve_feedback(&self, encoder: &mut wgpu::CommandEncoder) {
        self.vt.resolve_feedback(encoder);
    }

    /// Records the feedback readback into `encoder` now, so that commands recorded
    /// after it (a timestamp, say) come after it. Optional: [`VtFrame::finish`] does it
    /// when this was not called.
    pub fn record_readback(&mut self, encoder: &mut wgpu::CommandEncoder) {
        if !self.readback_recorded {
            self.vt.end_feedback(encoder, self.number);
            self.readback_recorded = true;
        }
    }

    /// Ends the frame after its passes: records the feedback readback into `encoder`,
    /// submits `encoder`, and starts mapping the readback (never waited on). Returns
    /// the frame's streaming statistics, or [`RenderError::DeviceLost`] once the device
    /// is lost (nothing submitted runs any more: stop the frame loop).
    pub fn finish(
        mut self,
        ctx: &GpuContext,
        mut encoder: wgpu::CommandEncoder,
    ) -> Result<StreamFrame, RenderError> {
        self.record_readback(&mut encoder);
        ctx.queue.submit([encoder.finish()]);
        self.vt.submitted();
        self.finished = true;
        match ctx.lost() {
            Some(lost) => Err(lost.into()),
            None => Ok(self.stats),
        }
    }
}

impl<'a> VtFrame<'a> {
    /// Releases the borrow of the virtual textures, for engines that record the frame's
    /// passes in one stage and submit them in another (a render graph, Bevy's render
    /// world): the feedback clear recorded by `begin` must be submitted before the
    /// passes that sample, and [`VirtualTextures::end_detached`] recorded and submitted
    /// after them, then [`VirtualTextures::submitted`] called. The returned token
    /// pairs the two ends: dropping it without `end_detached` warns like a dropped
    /// frame.
    pub fn detach(mut self) -> DetachedFrame {
        self.finished = true;
        DetachedFrame { number: self.number, stats: std::mem::take(&mut self.stats), ended: false }
    }
}

/// A frame begun by [`VirtualTextures::begin`] and [`VtFrame::detach`]ed: the
/// virtual textures are free to use until [`VirtualTextures::end_detached`] takes it
/// back after the frame's passes.
#[must_use = "pass it to VirtualTextures::end_detached after the passes, or this frame's feedback is lost"]
#[derive(Debug)]
pub struct DetachedFrame {
    number: u64,
    stats: StreamFrame,
    ended: bool,
}

impl DetachedFrame {
    /// This frame's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// What streaming did before this frame.
    pub fn stats(&self) -> &StreamFrame {
        &self.stats
    }
}

impl Drop for DetachedFrame {
    fn drop(&mut self) {
        if !self.ended {
            tracing::warn!(
                frame = self.number,
                "a DetachedFrame was dropped without end_detached: its feedback is lost"
            );
        }
    }
}

impl VirtualTextures {
    /// Ends a [`DetachedFrame`] after its passes were recorded: records the feedback
    /// readback into `encoder`, which the caller submits after those passes and then
    /// calls [`VirtualTextures::submitted`]. Returns the frame's statistics.
    pub fn end_detached(
        &mut self,
        mut frame: DetachedFrame,
        encoder: &mut wgpu::CommandEncoder,
    ) -> StreamFrame {
        self.end_feedback(encoder, frame.number);
        frame.ended = true;
        std::mem::take(&mut frame.stats)
    }

    /// After frame `number`'s passes: resolves the feedback target (the view shown,
    /// counted), compacts and copies the feedback, and the predicted view's.
    pub(super) fn end_feedback(&mut self, encoder: &mut wgpu::CommandEncoder, number: u64) {
        self.feedback_targets.resolve(encoder, true);
        self.feedback.end(encoder, number, self.feedback_targets.counts());
        if let Some(prediction) = self.prediction.as_mut() {
            prediction.end(encoder, number);
        }
    }

    /// Starts mapping the readback recorded by [`VirtualTextures::end_detached`]
    /// (never waited on): call it once the encoder holding it was submitted.
    pub fn submitted(&mut self) {
        self.feedback.after_submit();
        if let Some(prediction) = self.prediction.as_mut() {
            prediction.after_submit();
        }
        self.table_unconfirmed = false;
    }
}

impl Drop for VtFrame<'_> {
    fn drop(&mut self) {
        if !self.finished {
            tracing::warn!(frame = self.number, "a VtFrame was dropped without finish: its feedback is lost");
        }
    }
}
