//! rho = 0, the three ways to drive SAM and what their reports say, untouched parameters,
//! resume from a record.

use burn::module::{AutodiffModule, Module};
use burn::nn::{Linear, LinearConfig};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::strategy::Linkable;
use burn_sam::SamConfig;
use burn_sam_suite::{load_record, record_bytes, Mlp};

use super::util::{assert_close, batch_grads, mse, narrow_scalars, problem, tensors};

/// Drives `optim` through `Optimizer::step`, twice per batch (SAM's protocol).
fn sam_steps<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    optim: &mut O,
    mut model: Mlp<B>,
    batches: &[(Tensor<B, 2>, Tensor<B, 2>)],
    lr: f64,
) -> Mlp<B> {
    for batch in batches {
        for _pass in 0..2 {
            let grads = batch_grads(&model, batch);
            model = optim.step(lr, model, grads);
        }
    }
    model
}

pub fn rho_zero_equals_base_optimizer<B: AutodiffBackend>() {
    let problem = problem::<B>(10);
    let lr = 1e-2;

    let mut adam = AdamConfig::new().init();
    let mut base = problem.model.clone();
    for batch in &problem.batches {
        let grads = batch_grads(&base, batch);
        base = adam.step(lr, base, grads);
    }

    let mut sam = SamConfig::new()
        .with_rho(0.0)
        .init(AdamConfig::new().init())
        .step_per_pass();
    let with_sam = sam_steps(&mut sam, problem.model.clone(), &problem.batches, lr);

    let start = tensors(&problem.model);
    assert_ne!(
        tensors(&base),
        start,
        "the base optimizer must move the weights"
    );
    assert_eq!(
        tensors(&with_sam),
        tensors(&base),
        "rho = 0 must be the base optimizer"
    );
}

pub fn api_forms_agree<B: AutodiffBackend>() {
    let problem = problem::<B>(3);
    let lr = 0.05;
    let config = SamConfig::new().with_rho(0.1);
    let base = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init()
    };

    let mut optim = config.init(base()).step_per_pass();
    let by_step = sam_steps(&mut optim, problem.model.clone(), &problem.batches, lr);

    let mut optim = config.init(base());
    let mut explicit = problem.model.clone();
    for batch in &problem.batches {
        let grads = batch_grads(&explicit, batch);
        let perturbed = optim.ascend(lr, explicit, grads).unwrap();
        let grads = batch_grads(&perturbed, batch);
        explicit = optim.descend(lr, perturbed, grads).unwrap().0;
    }

    let mut optim = config.init(base());
    let mut closure = problem.model.clone();
    for (x, y) in &problem.batches {
        let step = optim
            .step_with(lr, closure, |m: &Mlp<B>| {
                mse(m.forward(x.clone()), y.clone())
            })
            .unwrap();
        assert!(step.loss.into_scalar().to_string().parse::<f64>().unwrap() > 0.0);
        closure = step.module;
    }

    assert_ne!(tensors(&by_step), tensors(&problem.model));
    assert_eq!(
        tensors(&explicit),
        tensors(&by_step),
        "ascend/descend vs step"
    );
    assert_eq!(tensors(&closure), tensors(&by_step), "step_with vs step");
    assert_eq!(optim.stats().steps, 3);
}

/// A loss's value as a number, as the report reads it (exactly, from any float type).
fn value<B: AutodiffBackend>(loss: &Tensor<B, 1>) -> f64 {
    loss.clone()
        .into_data()
        .iter::<f64>()
        .next()
        .expect("one value")
}

/// The report carries both passes' losses, read with the step's norms: `step_with` notes them
/// itself; the split API with `StepLink::note_loss`, to the same report bitwise; without a
/// note they are NaN. SAM's sharpness `L(w + e) - L(w)` is positive: `e` climbs the loss.
pub fn reports_carry_both_losses<B: AutodiffBackend>() {
    let problem = problem::<B>(3);
    let (lr, config) = (0.05, SamConfig::new().with_rho(0.1));
    let (mut with, mut split, mut silent) = (
        config.init(SgdConfig::new().init()),
        config.init(SgdConfig::new().init()),
        config.init(SgdConfig::new().init()),
    );
    let (mut model, mut unnoted) = (problem.model.clone(), problem.model.clone());
    let link = split.step_link();
    for (x, y) in &problem.batches {
        let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
        let step = with.step_with(lr, model.clone(), loss).unwrap();

        let first = loss(&model);
        link.note_loss(first.clone().detach(), 1.0);
        let grads = super::util::grads(&model, first.clone());
        let perturbed = split.ascend(lr, model, grads).unwrap();
        let second = loss(&perturbed);
        link.note_loss(second.clone().detach(), 1.0);
        let grads = super::util::grads(&perturbed, second.clone());
        let (stepped, report) = split.descend(lr, perturbed, grads).unwrap();

        assert_eq!(report, step.report, "split API, noted, vs step_with");
        assert_eq!(report.loss, value(&first));
        assert_eq!(report.perturbed_loss, value(&second));
        assert!(report.sharpness() > 0.0, "{report:?}");
        assert_eq!(report.sharpness(), report.perturbed_loss - report.loss);

        let grads = batch_grads(&unnoted, &(x.clone(), y.clone()));
        let perturbed = silent.ascend(lr, unnoted, grads).unwrap();
        let grads = batch_grads(&perturbed, &(x.clone(), y.clone()));
        let (next, quiet) = silent.descend(lr, perturbed, grads).unwrap();
        assert!(quiet.loss.is_nan() && quiet.perturbed_loss.is_nan() && quiet.sharpness().is_nan());
        assert_eq!(quiet.ascent_grad_norm, report.ascent_grad_norm);
        (model, unnoted) = (stepped, next);
    }
}

