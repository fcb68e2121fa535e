//! Where SAM's ascent is taken when one step's gradient comes from several batches: the
//! micro-batches of an accumulated window, or the replicas of data-parallel training.

use burn::config::Config;

/// Where SAM's ascent is taken when one step's gradient comes from several batches: the
/// micro-batches of a window ([`AccumulationConfig::ascent`](crate::AccumulationConfig::ascent))
/// or the replicas of data-parallel training (the third argument of
/// `train::SamTraining::data_parallel`).
///
/// ```
/// use burn_sam_accum::{AccumulationConfig, Ascent};
///
/// // m-sharpness: each micro-batch perturbed by its own gradient.
/// let config = AccumulationConfig::new(4).with_ascent(Ascent::Local);
/// assert_eq!(AccumulationConfig::new(4).ascent, Ascent::Synced); // the default
/// # assert_eq!(config.ascent, Ascent::Local);
/// ```
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum Ascent {
    /// One perturbation from the gradient of all the batches, then the descent gradient over
    /// all of them at the perturbed weights: SAM on the large batch, exactly, and every SAM
    /// variant. Across replicas: two gradient exchanges and two model broadcasts per step.
    Synced,
    /// Each batch (micro-batch or replica) is perturbed by its own gradient; the descent
    /// gradients are combined and the base optimizer steps once: m-sharpness (Andriushchenko
    /// & Flammarion, 2022), with m a micro-batch or a replica's window (DDP's `no_sync()`
    /// ascent). Across replicas: no exchange before the descent, so one exchange and one
    /// broadcast per step, as plain data parallelism. `SamVariant::Sam` only
    /// ([`SamConfig::check_local_ascent`](burn_sam::SamConfig::check_local_ascent): not
    /// under an adaptive schedule).
    Local,
}
