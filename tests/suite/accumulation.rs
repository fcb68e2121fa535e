//! Gradient accumulation (`burn-sam-accum`): windows of micro-batches equal the large batch,
//! alone and with exact SAM; m-sharpness; partial windows; bad input.

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, ElementConversion, Tensor, TensorData};
use burn_sam::record::{MixedPrecisionRecord, SamRecord};
use burn_sam::strategy::{Linkable, Passes, Phases, StepLink};
use burn_sam::LossScaling;
use burn_sam::{
    LossScalerConfig, MixedPrecision, MixedPrecisionConfig, Sam, SamConfig, SamError, SamSchedule,
    SamVariant, StepOutcome,
};
use burn_sam_accum::{
    AccumError, Accumulation, AccumulationConfig, Ascent, MicroBatch, Window, WindowOptimizer,
};
use burn_sam_suite::{record_bytes, Mlp};

use super::util::{float_dtype, grads, mse, problem, tensors, tf32_matmul, TF32_UNIT_ROUNDOFF};

type Batch<B> = (Tensor<B, 2>, Tensor<B, 2>);

pub fn loss<B: AutodiffBackend>(model: &Mlp<B>, (x, y): &Batch<B>) -> Tensor<B, 1> {
    mse(model.forward(x.clone()), y.clone())
}

/// Rows of `batch` cut into consecutive micro-batches of `sizes` (with their item counts).
pub fn split<B: AutodiffBackend>(batch: &Batch<B>, sizes: &[usize]) -> Vec<MicroBatch<Batch<B>>> {
    let mut start = 0;
    let mut micro_batches = Vec::new();
    for &size in sizes {
        let rows = |t: &Tensor<B, 2>| t.clone().narrow(0, start, size);
        micro_batches.push(MicroBatch::with_items(
            (rows(&batch.0), rows(&batch.1)),
            size,
        ));
        start += size;
    }
    assert_eq!(start, batch.0.dims()[0], "the sizes cover the batch");
    micro_batches
}

/// The gradients in the module's parameter order, as f64.
fn values<B: AutodiffBackend>(model: &Mlp<B>, grads: &GradientsParams) -> Vec<Vec<f64>> {
    let mut all = Vec::new();
    for layer in &model.layers {
        let weight = grads.get::<B::InnerBackend, 2>(layer.weight.id).unwrap();
        all.push(weight.into_data().iter::<f64>().collect());
        let bias = layer.bias.as_ref().unwrap();
        let bias = grads.get::<B::InnerBackend, 1>(bias.id).unwrap();
        all.push(bias.into_data().iter::<f64>().collect());
    }
    all
}

/// `||a - b|| / ||b||` over all values.
fn relative_error(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let pairs = a.iter().flatten().zip(b.iter().flatten());
    let diff: f64 = pairs.map(|(a, b)| (a - b).powi(2)).sum();
    let norm: f64 = b.iter().flatten().map(|b| b * b).sum();
    assert_eq!(a.iter().flatten().count(), b.iter().flatten().count());
    (diff / norm).sqrt()
}

/// The bound in f32; f64 sums agree to rounding. With TF32 matmul inputs, two
/// computations of one gradient differ by up to twice the inputs' unit roundoff (both
/// factors of each product rounded).
fn accumulation_tolerance<B: AutodiffBackend>() -> f64 {
    match float_dtype::<B>() {
        DType::F64 => 1e-12,
        _ if tf32_matmul() => 2.0 * TF32_UNIT_ROUNDOFF,
        _ => 1e-5,
    }
}

