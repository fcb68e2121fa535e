//! Mixed precision with real f16 arithmetic: loss scaling, overflow handling, f32 master
//! weights. Instantiated for backends whose default float type is f16.

use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use burn_sam::strategy::Passes;
use burn_sam::LossScaling;
use burn_sam::{LossScalerConfig, MixedPrecisionConfig, Sam, SamConfig, SamVariant, StepOutcome};
use burn_sam_suite::{load_record, record_bytes, Mlp, Rng};

use super::util::{float_dtype, grads, mse, poison, problem, tensors};

fn scaled_grads<B: AutodiffBackend>(
    sam: &Sam<impl Clone>,
    model: &Mlp<B>,
    (x, y): &(Tensor<B, 2>, Tensor<B, 2>),
) -> GradientsParams {
    grads(
        model,
        sam.scale_loss(mse(model.forward(x.clone()), y.clone())),
    )
}

fn distance(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let pairs = a.iter().flatten().zip(b.iter().flatten());
    pairs.map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt()
}

/// davda54/sam under a GradScaler without unscaling: its f16 norm of the scaled gradients
/// overflows (at this scale the true sum of squares is past f16's largest value, so it
/// overflows however the backend accumulates: fused Vulkan sums in f32), and the base optimizer would step with `scale` times the gradient. Ours moves
/// the weights by rho and steps with the true gradient.
pub fn ascent_moves_by_rho_and_descent_by_the_true_gradient<B: AutodiffBackend>() {
    assert_eq!(float_dtype::<B>(), DType::F16);
    let problem = problem::<B>(1);
    let (model, batch) = (problem.model, &problem.batches[0]);
    let (rho, lr, scale) = (0.05, 0.5, 4096.0);
    let mut sam = SamConfig::new()
        .with_rho(rho)
        .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(scale)))
        .init(SgdConfig::new().init());

    let grads = scaled_grads(&sam, &model, batch);
    let layer = &model.layers[0].weight;
    let grad = grads.get::<B::InnerBackend, 2>(layer.id).unwrap();
    assert_eq!(grad.dtype(), DType::F16, "real f16 gradients");
    let naive = grad
        .powi_scalar(2)
        .sum()
        .into_data()
        .iter::<f64>()
        .next()
        .unwrap();
    assert!(
        naive.is_infinite(),
        "the seed's bug: f16 norm of scaled gradients = {naive}"
    );

    let w = tensors(&model);
    let perturbed = sam.ascend(0.1, model, grads).unwrap();
    let moved = distance(&tensors(&perturbed), &w);
    assert!((moved - rho).abs() < 0.03 * rho, "moved {moved}, rho {rho}");

    let grads = scaled_grads(&sam, &perturbed, batch);
    let (stepped, report) = sam.descend(lr, perturbed, grads).unwrap();
    assert_eq!(report.outcome, StepOutcome::Applied);
    assert_eq!(report.loss_scale, scale as f32);
    let moved = distance(&tensors(&stepped), &w);
    let expected = lr * report.descent_grad_norm;
    assert!(
        (moved - expected).abs() < 0.03 * expected,
        "stepped {moved}, lr * ||g|| = {expected} (scaled would be {})",
        expected * scale
    );
}

type AdamSam<B> = Sam<OptimizerAdaptor<Adam, Mlp<B>, B>>;

/// Adam's moments and the master weights, byte for byte, in a stable order.
fn optimizer_state<B: AutodiffBackend>(sam: &AdamSam<B>) -> Vec<(String, Vec<u8>)> {
    let (base, own) = Optimizer::<Mlp<B>, B>::to_record(sam);
    let mut state: Vec<_> = base
        .into_iter()
        .map(|(id, record)| (id.serialize(), record_bytes::<B, _>(record)))
        .collect();
    for master in own.mixed_precision.master_weights {
        let bytes = master.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        state.push((format!("master {}", master.id), bytes));
    }
    for tensor in own.variant.tensors {
        let bytes = tensor.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        state.push((format!("variant {}", tensor.id), bytes));
    }
    state.push(("cycle".into(), own.variant.cycle.to_le_bytes().to_vec()));
    state.sort();
    state
}

