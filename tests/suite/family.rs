//! The SAM family (GSAM, LookSAM, Friendly-SAM, the radius schedule, perturbing only some
//! parameters) against PyTorch references in f64 (`reference/family_reference.py` wrote
//! `tests/fixtures/family_reference.json`: pytorch_optimizer 4.1.0's LookSAM and
//! FriendlySAM, the GSAM authors' algorithm), and what the variants promise beyond a
//! trajectory: one pass on LookSAM's cheap steps, state that resumes from a record.

use std::collections::HashMap;

use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::{RhoSchedule, Sam, SamConfig, SamVariant};
use burn_sam_suite::{load_record, record_bytes, Mlp};
use serde::Deserialize;

use super::fixture::{fixture_case, FixtureMlp};
use super::parity::torch_sgd;
use super::util::{assert_close, batch_grads, mse, narrow_scalars, problem, tensors, tolerance};

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Variant {
    Sam,
    Gsam { alpha: f64 },
    Looksam { k: usize, alpha: f64 },
    Fsam { sigma: f64, lambda: f64 },
}

#[derive(Deserialize)]
struct Case {
    #[serde(flatten)]
    mlp: FixtureMlp,
    variant: Variant,
    options: HashMap<String, f64>,
    rho: f64,
    schedule: Option<(f64, f64, f64)>,
    perturb_only: Option<Vec<String>>,
    lrs: Vec<f64>,
    trajectory: Vec<Vec<Vec<f64>>>,
}

fn case(name: &str) -> Case {
    fixture_case(include_str!("../fixtures/family_reference.json"), name)
}

impl Case {
    fn config(&self) -> SamConfig {
        let variant = match self.variant {
            Variant::Sam => SamVariant::Sam,
            Variant::Gsam { alpha } => SamVariant::Gsam { alpha },
            Variant::Looksam { k, alpha } => SamVariant::LookSam { k, alpha },
            Variant::Fsam { sigma, lambda } => SamVariant::FriendlySam { sigma, lambda },
        };
        SamConfig::new()
            .with_rho(self.rho)
            .with_variant(variant)
            .with_rho_schedule(
                self.schedule
                    .map(|(lr_min, lr_max, rho_min)| RhoSchedule::new(lr_min, lr_max, rho_min)),
            )
            .with_perturb_only(self.perturb_only.clone())
    }
}

/// Follows the reference with `step_with`, counting the loss closure's calls, and again with
/// `Optimizer::step` after each pass (as a training strategy drives it); both must match
/// every step.
pub fn run<B: AutodiffBackend>(name: &str) {
    let case = case(name);
    let config = case.config();
    let tolerance = tolerance::<B>();

    let mut sam = config.init(torch_sgd::<B>(&case.options));
    let mut model = case.mlp.model::<B>();
    let mut calls = 0;
    let mut two_pass_steps = 0;
    for (step, (expected, &lr)) in case.trajectory.iter().zip(&case.lrs).enumerate() {
        let (x, y) = case.mlp.batch::<B>(step);
        two_pass_steps += usize::from(sam.needs_ascent());
        let loss = |model: &Mlp<B>| {
            calls += 1;
            mse(model.forward(x.clone()), y.clone())
        };
        model = sam.step_with(lr, model, loss).unwrap().module;
        let what = format!("{name} step {} (step_with)", step + 1);
        assert_close(&tensors(&model), expected, tolerance, &what);
    }
    let steps = case.trajectory.len();
    assert_eq!(
        calls,
        steps + two_pass_steps,
        "{name}: one loss evaluation per pass"
    );
    if let Variant::Looksam { k, .. } = case.variant {
        assert_eq!(
            two_pass_steps,
            steps.div_ceil(k),
            "{name}: full steps 0, k, 2k, ..."
        );
    } else {
        assert_eq!(two_pass_steps, steps, "{name}: every step takes two passes");
    }

    let mut optim = config.init(torch_sgd::<B>(&case.options)).step_per_pass();
    let mut model = case.mlp.model::<B>();
    for (step, (expected, &lr)) in case.trajectory.iter().zip(&case.lrs).enumerate() {
        let batch = case.mlp.batch::<B>(step);
        let passes = if optim.needs_ascent() { 2 } else { 1 };
        for _pass in 0..passes {
            let grads = batch_grads(&model, &batch);
            model = optim.step(lr, model, grads);
        }
        let what = format!("{name} step {} (Optimizer::step)", step + 1);
        assert_close(&tensors(&model), expected, tolerance, &what);
    }
}

/// Runs `sam` over `batches` with the phases, one pass where the step takes one.
fn steps<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    sam: &mut Sam<O>,
    mut model: Mlp<B>,
    batches: &[(Tensor<B, 2>, Tensor<B, 2>)],
    lr: f64,
) -> Mlp<B> {
    for batch in batches {
        let mut grads = batch_grads(&model, batch);
        if sam.needs_ascent() {
            model = sam.ascend(lr, model, grads).unwrap();
            grads = batch_grads(&model, batch);
        }
        model = sam.descend(lr, model, grads).unwrap().0;
    }
    model
}