pub fn micro_batch_gradients_equal_the_union<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let (model, batch) = (problem.model, &problem.batches[0]);
    let union = values(&model, &grads(&model, loss(&model, batch)));
    for sizes in [&[3, 4, 1][..], &[1, 7], &[8], &[2, 2, 2, 2]] {
        let micro_batches = split(batch, sizes);
        let mut loss = loss::<B>;
        let mut window = Window::new(&micro_batches, &mut loss).unwrap();
        let accumulated = window.gradient(&model, &StepLink::plain()).unwrap();
        let error = relative_error(&values(&model, &accumulated), &union);
        assert!(
            error <= accumulation_tolerance::<B>(),
            "{sizes:?}: {error:e}"
        );
        let window_loss = window.loss().unwrap().into_scalar().elem::<f64>();
        let union_loss = loss(&model, batch).into_scalar().elem::<f64>();
        assert!(
            (window_loss - union_loss).abs() <= 1e-5 * union_loss,
            "{sizes:?}"
        );
    }
    // Without item counts, equal sizes weigh equally; uneven ones do not equal the union.
    let unweighted = |sizes| -> Vec<MicroBatch<Batch<B>>> {
        split(batch, sizes)
            .into_iter()
            .map(|micro_batch| MicroBatch::new(micro_batch.data))
            .collect()
    };
    let gradient = |micro_batches: &[MicroBatch<Batch<B>>]| {
        let mut loss = loss::<B>;
        let mut window = Window::new(micro_batches, &mut loss).unwrap();
        values(
            &model,
            &window.gradient(&model, &StepLink::plain()).unwrap(),
        )
    };
    let error = relative_error(&gradient(&unweighted(&[4, 4])), &union);
    assert!(
        error <= accumulation_tolerance::<B>(),
        "equal sizes: {error:e}"
    );
    let error = relative_error(&gradient(&unweighted(&[1, 7])), &union);
    assert!(error > 1e-3, "uneven sizes need their item counts");
}

fn trajectory_tolerance<B: AutodiffBackend>() -> f64 {
    accumulation_tolerance::<B>() * 10.0
}

/// Five steps of SGD with momentum: accumulated over uneven micro-batches, on the union.
pub fn plain_trajectory_equals_the_large_batch<B: AutodiffBackend>() {
    let problem = problem::<B>(5);
    let sgd = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init()
    };
    let sizes: [&[usize]; 5] = [&[3, 4, 1], &[5, 3], &[1, 1, 6], &[8], &[2, 2, 4]];

    let mut optim = sgd();
    let mut expected = problem.model.clone();
    for batch in &problem.batches {
        let grads = grads(&expected, loss(&expected, batch));
        expected = optim.step(0.1, expected, grads);
    }

    let mut accumulation = AccumulationConfig::new(3).init(sgd());
    let mut model = problem.model.clone();
    for (batch, sizes) in problem.batches.iter().zip(sizes) {
        let step = accumulation
            .step(0.1, model, &split(batch, sizes), loss::<B>)
            .unwrap();
        assert!(step.report.applied && step.report.grad_norm > 0.0);
        assert_eq!(step.report.micro_batches, sizes.len());
        model = step.module;
    }
    let error = relative_error(&tensors(&model), &tensors(&expected));
    assert!(error <= trajectory_tolerance::<B>(), "{error:e}");
    assert_ne!(tensors(&model), tensors(&problem.model));
}

/// Five steps of exact SAM (SGD with momentum), of each variant and under schedules (a base
/// step in a window takes one pass over it): accumulated, and on the union.
pub fn exact_sam_trajectory_equals_the_large_batch<B: AutodiffBackend>() {
    let problem = problem::<B>(5);
    let sizes: [&[usize]; 5] = [&[3, 4, 1], &[5, 3], &[1, 1, 6], &[8], &[2, 2, 4]];
    let sam = SamConfig::new().with_rho(0.1);
    let adaptive = SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: 0.5,
        steps: 5,
    };
    let mut configs: Vec<SamConfig> = [
        SamVariant::Sam,
        SamVariant::Gsam { alpha: 0.3 },
        SamVariant::LookSam { k: 2, alpha: 0.7 },
        SamVariant::friendly_sam(),
        SamVariant::momentum_sam(),
    ]
    .map(|variant| sam.clone().with_variant(variant))
    .into();
    configs.push(sam.clone().with_schedule(Some(SamSchedule::Every { k: 3 })));
    configs.push(sam.clone().with_schedule(Some(adaptive)));
    for config in configs {
        let what = format!("{} {:?}", config.variant.name(), config.schedule);
        let sam = || {
            let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new()));
            config.init(sgd.init())
        };
        let mut optim = sam();
        let mut expected = problem.model.clone();
        let mut outcomes = Vec::new();
        for batch in &problem.batches {
            let step = optim.step_with(0.1, expected, |m: &Mlp<B>| loss(m, batch));
            let step = step.unwrap();
            outcomes.push(step.report.outcome);
            expected = step.module;
        }

        let mut accumulation = AccumulationConfig::new(3).init(sam());
        let mut model = problem.model.clone();
        for ((batch, sizes), outcome) in problem.batches.iter().zip(sizes).zip(&outcomes) {
            let two_passes = accumulation.optimizer().passes() == Passes::Two;
            let step = accumulation
                .step(0.1, model, &split(batch, sizes), loss::<B>)
                .unwrap();
            let report = step.report.sam.expect("a SAM report");
            assert!(step.report.applied);
            assert_eq!(report.outcome, *outcome, "{what}");
            assert!(
                two_passes || report.outcome != StepOutcome::Applied,
                "{what}"
            );
            assert!(report.outcome != StepOutcome::Applied || report.ascent_grad_norm > 0.0);
            model = step.module;
        }
        if config.schedule.is_some() {
            assert!(
                outcomes.contains(&StepOutcome::BaseStep),
                "{what}: {outcomes:?}"
            );
        }
        let error = relative_error(&tensors(&model), &tensors(&expected));
        assert!(error <= trajectory_tolerance::<B>(), "{what}: {error:e}");
        assert_eq!(accumulation.optimizer().stats().steps, 5, "{what}");
    }
}

