//! Misuse gives a clear error, never silently wrong training.

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::optim::{Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::{SamConfig, SamError};
use burn_sam_suite::MlpConfig;

use super::util::{batch_grads, problem, tensors};

pub fn errors_name_the_mistake<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let other = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
    let mut sam = SamConfig::new().init(SgdConfig::new().init());

    let grads = batch_grads(&model, batch);
    let error = sam.descend(0.1, model.clone(), grads).unwrap_err();
    assert_eq!(error, SamError::DescentWithoutAscent);
    assert!(error.to_string().contains("without an ascent"));

    let error = sam
        .ascend(model.clone(), batch_grads(&other, batch))
        .unwrap_err();
    assert_eq!(
        error,
        SamError::ForeignGradients {
            gradients: 4,
            matched: 0
        }
    );
    assert!(
        !sam.is_perturbed(),
        "a rejected ascent leaves nothing pending"
    );

    let perturbed = sam
        .ascend(model.clone(), batch_grads(&model, batch))
        .unwrap();
    let error = sam
        .ascend(perturbed.clone(), batch_grads(&perturbed, batch))
        .unwrap_err();
    assert_eq!(error, SamError::AscentPending);

    let error = sam
        .descend(0.1, other.clone(), batch_grads(&other, batch))
        .unwrap_err();
    assert_eq!(error, SamError::ForeignModule);
    assert!(error.to_string().contains("module returned by the ascent"));

    let error = sam
        .descend(0.1, perturbed.clone(), batch_grads(&other, batch))
        .unwrap_err();
    assert!(matches!(error, SamError::ForeignGradients { .. }));

    // After the rejected calls the pending ascent is still intact and completes normally.
    let (stepped, _) = sam
        .descend(0.1, perturbed.clone(), batch_grads(&perturbed, batch))
        .unwrap();
    assert_ne!(tensors(&stepped), tensors(&model));
    assert_eq!(sam.stats().steps, 1);
}

pub fn optimizer_step_panics_clearly<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let other = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
    let mut sam = SamConfig::new().init(SgdConfig::new().init());

    let perturbed = sam.step(0.1, model.clone(), batch_grads(&model, batch));
    drop(perturbed);
    let panic = catch_unwind(AssertUnwindSafe(|| {
        sam.step(0.1, other.clone(), batch_grads(&other, batch))
    }))
    .expect_err("a foreign module in the descent must not train");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("module returned by the ascent"),
        "{message}"
    );
}