/// Random inf/NaN gradients in either pass of `steps` steps of `variant`: a fault never
/// reaches the weights, the base optimizer's state or the variant's own (every later step
/// stays finite), and the scale makes one update per step.
pub fn faults_never_reach_the_weights<B: AutodiffBackend>(variant: SamVariant, steps: usize) {
    let problem = problem::<B>(8);
    let mut model = problem.model;
    // Capped below f16 overflow for this model, so that only injected faults overflow.
    let scaler = LossScalerConfig::new()
        .with_init_scale(32.0)
        .with_growth_interval(5)
        .with_min_scale(Some(1.0))
        .with_max_scale(Some(128.0));
    let mut sam = SamConfig::new()
        .with_loss_scaling(Some(scaler.clone()))
        .with_variant(variant.clone())
        .init(AdamConfig::new().init());
    let mut expected_scale = scaler.init();
    let mut rng = Rng::new(42);
    let values = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let (mut ascent_faults, mut descent_faults, mut state_checks) = (0, 0, 0);
    let mut two_pass_steps = 0;
    let what = variant.name();

    for step in 0..steps {
        let batch = &problem.batches[step % problem.batches.len()];
        let passes = sam.passes();
        let two_passes = passes == Passes::Two;
        two_pass_steps += usize::from(two_passes);
        let fault_ascent = rng.uniform() < 0.05 && two_passes;
        let fault_descent = rng.uniform() < 0.05;
        let value = values[(rng.uniform() * 3.0) as usize];
        let w = tensors(&model);
        let state = (fault_descent && state_checks < 25).then(|| optimizer_state(&sam));

        let mut perturbed = model;
        if two_passes {
            let mut grads = scaled_grads(&sam, &perturbed, batch);
            if fault_ascent {
                poison(&perturbed, &mut grads, value);
            }
            perturbed = sam.ascend(0.1, perturbed, grads).unwrap();
            if fault_ascent {
                assert_eq!(
                    tensors(&perturbed),
                    w,
                    "{what} step {step}: perturbed by a fault"
                );
            }
        } else if passes == Passes::LookAhead {
            // Momentum-SAM's ascent to its look-ahead takes no pass, and no fault.
            perturbed = sam.ascend(0.1, perturbed, GradientsParams::new()).unwrap();
        }
        let mut grads = scaled_grads(&sam, &perturbed, batch);
        if fault_descent {
            poison(&perturbed, &mut grads, value);
        }
        let (stepped, report) = sam.descend(1e-3, perturbed, grads).unwrap();
        model = stepped;
        let now = tensors(&model);
        assert!(
            now.iter().flatten().all(|v| v.is_finite()),
            "{what} step {step}"
        );

        let expected = match (two_passes, fault_ascent, fault_descent) {
            (_, _, true) => StepOutcome::UpdateSkipped,
            (false, _, false) => StepOutcome::SinglePass,
            (true, true, false) => StepOutcome::AscentSkipped,
            (true, false, false) => StepOutcome::Applied,
        };
        assert_eq!(report.outcome, expected, "{what} step {step}: {report:?}");
        if fault_descent {
            assert_eq!(
                now, w,
                "{what} step {step}: a skipped update changed the weights"
            );
            if let Some(state) = state {
                let after = optimizer_state(&sam);
                assert_eq!(after, state, "{what} step {step}: optimizer state");
                state_checks += 1;
            }
        }
        // One scale update per step, on any fault in either pass.
        expected_scale
            .update(fault_ascent || fault_descent)
            .unwrap();
        assert_eq!(
            sam.loss_scale(),
            expected_scale.scale(),
            "{what} step {step}: scale"
        );
        ascent_faults += usize::from(fault_ascent);
        descent_faults += usize::from(fault_descent);
    }
    assert!(
        (two_pass_steps == 0 || ascent_faults > two_pass_steps / 60)
            && descent_faults > steps / 60
            && state_checks >= (steps / 60).min(25),
        "{what}: {ascent_faults} ascent and {descent_faults} descent faults, {state_checks} state checks"
    );
    let stats = sam.stats();
    assert_eq!(stats.steps as usize, steps);
    assert_eq!(stats.updates_skipped as usize, descent_faults);
}