/// A partial window steps with what it holds, normalised by what it holds: the same as one
/// step on the union of its micro-batches, whatever the configured window.
pub fn partial_window_equals_its_union<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let mut expected_optim = SamConfig::new().init(SgdConfig::new().init());
    let expected = expected_optim
        .step_with(0.1, problem.model.clone(), |m: &Mlp<B>| loss(m, batch))
        .unwrap()
        .module;

    let sam = SamConfig::new().init(SgdConfig::new().init());
    let mut accumulation = AccumulationConfig::new(8).init(sam);
    let step = accumulation
        .step(
            0.1,
            problem.model.clone(),
            &split(batch, &[3, 5]),
            loss::<B>,
        )
        .unwrap();
    let error = relative_error(&tensors(&step.module), &tensors(&expected));
    assert!(error <= trajectory_tolerance::<B>(), "{error:e}");

    // `windows` ends an epoch with the rest: 10 micro-batches in windows of 4 -> 4, 4, 2.
    let sizes: Vec<usize> = accumulation.windows(0..10).map(|w| w.len()).collect();
    assert_eq!(sizes, [8, 2]);
    let accumulation = AccumulationConfig::new(4).init(());
    let windows: Vec<Vec<i32>> = accumulation.windows(0..10).collect();
    assert_eq!(windows, [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    assert_eq!(accumulation.windows(0..0).count(), 0, "no empty window");
}

/// m-sharpness over windows of one micro-batch is SAM, bit for bit.
pub fn per_micro_batch_windows_of_one_equal_sam<B: AutodiffBackend>() {
    let problem = problem::<B>(5);
    let sam = || {
        let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new()));
        SamConfig::new().with_rho(0.1).init(sgd.init())
    };
    let mut optim = sam();
    let mut expected = problem.model.clone();
    for batch in &problem.batches {
        let step = optim.step_with(0.1, expected, |m: &Mlp<B>| loss(m, batch));
        expected = step.unwrap().module;
    }
    let mut accumulation = AccumulationConfig::new(1)
        .with_ascent(Ascent::Local)
        .init(sam());
    let mut model = problem.model.clone();
    for batch in &problem.batches {
        let window = [MicroBatch::new(batch.clone())];
        model = accumulation
            .step(0.1, model, &window, loss::<B>)
            .unwrap()
            .module;
    }
    assert_eq!(tensors(&model), tensors(&expected));
}

/// Replaces the values of every parameter (ids kept), for the hand-written reference.
fn with_values<B: AutodiffBackend>(model: &Mlp<B>, values: &[Vec<f64>]) -> Mlp<B> {
    struct Set<'a>(std::slice::Iter<'a, Vec<f64>>);
    impl<B: AutodiffBackend> ModuleMapper<B> for Set<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let data = TensorData::new(self.0.next().unwrap().clone(), tensor.shape());
            let dtype = tensor.dtype();
            let tensor = Tensor::from_data(data, (&tensor.device(), dtype)).require_grad();
            Param::from_mapped_value(id, tensor, mapper)
        }
    }
    model.clone().map(&mut Set(values.iter()))
}