#[derive(Module, Debug)]
struct PartlyFrozen<B: burn::tensor::backend::Backend> {
    frozen: Linear<B>,
    trained: Linear<B>,
    unused: Linear<B>,
}

impl<B: AutodiffBackend> PartlyFrozen<B> {
    fn new() -> Self {
        let device = Default::default();
        B::seed(&device, 3);
        Self {
            frozen: LinearConfig::new(4, 6).init(&device).no_grad(),
            trained: LinearConfig::new(6, 2).init(&device),
            unused: LinearConfig::new(2, 2).init(&device),
        }
    }

    fn grads(&self, x: Tensor<B, 2>) -> GradientsParams {
        let out = self.trained.forward(self.frozen.forward(x).tanh());
        let loss = out.powi_scalar(2).mean();
        GradientsParams::from_grads(loss.backward(), self)
    }
}

pub fn frozen_and_unused_parameters_untouched<B: AutodiffBackend>() {
    let model = PartlyFrozen::<B>::new();
    let x = Tensor::<B, 2>::ones([3, 4], &Default::default());
    let frozen = tensors(&model.frozen);
    let unused = tensors(&model.unused);
    let trained = tensors(&model.trained);

    let mut optim = SamConfig::new()
        .with_rho(0.5)
        .with_adaptive(true)
        .with_eta(0.01)
        .init(AdamConfig::new().init());
    let mut model = model;
    for _ in 0..5 {
        let grads = model.grads(x.clone());
        let perturbed = optim.ascend(0.1, model, grads).unwrap();
        assert_eq!(
            tensors(&perturbed.frozen),
            frozen,
            "ascent moved a frozen parameter"
        );
        assert_eq!(
            tensors(&perturbed.unused),
            unused,
            "ascent moved an unused parameter"
        );
        let grads = perturbed.grads(x.clone());
        model = optim.descend(0.1, perturbed, grads).unwrap().0;
    }
    assert_eq!(tensors(&model.frozen), frozen);
    assert_eq!(tensors(&model.unused), unused);
    assert_ne!(
        tensors(&model.trained),
        trained,
        "the trained layer must move"
    );
    assert!(!model.frozen.weight.is_require_grad());
    assert!(model.trained.weight.is_require_grad());
    assert!(model
        .valid()
        .trained
        .weight
        .val()
        .into_data()
        .iter::<f64>()
        .all(f64::is_finite));
}

pub fn record_round_trip_resumes_exactly<B: AutodiffBackend>() {
    let problem = problem::<B>(6);
    let (first, second) = problem.batches.split_at(3);
    let lr = 1e-2;
    let config = SamConfig::new().with_rho(0.05);

    let mut uninterrupted = config.init(AdamConfig::new().init()).step_per_pass();
    let expected = sam_steps(
        &mut uninterrupted,
        problem.model.clone(),
        &problem.batches,
        lr,
    );

    let mut optim = config.init(AdamConfig::new().init()).step_per_pass();
    let model = sam_steps(&mut optim, problem.model.clone(), first, lr);
    let bytes = record_bytes::<B, _>(optim.to_record());
    drop(optim);

    let record = load_record::<B, _>(bytes);
    let mut resumed = config
        .init(AdamConfig::new().init())
        .step_per_pass()
        .load_record(record);
    assert_eq!(
        resumed.stats().steps,
        3,
        "SAM's counters are part of the record"
    );
    let model = sam_steps(&mut resumed, model, second, lr);

    if narrow_scalars::<B>() {
        // Burn loads records through the backend's FloatElem (f32 on Flex).
        assert_close(&tensors(&model), &tensors(&expected), 1e-8, "resumed");
    } else {
        assert_eq!(tensors(&model), tensors(&expected));
    }

    // Without the base optimizer's moments, the trajectory differs (davda54/sam #73).
    let mut fresh = config.init(AdamConfig::new().init()).step_per_pass();
    let partial = sam_steps(&mut fresh, problem.model.clone(), first, lr);
    let mut amnesic = config.init(AdamConfig::new().init()).step_per_pass();
    let lost = sam_steps(&mut amnesic, partial, second, lr);
    assert_ne!(tensors(&lost), tensors(&expected));
}
