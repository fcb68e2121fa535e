//! Seeds for a step's forward passes (`SamConfig::pass_seed`): both passes of a micro-batch
//! in a step draw the same random numbers (dropout masks), every other step and micro-batch
//! others, and a resumed run the uninterrupted run's, since the step count is in SAM's record.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

/// The seed of micro-batch `micro_batch`'s passes in step `step` (SAM's step count, from 0)
/// of a run seeded with `seed` ([`SamConfig::pass_seed`](crate::SamConfig::pass_seed)):
/// SplitMix64 over the three. A loop of your own that should draw what a SAM run draws (the
/// base optimizer against SAM at `rho = 0`, say) seeds its backend with it before each
/// forward pass.
///
/// ```
/// use burn_sam::pass_seed;
///
/// assert_eq!(pass_seed(7, 3, 0), pass_seed(7, 3, 0));
/// assert_ne!(pass_seed(7, 3, 0), pass_seed(7, 4, 0));
/// assert_ne!(pass_seed(7, 3, 0), pass_seed(7, 3, 1));
/// ```
pub fn pass_seed(seed: u64, step: u64, micro_batch: u64) -> u64 {
    mix(mix(mix(seed) ^ step) ^ micro_batch)
}

/// SplitMix64's output function.
fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Seeds the backend of `module` for micro-batch `micro_batch` of step `step` of `seed`'s run.
pub(crate) fn seed_pass<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    (seed, step): (u64, u64),
    micro_batch: usize,
) {
    // The backends' generators are one per process (Flex, NdArray, CubeCL): seeding through
    // any device seeds what the pass draws from.
    if let Some(device) = module.devices().first() {
        B::seed(device, pass_seed(seed, step, micro_batch as u64));
    }
}
