//! A resumed f16 run is the run that was saved: the model and the optimizer saved through a
//! full-precision recorder, loaded into a freshly built model and optimizer as a checkpoint
//! does, continue bitwise with f16 parameters after `resume`; a model that was not put back,
//! an f16-default device that rounded the base optimizer's state, and a model of another
//! checkpoint are refused with burn-sam's message, the module handed back.

use burn::module::Module;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamWConfig, Optimizer, SgdConfig};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, HalfPrecisionSettings};
use burn::record::{Record, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor};
use burn_sam::{cast_params, LossScalerConfig, LossScaling, Sam, SamConfig, SamError, SamVariant};
use burn_sam_accum::{AccumError, Accumulation, AccumulationConfig};
use burn_sam_suite::{load_record, record_bytes, Mlp, MlpConfig};

use super::accumulation::{loss, split};
use super::util::{float_dtype, mse, problem, tensors};

type Batch<B> = (Tensor<B, 2>, Tensor<B, 2>);

/// The base optimizers of the issue: SGD with momentum, AdamW with weight decay, and SGD
/// without state (which an f16-default device resumes).
#[derive(Clone, Copy, Debug)]
pub enum Base {
    SgdMomentum,
    AdamW,
    Sgd,
}

fn bytes<B: Backend, R: Record<B>>(record: R, full: bool) -> Vec<u8> {
    match full {
        true => BinBytesRecorder::<FullPrecisionSettings>::default().record(record, ()),
        false => BinBytesRecorder::<HalfPrecisionSettings>::default().record(record, ()),
    }
    .expect("a record serializes")
}

fn load<B: Backend, R: Record<B>>(bytes: Vec<u8>, full: bool) -> R {
    let device = Default::default();
    match full {
        true => BinBytesRecorder::<FullPrecisionSettings>::default().load(bytes, &device),
        false => BinBytesRecorder::<HalfPrecisionSettings>::default().load(bytes, &device),
    }
    .expect("a record loads")
}

/// One run of `variant` over `base`, saved after `first` steps and resumed as a checkpoint
/// is, in a fresh model and optimizer.
struct Run<B: AutodiffBackend> {
    variant: SamVariant,
    base: Base,
    model: Mlp<B>,
    batches: Vec<Batch<B>>,
}

impl<B: AutodiffBackend> Run<B> {
    /// The suite's problem with f16 parameters and inputs (cast on an f32-default device).
    fn new(variant: SamVariant, base: Base) -> Self {
        let problem = problem::<B>(6);
        let half = |t: &Tensor<B, 2>| t.clone().cast(FloatDType::F16);
        Self {
            variant,
            base,
            model: cast_params(problem.model, FloatDType::F16),
            batches: problem
                .batches
                .iter()
                .map(|(x, y)| (half(x), half(y)))
                .collect(),
        }
    }

    fn config(&self) -> SamConfig {
        let scaling = LossScalerConfig::new()
            .with_init_scale(256.0)
            .with_growth_interval(2);
        let rho = match self.variant {
            SamVariant::MomentumSam { .. } => 0.5,
            _ => 0.05,
        };
        SamConfig::new()
            .with_rho(rho)
            .with_variant(self.variant.clone())
            .with_loss_scaling(Some(scaling))
    }

    fn steps<O: Optimizer<Mlp<B>, B>>(
        &self,
        optim: &mut Sam<O>,
        mut model: Mlp<B>,
        batches: &[Batch<B>],
    ) -> Mlp<B> {
        for (x, y) in batches {
            let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
            model = optim.step_with(1e-2, model, loss).unwrap().module;
        }
        model
    }

