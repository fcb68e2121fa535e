//! Non-finite gradients never reach the weights.

use burn::optim::{AdamConfig, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::{SamConfig, StepOutcome};
use burn_sam_suite::Mlp;

use super::util::{batch_grads, mse, poison, problem, tensors};

fn all_finite(values: &[Vec<f64>]) -> bool {
    values.iter().flatten().all(|v| v.is_finite())
}

pub fn non_finite_ascent_falls_back_to_base_step<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;

    // The fallback is exactly the base step with the descent gradient, taken at w.
    let mut base = AdamConfig::new().init();
    let expected = tensors(&base.step(1e-2, model.clone(), batch_grads(&model, batch)));

    for value in [f64::NAN, f64::INFINITY] {
        let mut sam = SamConfig::new().init(AdamConfig::new().init());
        let mut grads = batch_grads(&model, batch);
        poison(&model, &mut grads, value);
        let perturbed = sam.ascend(0.1, model.clone(), grads).unwrap();
        assert_eq!(
            tensors(&perturbed),
            tensors(&model),
            "no perturbation on {value}"
        );
        let grads = batch_grads(&perturbed, batch);
        let (stepped, report) = sam.descend(1e-2, perturbed, grads).unwrap();
        assert_eq!(report.outcome, StepOutcome::AscentSkipped);
        assert!(!report.ascent_grad_norm.is_finite());
        assert!(all_finite(&tensors(&stepped)));
        assert_eq!(tensors(&stepped), expected);
        assert_eq!(sam.stats().ascents_skipped, 1);
    }
}

pub fn non_finite_descent_changes_nothing<B: AutodiffBackend>() {
    let problem = problem::<B>(4);
    let mut model = problem.model;
    let mut sam = SamConfig::new().init(AdamConfig::new().init());
    for (x, y) in &problem.batches[..2] {
        let step = sam.step_with(1e-2, model, |m| mse(m.forward(x.clone()), y.clone()));
        model = step.unwrap().module;
    }
    let before = tensors(&model);
    let untouched = sam.clone();
    let batch = &problem.batches[2];

    for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let perturbed = sam
            .ascend(0.1, model.clone(), batch_grads(&model, batch))
            .unwrap();
        assert_ne!(tensors(&perturbed), before);
        let mut grads = batch_grads(&perturbed, batch);
        poison(&perturbed, &mut grads, value);
        let (stepped, report) = sam.descend(1e-2, perturbed, grads).unwrap();
        assert_eq!(report.outcome, StepOutcome::UpdateSkipped, "{value}");
        assert_eq!(tensors(&stepped), before, "weights untouched on {value}");
        model = stepped;
    }
    assert_eq!(sam.stats().updates_skipped, 3);
    assert_eq!(sam.stats().steps, 5);

    // Adam's moments and step count are untouched: the next step is the same as from an
    // optimizer that never saw the faulty batches.
    let (x, y) = &problem.batches[3];
    let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
    let after_faults = sam.step_with(1e-2, model.clone(), loss).unwrap().module;
    let mut untouched = untouched;
    let expected = untouched.step_with(1e-2, model, loss).unwrap().module;
    assert_eq!(tensors(&after_faults), tensors(&expected));
}