/// m-sharpness against a hand-written reference: each micro-batch `i` is perturbed by
/// `rho * g_i / ||g_i||`, the descent gradients are weighted by item count, one SGD step.
pub fn per_micro_batch_matches_its_definition<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let (model, batch) = (problem.model, &problem.batches[0]);
    let (rho, lr, sizes) = (0.2, 0.1, [3, 5]);
    let micro_batches = split(batch, &sizes);
    let w = tensors(&model);
    let mut expected = w.clone();
    for (micro_batch, &size) in micro_batches.iter().zip(&sizes) {
        let g = values(&model, &grads(&model, loss(&model, &micro_batch.data)));
        let norm = g.iter().flatten().map(|g| g * g).sum::<f64>().sqrt();
        let moved: Vec<Vec<f64>> = w
            .iter()
            .zip(&g)
            .map(|(w, g)| w.iter().zip(g).map(|(w, g)| w + rho * g / norm).collect())
            .collect();
        let perturbed = with_values(&model, &moved);
        let d = values(
            &perturbed,
            &grads(&perturbed, loss(&perturbed, &micro_batch.data)),
        );
        let share = size as f64 / 8.0;
        for (e, d) in expected.iter_mut().zip(&d) {
            e.iter_mut().zip(d).for_each(|(e, d)| *e -= lr * share * d);
        }
    }

    let sam = SamConfig::new().with_rho(rho).init(SgdConfig::new().init());
    let mut accumulation = AccumulationConfig::new(2)
        .with_ascent(Ascent::Local)
        .init(sam);
    let step = accumulation
        .step(lr, model.clone(), &micro_batches, loss::<B>)
        .unwrap();
    let error = relative_error(&tensors(&step.module), &expected);
    assert!(error <= trajectory_tolerance::<B>(), "{error:e}");
    // Not the same as exact SAM on the union.
    let sam = SamConfig::new().with_rho(rho).init(SgdConfig::new().init());
    let mut exact = AccumulationConfig::new(2).init(sam);
    let exact = exact.step(lr, model, &micro_batches, loss::<B>).unwrap();
    assert!(relative_error(&tensors(&exact.module), &expected) > 1e-4);
}

/// Bad windows are refused by name, step nothing and hand the module back intact.
pub fn bad_windows_are_refused<B: AutodiffBackend>() {
    let seeded = problem::<B>(1);
    let (model, batch) = (seeded.model, &seeded.batches[0]);
    let sam = SamConfig::new().init(SgdConfig::new().init());
    let mut accumulation = AccumulationConfig::new(2).init(sam);
    let mut refuse = |window: &[MicroBatch<Batch<B>>]| {
        let failed = accumulation
            .step(0.1, model.clone(), window, loss::<B>)
            .unwrap_err();
        let error = failed.error;
        assert_eq!(tensors(&failed.module), tensors(&model), "{error}");
        assert_eq!(accumulation.optimizer().stats().steps, 0, "{error}");
        assert!(
            accumulation.optimizer().pending_ascent::<B>().is_none(),
            "{error}"
        );
        error
    };
    assert_eq!(refuse(&[]), AccumError::EmptyWindow);
    let three = split(batch, &[3, 3, 2]);
    assert_eq!(
        refuse(&three),
        AccumError::WindowTooLong {
            micro_batches: 3,
            window: 2
        }
    );
    let zero = [
        MicroBatch::with_items(batch.clone(), 8),
        MicroBatch::with_items(batch.clone(), 0),
    ];
    let error = refuse(&zero);
    assert_eq!(error, AccumError::ZeroItems { index: 1 });
    assert!(
        error.to_string().contains("micro-batch 1 holds 0 items"),
        "{error}"
    );
    let mixed = [
        MicroBatch::with_items(batch.clone(), 8),
        MicroBatch::new(batch.clone()),
    ];
    assert_eq!(refuse(&mixed), AccumError::MixedItemCounts);
    let error = AccumulationConfig::new(0).try_init(()).unwrap_err();
    assert!(error.to_string().contains("`window` = 0"), "{error}");

    // m-sharpness perturbs each micro-batch on its own: only plain SAM defines that.
    let gsam = SamConfig::new()
        .with_variant(SamVariant::gsam())
        .init(SgdConfig::new().init());
    let mut accumulation = AccumulationConfig::new(2)
        .with_ascent(Ascent::Local)
        .init(gsam);
    let failed = accumulation
        .step(0.1, model.clone(), &split(batch, &[4, 4]), loss::<B>)
        .unwrap_err();
    assert_eq!(
        failed.error,
        AccumError::Optimizer(SamError::LocalAscentVariant { variant: "GSAM" })
    );
    assert_eq!(tensors(&failed.module), tensors(&model));
    assert!(failed.to_string().contains("Ascent::Synced"), "{failed}");

    // A loss computed with another module than the one the closure gets.
    let other = problem::<B>(1).model;
    let mut accumulation = AccumulationConfig::new(2).init(SgdConfig::new().init());
    let failed = accumulation
        .step(
            0.1,
            model.clone(),
            &split(batch, &[4, 4]),
            |_: &Mlp<B>, b: &Batch<B>| loss(&other, b),
        )
        .unwrap_err();
    assert_eq!(failed.error, AccumError::LossWithoutModule { index: 0 });
    assert_eq!(tensors(&failed.module), tensors(&model));
    assert!(
        failed.to_string().contains("module passed to the closure"),
        "{failed}"
    );
}

