//! What a step reports to the strategy's side of the link: the losses its passes noted, read
//! back with the step's norms, and the step's report for the readers that subscribed (a
//! `Learner`'s metrics).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use super::StepLink;
use crate::step_report::StepReport;

impl StepLink {
    /// Notes micro-batch loss `loss` (unscaled, detached or not) of the pass running now, with
    /// `weight`, its share of the window, for the step's report: at the weights the optimizer
    /// holds, `w`, or at its perturbed weights while an ascent awaits its descent
    /// ([`StepLink::awaits_descent`]). The step reads the weighted means back with its norms
    /// ([`StepReport::loss`], [`StepReport::perturbed_loss`]). A no-op for an optimizer that
    /// reports no losses (any but [`Sam`](crate::Sam)).
    pub fn note_loss<B: AutodiffBackend>(&self, loss: Tensor<B, 1>, weight: f64) {
        let perturbed = self.awaits_descent();
        self.note(loss, weight, perturbed);
    }

    /// Drops the losses noted so far: call it as a step starts, so that the losses of a step
    /// that ended in an error are not counted in the next.
    pub fn clear_losses(&self) {
        self.channel.take_losses();
    }

    /// As [`StepLink::note_loss`], for a pass at weights the strategy perturbed itself (a local
    /// ascent, whose optimizer awaits no descent).
    pub fn note_perturbed_loss<B: AutodiffBackend>(&self, loss: Tensor<B, 1>, weight: f64) {
        self.note(loss, weight, true);
    }

    fn note<B: AutodiffBackend>(&self, loss: Tensor<B, 1>, weight: f64, perturbed: bool) {
        if let Some(losses) = self.channel.messages().losses.as_mut() {
            losses.note(loss.inner(), weight, perturbed);
        }
    }

    /// The report of the optimizer's last step (`None` before one, and for Burn's optimizers).
    pub fn last_report(&self) -> Option<StepReport> {
        self.channel.last_report()
    }

    /// A new reader of the steps' reports, fed by the strategy ([`StepLink::feed`]) while it
    /// lives.
    pub fn subscribe(&self) -> ReportFeed {
        let feed = ReportFeed::default();
        let feeding = Arc::downgrade(&feed.0);
        self.channel.messages().feeds.push(feeding);
        feed
    }

    /// The readers that live, the others forgotten.
    fn readers(&self) -> Vec<ReportFeed> {
        let mut messages = self.channel.messages();
        messages.feeds.retain(|feeding| feeding.strong_count() > 0);
        let live = messages.feeds.iter().filter_map(Weak::upgrade);
        live.map(ReportFeed).collect()
    }

    /// Whether any reader lives ([`StepLink::subscribe`]).
    pub fn has_readers(&self) -> bool {
        !self.readers().is_empty()
    }

    /// Hands the last step's report to every reader, once for each of the step's `items`
    /// (the `Learner` outputs it reported).
    pub fn feed(&self, items: usize) {
        let report = self.last_report();
        for feed in self.readers() {
            feed.push(report, items);
        }
    }

    /// Waits until every reader has read what it was fed: a `Learner`'s metrics run on
    /// another thread, and the reads of their outputs then cut the device queue at the same
    /// point every step (after the step). A reader that reads nothing for `patience` (one
    /// registered where no output reaches it, such as a validation metric) is fed and waited
    /// for no longer, with a warning.
    pub fn await_readers(&self, patience: Duration) {
        for feed in self.readers() {
            if feed.await_read(patience) {
                continue;
            }
            log::warn!(
                "a reader of SAM's step reports (a SamMetric) read nothing for {patience:?}: \
                 register SAM's metrics for training (metric_train_numeric)"
            );
            let stalled = Arc::downgrade(&feed.0);
            let mut messages = self.channel.messages();
            messages.feeds.retain(|feeding| !feeding.ptr_eq(&stalled));
        }
    }
}

/// What the link keeps of a reader: nothing once the reader is dropped.
pub(super) type Feeding = Weak<Queue>;

type Queue = (Mutex<VecDeque<Option<StepReport>>>, Condvar);

/// One reader's queue of step reports, in step order: what a `Learner` metric of SAM's
/// reads for each output it gets ([`StepLink::subscribe`]).
#[derive(Clone, Debug, Default)]
pub struct ReportFeed(Arc<Queue>);

impl ReportFeed {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Option<StepReport>>> {
        self.0 .0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, report: Option<StepReport>, items: usize) {
        self.queue().extend(std::iter::repeat_n(report, items));
    }

    /// The report for the next output, oldest first: `None` when none is queued,
    /// `Some(None)` for a step of an optimizer that reports none.
    pub fn next(&self) -> Option<Option<StepReport>> {
        let next = self.queue().pop_front();
        self.0 .1.notify_all();
        next
    }

    /// Whether everything fed was read within `patience` of the last read.
    fn await_read(&self, patience: Duration) -> bool {
        let mut queue = self.queue();
        while !queue.is_empty() {
            let (left, waited) = self
                .0
                 .1
                .wait_timeout(queue, patience)
                .unwrap_or_else(PoisonError::into_inner);
            if waited.timed_out() {
                return false;
            }
            queue = left;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use burn::backend::{Autodiff, Flex};
    use burn::nn::Linear;
    use burn::optim::SgdConfig;

    use crate::channel::Linkable;
    use crate::SamConfig;

    type B = Autodiff<Flex>;

    #[test]
    fn readers_get_each_item_once_and_stalled_or_dropped_ones_are_forgotten() {
        let sam = SamConfig::new().init(SgdConfig::new().init::<B, Linear<B>>());
        let link = sam.step_link();
        assert!(!link.has_readers());
        let reader = link.subscribe();
        drop(link.subscribe());
        assert!(link.has_readers());
        // Before any step: fed `None` (no report), once per item, oldest first.
        link.feed(2);
        assert_eq!(reader.next(), Some(None));
        assert_eq!(reader.next(), Some(None));
        assert_eq!(reader.next(), None);
        // Everything read: no wait.
        link.await_readers(Duration::from_secs(60));
        assert!(link.has_readers());
        // A reader that never reads is waited for once, then fed no more.
        link.feed(1);
        link.await_readers(Duration::from_millis(10));
        assert!(!link.has_readers());
        link.feed(1);
        assert_eq!(reader.next(), Some(None), "the item fed before it stalled");
        assert_eq!(reader.next(), None, "nothing fed after");
    }
}