pub fn underflowing_gradients_train_with_scaling<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let (model, (x, y)) = (problem.model, &problem.batches[0]);
    // A loss so small that its f16 gradients flush to zero.
    let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone()).mul_scalar(1e-7);
    let plain = grads(&model, loss(&model));
    let id = model.layers[0].weight.id;
    let plain = plain.get::<B::InnerBackend, 2>(id).unwrap();
    assert_eq!(
        plain.abs().sum().into_data().iter::<f64>().next(),
        Some(0.0)
    );

    let mut optim = MixedPrecisionConfig::new(LossScalerConfig::new().with_init_scale(16384.0))
        .init(SgdConfig::new().init());
    let start = tensors(&model);
    let mut model = model;
    for _ in 0..10 {
        let grads = grads(&model, optim.scale_loss(loss(&model)));
        let (stepped, report) = optim.try_step(1e4, model, grads).unwrap();
        assert!(report.applied && report.grad_norm > 0.0, "{report:?}");
        model = stepped;
    }
    assert_ne!(tensors(&model), start, "scaled gradients train the model");
}

fn unit_linear<B: AutodiffBackend>() -> Linear<B> {
    let device = Default::default();
    let mut linear: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    linear.weight = Param::from_tensor(Tensor::ones([1, 1], &device));
    linear
}

/// `lr * g` = 1e-4 is below half an f16 ulp of w = 1 (4.9e-4): without master weights
/// every update rounds away.
pub fn master_weights_keep_small_updates<B: AutodiffBackend>() {
    let x = Tensor::<B, 2>::ones([1, 1], &Default::default());
    let run = |master_weights: bool| {
        let scaler = LossScalerConfig::new().with_init_scale(1.0);
        let mut optim = MixedPrecisionConfig::new(scaler)
            .with_master_weights(master_weights)
            .init(SgdConfig::new().init());
        let mut model = unit_linear::<B>();
        let id = model.weight.id;
        for _ in 0..10 {
            let loss = model.forward(x.clone()).sum();
            let grads = grads(&model, optim.scale_loss(loss));
            model = optim.step(1e-4, model, grads);
        }
        assert_eq!(
            model.weight.val().dtype(),
            DType::F16,
            "the module stays f16"
        );
        assert_eq!(model.weight.id, id, "the parameter keeps its id");
        assert!(model.weight.val().is_require_grad());
        tensors(&model)[0][0]
    };
    assert_eq!(run(false), 1.0, "pure f16 loses every update");
    let with_masters = run(true);
    assert_eq!(with_masters, 0.9990234375, "f16(1 - 10 * 1e-4)");
}

pub fn record_round_trip_resumes_exactly<B: AutodiffBackend>() {
    let problem = problem::<B>(6);
    let (first, second) = problem.batches.split_at(3);
    let config = SamConfig::new().with_loss_scaling(Some(
        LossScalerConfig::new()
            .with_init_scale(512.0)
            .with_growth_interval(2),
    ));
    let run = |sam: &mut Sam<_>, mut model: Mlp<B>, batches: &[(Tensor<B, 2>, Tensor<B, 2>)]| {
        for (x, y) in batches {
            let step = sam.step_with(0.05, model, |m: &Mlp<B>| {
                mse(m.forward(x.clone()), y.clone())
            });
            model = step.unwrap().module;
        }
        model
    };
    let mut uninterrupted = config.init(SgdConfig::new().init());
    let expected = run(&mut uninterrupted, problem.model.clone(), &problem.batches);

    let mut sam = config.init(SgdConfig::new().init());
    let model = run(&mut sam, problem.model.clone(), first);
    let record = Optimizer::<Mlp<B>, B>::to_record(&sam);
    assert!(
        !record.1.mixed_precision.master_weights.is_empty(),
        "f16 parameters have masters"
    );
    let record = load_record::<B, _>(record_bytes::<B, _>(record));
    let mut resumed = config.init(SgdConfig::new().init());
    resumed = Optimizer::<Mlp<B>, B>::load_record(resumed, record);
    assert_eq!(resumed.loss_scale(), sam.loss_scale());
    let model = run(&mut resumed, model, second);
    assert_eq!(tensors(&model), tensors(&expected));
    assert_eq!(resumed.loss_scale(), uninterrupted.loss_scale());

    // Without the master weights the resumed run differs: they carry real state.
    let mut amnesic = config.init(SgdConfig::new().init());
    let partial = run(
        &mut config.init(SgdConfig::new().init()),
        problem.model.clone(),
        first,
    );
    let lost = run(&mut amnesic, partial, second);
    assert_ne!(tensors(&lost), tensors(&expected));
}