/// A failure between SAM's passes (here a loss that stops depending on the module at the
/// `fail_at`-th evaluation) puts the unperturbed weights back and hands them over.
pub fn failure_between_passes_restores_the_weights<B: AutodiffBackend>() {
    let seeded = problem::<B>(1);
    let (model, batch) = (seeded.model, &seeded.batches[0]);
    let other = problem::<B>(1).model;
    // Exact: 2 ascent evaluations, then the descent's. Per micro-batch: ascent 0, descent 0,
    // ascent 1, descent 1.
    for (mode, fail_at) in [
        (Ascent::Synced, 2),
        (Ascent::Synced, 3),
        (Ascent::Local, 1),
        (Ascent::Local, 2),
        (Ascent::Local, 3),
    ] {
        let sam = SamConfig::new().with_rho(0.5).init(SgdConfig::new().init());
        let mut accumulation = AccumulationConfig::new(2).with_ascent(mode).init(sam);
        let mut calls = 0;
        let failed = accumulation
            .step(
                0.1,
                model.clone(),
                &split(batch, &[4, 4]),
                |m: &Mlp<B>, b: &Batch<B>| {
                    calls += 1;
                    loss(if calls > fail_at { &other } else { m }, b)
                },
            )
            .unwrap_err();
        assert!(
            matches!(failed.error, AccumError::LossWithoutModule { .. }),
            "{mode:?} {fail_at}: {}",
            failed.error
        );
        assert_eq!(
            tensors(&failed.module),
            tensors(&model),
            "{mode:?} {fail_at}"
        );
        let sam = accumulation.optimizer();
        assert!(sam.pending_ascent::<B>().is_none(), "{mode:?} {fail_at}");
        assert_eq!(sam.stats().steps, 0, "{mode:?} {fail_at}");
    }
}

/// The optimizer's state without the loss scaler, byte for byte: the base optimizer's
/// entries and the f32 master weights, sorted by parameter id.
fn state_bytes<B, Base, R>(base: Base, own: MixedPrecisionRecord) -> Vec<(String, Vec<u8>)>
where
    B: AutodiffBackend,
    Base: IntoIterator<Item = (ParamId, R)>,
    R: Record<B>,
{
    let mut state: Vec<_> = base
        .into_iter()
        .map(|(id, record)| (id.serialize(), record_bytes::<B, _>(record)))
        .collect();
    for master in own.master_weights {
        let bytes = master.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        state.push((format!("master {}", master.id), bytes));
    }
    state.sort();
    state
}