/// Every variant's state (LookSAM's cycle and kept direction, Friendly-SAM's momentum) is in
/// the record: saved mid-cycle, loaded into a fresh optimizer, continued, it equals the
/// uninterrupted run; without it, the run differs.
pub fn records_resume_every_variant_exactly<B: AutodiffBackend>() {
    let problem = problem::<B>(7);
    let (first, second) = problem.batches.split_at(4);
    let lr = 0.05;
    for variant in [
        SamVariant::gsam(),
        SamVariant::LookSam { k: 3, alpha: 0.7 },
        SamVariant::friendly_sam(),
    ] {
        let config = SamConfig::new().with_rho(0.1).with_variant(variant.clone());
        let sgd = || torch_sgd::<B>(&HashMap::from([("momentum".to_string(), 0.9)]));
        let expected = steps(
            &mut config.init(sgd()),
            problem.model.clone(),
            &problem.batches,
            lr,
        );

        let mut optim = config.init(sgd());
        let model = steps(&mut optim, problem.model.clone(), first, lr);
        let bytes = record_bytes::<B, _>(optim.to_record());
        let mut resumed = config.init(sgd()).load_record(load_record::<B, _>(bytes));
        let model = steps(&mut resumed, model, second, lr);
        let what = format!("{} resumed", variant.name());
        if narrow_scalars::<B>() {
            assert_close(&tensors(&model), &tensors(&expected), 1e-8, &what);
        } else {
            assert_eq!(tensors(&model), tensors(&expected), "{what}");
        }

        if variant == SamVariant::gsam() {
            continue; // GSAM keeps nothing between steps.
        }
        // Only the base optimizer's state: the variant's own is lost.
        let mut optim = config.init(sgd());
        let model = steps(&mut optim, problem.model.clone(), first, lr);
        let (base, mut own) = optim.to_record();
        own.variant = Default::default();
        let mut amnesic = config.init(sgd()).load_record((base, own));
        let lost = steps(&mut amnesic, model, second, lr);
        assert_ne!(tensors(&lost), tensors(&expected), "{what}: state matters");
    }
}

/// A LookSAM one-pass step refuses `ascend` and hands the module back; GSAM with `alpha` 0
/// and Friendly-SAM with `sigma` 0 are SAM exactly; LookSAM with `k` 1 is SAM.
pub fn variants_reduce_to_sam<B: AutodiffBackend>() {
    let problem = problem::<B>(4);
    let lr = 0.05;
    let sam = steps(
        &mut SamConfig::new()
            .with_rho(0.1)
            .init(torch_sgd::<B>(&HashMap::new())),
        problem.model.clone(),
        &problem.batches,
        lr,
    );
    for variant in [
        SamVariant::Gsam { alpha: 0.0 },
        SamVariant::FriendlySam {
            sigma: 0.0,
            lambda: 0.9,
        },
        SamVariant::LookSam { k: 1, alpha: 0.7 },
    ] {
        let config = SamConfig::new().with_rho(0.1).with_variant(variant.clone());
        let mut optim = config.init(torch_sgd::<B>(&HashMap::new()));
        let model = steps(&mut optim, problem.model.clone(), &problem.batches, lr);
        assert_close(
            &tensors(&model),
            &tensors(&sam),
            tolerance::<B>() * 1e-2,
            variant.name(),
        );
    }

    let config = SamConfig::new().with_variant(SamVariant::LookSam { k: 2, alpha: 0.7 });
    let mut optim = config.init(torch_sgd::<B>(&HashMap::new()));
    let model = steps(&mut optim, problem.model.clone(), &problem.batches[..1], lr);
    assert!(
        !optim.needs_ascent(),
        "step 1 of a k = 2 cycle takes one pass"
    );
    let grads: GradientsParams = batch_grads(&model, &problem.batches[1]);
    let failed = optim.ascend(lr, model.clone(), grads).unwrap_err();
    assert_eq!(failed.error, burn_sam::SamError::SinglePassStep);
    assert_eq!(tensors(&failed.module), tensors(&model));
    assert!(
        failed.error.to_string().contains("descend"),
        "{}",
        failed.error
    );
}

/// `perturb_only` names that pick nothing are refused with the module handed back; a module
/// type picks the parameters inside it.
pub fn perturb_only_picks_by_type_and_path<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let lr = 0.05;
    let batch = &problem.batches[0];
    let perturbed = |names: &[&str]| {
        let names = names.iter().map(|name| name.to_string()).collect();
        let mut sam = SamConfig::new()
            .with_rho(0.1)
            .with_perturb_only(Some(names))
            .init(torch_sgd::<B>(&HashMap::new()));
        let grads = batch_grads(&problem.model, batch);
        sam.ascend(lr, problem.model.clone(), grads)
    };
    let start = tensors(&problem.model);
    let moved = |model: &Mlp<B>| -> Vec<bool> {
        tensors(model)
            .iter()
            .zip(&start)
            .map(|(after, before)| after != before)
            .collect()
    };
    // Mlp { layers: Vec<Linear> }: weight and bias of layers 0 and 1.
    let everything = moved(&perturbed(&["Linear"]).unwrap());
    assert_eq!(everything, [true, true, true, true]);
    let last = moved(&perturbed(&["layers.1"]).unwrap());
    assert_eq!(last, [false, false, true, true]);
    let bias = moved(&perturbed(&["layers.0.bias"]).unwrap());
    assert_eq!(bias, [false, true, false, false]);
    let failed = perturbed(&["layers.2", "BatchNorm"]).unwrap_err();
    assert!(
        matches!(failed.error, burn_sam::SamError::NothingPicked { .. }),
        "{}",
        failed.error
    );
    assert_eq!(tensors(&failed.module), start);
    let error = SamConfig::new()
        .with_perturb_only(Some(vec![]))
        .validate()
        .unwrap_err();
    assert_eq!(error.field, "perturb_only");
}
