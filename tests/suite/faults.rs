//! Non-finite gradients never reach the weights.

use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use burn_sam::strategy::{map_grads, perturb, GradMap, ParamGrad};
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

/// Every gradient's values, in the module's order.
fn grad_values<B: AutodiffBackend>(model: &Mlp<B>, grads: GradientsParams) -> Vec<Vec<f64>> {
    struct Values(Vec<Vec<f64>>);
    impl<B: Backend> GradMap<B> for Values {
        fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
            let values = param.tensor.clone().into_data().iter::<f64>().collect();
            self.0.push(values);
            Some(param.tensor)
        }
    }
    let mut values = Values(Vec::new());
    map_grads(model, grads, &mut values);
    values.0
}

/// A replica's local ascent (`strategy::perturb`) with a gradient that is not finite leaves
/// the copy at `w` and either says so without a wait (CPU backends: skip the second pass) or
/// makes the gradients taken there not finite (GPU backends, where the norm stays on the
/// device), so that the step is skipped either way; a finite ascent passes them on unchanged.
pub fn local_ascent_passes_its_fault_on<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let config = SamConfig::new();

    let moved = perturb(&config, 0.1, model.clone(), batch_grads(&model, batch), 1.0).unwrap();
    assert!(moved.perturbed() && !moved.known_unperturbed());
    let grads = grad_values(&moved.module, batch_grads(&moved.module, batch));
    let carried = moved.carry_fault(batch_grads(&moved.module, batch));
    assert_eq!(
        grad_values(&moved.module, carried),
        grads,
        "finite: bit for bit"
    );

    for value in [f64::NAN, f64::INFINITY] {
        let mut grads = batch_grads(&model, batch);
        poison(&model, &mut grads, value);
        let moved = perturb(&config, 0.1, model.clone(), grads, 1.0).unwrap();
        assert_eq!(
            tensors(&moved.module),
            tensors(&model),
            "unmoved on {value}"
        );
        assert!(
            !moved.perturbed() && !moved.grad_norm().is_finite(),
            "{value}"
        );
        if moved.known_unperturbed() {
            continue;
        }
        // The gradient at `w` is finite; the fault must still reach the step.
        let at_w = batch_grads(&moved.module, batch);
        let carried = grad_values(&moved.module, moved.carry_fault(at_w));
        assert!(!all_finite(&carried), "the fault of {value} is carried");
    }
}