/// One clean window (Adam gets moments), the overflowing window, one clean window.
fn skips_the_window<B, O, Base, R, X>(
    mut accumulation: Accumulation<O>,
    loss_scale: fn(&O) -> f32,
    mixed_precision: fn(X) -> MixedPrecisionRecord,
    model: Mlp<B>,
    clean: &[MicroBatch<Batch<B>>],
    overflowing: &[MicroBatch<Batch<B>>],
) where
    B: AutodiffBackend,
    O: WindowOptimizer<Mlp<B>, B> + Optimizer<Mlp<B>, B, Record = (Base, X)>,
    Base: IntoIterator<Item = (ParamId, R)>,
    R: Record<B>,
{
    let state = |optimizer: &O| {
        let (base, own) = optimizer.to_record();
        state_bytes::<B, _, _>(base, mixed_precision(own))
    };
    let what = core::any::type_name::<O>();
    let step = accumulation.step(1e-3, model, clean, loss::<B>).unwrap();
    assert!(step.report.applied, "{what}: {:?}", step.report);
    let (weights, before) = (tensors(&step.module), state(accumulation.optimizer()));
    assert!(
        before.iter().any(|(id, _)| id.starts_with("master")),
        "{what}: f32 masters"
    );
    let scale = loss_scale(accumulation.optimizer());

    let step = accumulation
        .step(1e-3, step.module, overflowing, loss::<B>)
        .unwrap();
    assert!(!step.report.applied, "{what}: {:?}", step.report);
    assert_eq!(
        step.report.loss_scale, scale,
        "{what}: one scale for the window"
    );
    assert_eq!(tensors(&step.module), weights, "{what}: weights");
    assert!(
        state(accumulation.optimizer()) == before,
        "{what}: optimizer state changed"
    );
    assert_eq!(
        loss_scale(accumulation.optimizer()),
        scale / 2.0,
        "{what}: one back-off"
    );

    let step = accumulation
        .step(1e-3, step.module, clean, loss::<B>)
        .unwrap();
    assert!(step.report.applied, "{what}: {:?}", step.report);
    assert_eq!(loss_scale(accumulation.optimizer()), scale / 2.0, "{what}");
    assert_ne!(tensors(&step.module), weights, "{what}");
}

/// f16 on a real f16 backend: the window's gradient accumulates in f32, an overflow in one
/// micro-batch skips the whole window (weights and optimizer state bitwise unchanged) and
/// backs the scale off once; the next window steps.
pub fn overflow_in_one_micro_batch_skips_the_window<B: AutodiffBackend>() {
    assert_eq!(float_dtype::<B>(), DType::F16);
    let problem = problem::<B>(2);
    let (model, clean, batch) = (problem.model, &problem.batches[0], &problem.batches[1]);
    let clean = split(clean, &[5, 3]);
    // A target of 1e4 makes the middle micro-batch's scaled f16 gradients infinite.
    let mut overflowing = split(batch, &[3, 3, 2]);
    let y = &mut overflowing[1].data.1;
    *y = y.clone().mul_scalar(0.0).add_scalar(1e4);

    let scaling = LossScalerConfig::new().with_init_scale(256.0);
    let scale = MixedPrecisionConfig::new(scaling.clone())
        .init(())
        .step_link();
    let mut loss_fn = loss::<B>;
    let mut window = Window::new(&overflowing, &mut loss_fn).unwrap();
    let gradient = window.gradient(&model, &scale).unwrap();
    let id = model.layers[0].weight.id;
    let first = gradient.get::<B::InnerBackend, 2>(id).unwrap();
    assert_eq!(first.dtype(), DType::F32, "f16 gradients accumulate in f32");
    assert!(!burn_sam::grad_norm(&model, &gradient).unwrap().is_finite());

    let adam = || AdamConfig::new().init();
    let scaled = MixedPrecisionConfig::new(scaling.clone()).init(adam());
    let accumulation = AccumulationConfig::new(3).init(scaled);
    let scale = |o: &MixedPrecision<_>| o.loss_scale();
    skips_the_window(
        accumulation,
        scale,
        |r| r,
        model.clone(),
        &clean,
        &overflowing,
    );
    for mode in [Ascent::Synced, Ascent::Local] {
        let sam = SamConfig::new()
            .with_loss_scaling(Some(scaling.clone()))
            .init(adam());
        let accumulation = AccumulationConfig::new(3).with_ascent(mode).init(sam);
        let scale = |o: &Sam<_>| o.loss_scale();
        let masters = |r: SamRecord| r.mixed_precision;
        skips_the_window(
            accumulation,
            scale,
            masters,
            model.clone(),
            &clean,
            &overflowing,
        );
    }
}