/// With PyTorch's initial scale 2^16 (itself infinite in f16) the first passes overflow
/// until the scale fits: nothing non-finite is written and training proceeds.
pub fn default_scale_backs_off_until_it_fits<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let (model, batch) = (problem.model, &problem.batches[0]);
    let mut sam = SamConfig::new()
        .with_loss_scaling(Some(LossScalerConfig::new()))
        .init(AdamConfig::new().init());
    let start = tensors(&model);
    let mut model = model;
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let perturbed = {
            let grads = scaled_grads(&sam, &model, batch);
            sam.ascend(0.1, model, grads).unwrap()
        };
        let grads = scaled_grads(&sam, &perturbed, batch);
        let (stepped, report) = sam.descend(1e-3, perturbed, grads).unwrap();
        outcomes.push(report.outcome);
        model = stepped;
    }
    // The ascent overflows and leaves the weights at `w`; the descent, at `w` with the same
    // scale, overflows too: the step is skipped and the scale backs off once.
    assert_eq!(
        outcomes[0],
        StepOutcome::UpdateSkipped,
        "2^16 overflows f16"
    );
    assert_eq!(sam.stats().ascents_skipped, sam.stats().updates_skipped);
    assert_eq!(*outcomes.last().unwrap(), StepOutcome::Applied);
    assert!(sam.loss_scale() < 65536.0);
    assert_ne!(tensors(&model), start);
}

/// f16 parameters on a device whose default float type is f32 (`cast_params`): Adam's f32
/// moments and the master weights survive a record round trip, and the run resumes exactly.
pub fn adam_resumes_exactly_with_cast_params<B: AutodiffBackend>() {
    assert_eq!(float_dtype::<B>(), DType::F32);
    let problem = problem::<B>(6);
    let to_f16 = |t: &Tensor<B, 2>| t.clone().cast(burn::tensor::FloatDType::F16);
    let batches: Vec<_> = problem
        .batches
        .iter()
        .map(|(x, y)| (to_f16(x), to_f16(y)))
        .collect();
    let model = burn_sam::cast_params(problem.model, burn::tensor::FloatDType::F16);
    assert_eq!(model.layers[0].weight.val().dtype(), DType::F16);
    let (first, second) = batches.split_at(3);
    let config =
        SamConfig::new().with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(512.0)));
    let run =
        |sam: &mut AdamSam<B>, mut model: Mlp<B>, batches: &[(Tensor<B, 2>, Tensor<B, 2>)]| {
            for (x, y) in batches {
                let step = sam.step_with(1e-3, model, |m: &Mlp<B>| {
                    mse(m.forward(x.clone()), y.clone())
                });
                let step = step.unwrap();
                assert_eq!(step.report.outcome, StepOutcome::Applied);
                model = step.module;
            }
            model
        };
    let mut uninterrupted = config.init(AdamConfig::new().init());
    let expected = run(&mut uninterrupted, model.clone(), &batches);

    let mut sam = config.init(AdamConfig::new().init());
    let model = run(&mut sam, model, first);
    let bytes = record_bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(&sam));
    let record = load_record::<B, _>(bytes);
    let mut resumed =
        Optimizer::<Mlp<B>, B>::load_record(config.init(AdamConfig::new().init()), record);
    let model = run(&mut resumed, model, second);
    assert_eq!(model.layers[0].weight.val().dtype(), DType::F16);
    assert_eq!(tensors(&model), tensors(&expected));
}