    fn check(self) {
        match self.base {
            Base::SgdMomentum => {
                let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new()));
                self.check_with(|| sgd.init())
            }
            Base::AdamW => self.check_with(|| AdamWConfig::new().with_weight_decay(0.1).init()),
            Base::Sgd => self.check_with(|| SgdConfig::new().init()),
        }
    }

    fn check_with<O: Optimizer<Mlp<B>, B>>(&self, base: impl Fn() -> O) {
        let what = format!("{} over {:?}", self.variant.name(), self.base);
        let init = || self.config().init(base());
        let expected = self.steps(&mut init(), self.model.clone(), &self.batches);
        let (first, second) = self.batches.split_at(3);
        let mut optim = init();
        let model = self.steps(&mut optim, self.model.clone(), first);
        optim.label_model(&model);
        let saved = (
            bytes::<B, _>(model.clone().into_record(), true),
            bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(&optim), true),
        );

        // As a checkpoint loads: into a model built afresh (other weights) and a fresh optimizer.
        let resumed = || {
            let fresh = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
            let fresh = cast_params(fresh, FloatDType::F16);
            let model = fresh.load_record(load::<B, _>(saved.0.clone(), true));
            let record = load::<B, _>(saved.1.clone(), true);
            (model, Optimizer::<Mlp<B>, B>::load_record(init(), record))
        };
        let stateful = !matches!(self.base, Base::Sgd);
        let (model, mut optim) = resumed();
        let loaded = model.layers[0].weight.val().dtype();
        if float_dtype::<B>() == DType::F16 && stateful {
            // An f16-default device rounded the base optimizer's f32 state: refused, by
            // `resume` and by a first step without it, never by the backend.
            let refusal = SamError::ResumeOnNarrowDefault {
                default: DType::F16,
            };
            let error = optim.resume(model).unwrap_err();
            assert_eq!(error.error, refusal, "{what}");
            let (x, y) = &second[0];
            let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
            let error = optim.step_with(1e-2, error.module, loss).unwrap_err();
            assert_eq!(error.error, refusal, "{what}");
            return;
        }
        if float_dtype::<B>() == DType::F32 {
            assert_eq!(loaded, DType::F32, "Burn loads f16 parameters as f32");
            // Without `resume`: the first step refuses, handing the module back unchanged.
            let before = tensors(&model);
            let (x, y) = &second[0];
            let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
            let error = optim.step_with(1e-2, model, loss).unwrap_err();
            assert!(
                matches!(
                    error.error,
                    SamError::ResumedDType {
                        params: 4,
                        saved: Some(DType::F16),
                        now: DType::F32
                    }
                ),
                "{what}: {:?}",
                error.error
            );
            assert_eq!(tensors(&error.module), before);
        }
        let (model, mut optim) = resumed();
        let model = optim
            .resume(model)
            .unwrap_or_else(|e| panic!("{what}: {}", e.error));
        assert_eq!(model.layers[0].weight.val().dtype(), DType::F16, "{what}");
        let model = self.steps(&mut optim, model, second);
        assert_eq!(
            model.layers[1].bias.as_ref().unwrap().val().dtype(),
            DType::F16
        );
        assert_eq!(
            tensors(&model),
            tensors(&expected),
            "{what}: resumed bitwise"
        );
    }
}

/// SAM, Momentum-SAM and Friendly-SAM over SGD with momentum and over AdamW, f16 parameters
/// with loss scaling and f32 master weights, saved through a full-precision recorder: on an
/// f32-default device they continue bitwise after `resume` (and the first step refuses
/// without it); on an f16-default device the stateful bases are refused in burn-sam's words
/// and plain SGD continues bitwise.
pub fn f16_checkpoints_continue_bitwise<B: AutodiffBackend>() {
    for variant in [
        SamVariant::Sam,
        SamVariant::momentum_sam(),
        SamVariant::friendly_sam(),
    ] {
        for base in [Base::SgdMomentum, Base::AdamW, Base::Sgd] {
            Run::<B>::new(variant.clone(), base).check();
        }
    }
}

/// A model saved through a half-precision recorder (Burn's `CompactRecorder` rounds the same
/// way) is not the model the optimizer's record was labelled with: `resume` says so, with the
/// module handed back in its saved types; at full precision it does not.
pub fn a_half_precision_checkpoint_is_noticed<B: AutodiffBackend>() {
    let problem = problem::<B>(2);
    let config = SamConfig::new().with_rho(0.05);
    let sgd = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init()
    };
    let mut optim = config.init(sgd());
    let mut model = problem.model;
    for (x, y) in &problem.batches {
        let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
        model = optim.step_with(0.1, model, loss).unwrap().module;
    }
    optim.label_model(&model);
    let record = record_bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(&optim));
    let resumed = |exact: bool| {
        let saved = model.clone().into_record();
        // Exact through the recorder, or rounded to f16. Flex loads records through f32 (its
        // element type) even with an f64 default, which the fingerprint notices as well: an
        // f64 run resumes exactly from the record in memory.
        let saved = match (exact, float_dtype::<B>()) {
            (true, DType::F64) => saved,
            (true, _) => load_record::<B, _>(record_bytes::<B, _>(saved)),
            (false, _) => load::<B, _>(bytes::<B, _>(saved, false), false),
        };
        let fresh = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
        let optim = config.init(sgd());
        let record = load_record::<B, _>(record.clone());
        let optim = Optimizer::<Mlp<B>, B>::load_record(optim, record);
        optim.resume(fresh.load_record(saved))
    };
    let error = resumed(false).unwrap_err();
    assert_eq!(error.error, SamError::ResumedModelDiffers);
    let message = error.error.to_string();
    assert!(message.contains("NamedMpkFileRecorder::<FullPrecisionSettings>"));
    let module = resumed(true).unwrap_or_else(|e| panic!("{}", e.error));
    assert_eq!(tensors(&module), tensors(&model));
    // A record taken without a model says nothing to compare with.
    let unlabelled = record_bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(&optim));
    let optim = config.init(sgd());
    let optim = Optimizer::<Mlp<B>, B>::load_record(optim, load_record::<B, _>(unlabelled));
    assert!(optim.resume(model).is_ok());
}

/// Accumulated windows of 3 micro-batches over loss-scaled SAM and AdamW with f16 parameters:
/// saved after two windows and resumed into a fresh model, `resume` on the accumulation's
/// optimizer puts the model back and the run continues bitwise; without it the window is
/// refused before its first pass, the module handed back.
pub fn accumulation_resumes_f16_bitwise<B: AutodiffBackend>() {
    let run = Run::<B>::new(SamVariant::Sam, Base::AdamW);
    let init = || {
        let adamw = AdamWConfig::new().with_weight_decay(0.1).init();
        AccumulationConfig::new(3).init(run.config().init(adamw))
    };
    let windows = |acc: &mut Accumulation<Sam<_>>, mut model: Mlp<B>, batches: &[Batch<B>]| {
        for batch in batches {
            let micro_batches = split(batch, &[3, 3, 2]);
            model = acc
                .step(1e-2, model, &micro_batches, loss::<B>)
                .unwrap()
                .module;
        }
        model
    };
    let expected = windows(&mut init(), run.model.clone(), &run.batches[..4]);
    let mut acc = init();
    let model = windows(&mut acc, run.model.clone(), &run.batches[..2]);
    acc.optimizer().label_model(&model);
    let saved = (
        bytes::<B, _>(model.into_record(), true),
        bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(acc.optimizer()), true),
    );
    let resumed = || {
        let fresh = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
        let model = fresh.load_record(load::<B, _>(saved.0.clone(), true));
        let mut acc = init();
        let record = load::<B, _>(saved.1.clone(), true);
        let optim = Optimizer::<Mlp<B>, B>::load_record(acc.optimizer().clone(), record);
        *acc.optimizer_mut() = optim;
        (model, acc)
    };
    if float_dtype::<B>() == DType::F32 {
        let (model, mut acc) = resumed();
        let micro_batches = split(&run.batches[2], &[3, 3, 2]);
        let error = acc
            .step(1e-2, model, &micro_batches, loss::<B>)
            .unwrap_err();
        assert!(matches!(
            error.error,
            AccumError::Optimizer(SamError::ResumedDType { .. })
        ));
        assert_eq!(error.module.layers[0].weight.val().dtype(), DType::F32);
    }
    let (model, mut acc) = resumed();
    let model = acc
        .optimizer()
        .resume(model)
        .unwrap_or_else(|e| panic!("{}", e.error));
    let model = windows(&mut acc, model, &run.batches[2..4]);
    assert_eq!(model.layers[0].weight.val().dtype(), DType::F16);
    assert_eq!(tensors(&model), tensors(&expected));
}
