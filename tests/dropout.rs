//! Dropout under SAM (`SamConfig::pass_seed`), on Flex: with seeded passes both passes of a
//! step draw the same masks, so `rho = 0` is the base optimizer fed the same seeds bitwise, a
//! record round trip and a `Learner` resume continue exactly, and a `Learner` window equals the
//! direct window; without them the second pass draws other masks. One test in its own binary:
//! the backend's random generator is one per process, and tests beside it would draw from it.
#![cfg(feature = "flex")]

use std::path::Path;
use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, Sgd, SgdConfig};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::train::{ClassificationOutput, Learner, LearningComponentsMarker, SupervisedTraining};
use burn_sam::{pass_seed, Sam, SamConfig};
use burn_sam_accum::train::{Ascent, SamTraining};
use burn_sam_accum::{AccumulationConfig, MicroBatch};
use burn_sam_suite::{blobs, load_record, record_bytes, ClassBatch, ClassBatcher, Quiet};

type B = Autodiff<Flex>;
type SgdOptim = OptimizerAdaptor<Sgd<Flex>, Net<B>, B>;

const FEATURES: usize = 6;
const CLASSES: usize = 3;
const SEED: u64 = 11;

/// Two linear layers with dropout 0.25 between them.
#[derive(Module, Debug)]
pub struct Net<B: Backend> {
    input: Linear<B>,
    dropout: Dropout,
    output: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn forward_classification(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        let hidden = self.input.forward(batch.inputs).tanh();
        let logits = self.output.forward(self.dropout.forward(hidden));
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }

    fn loss(&self, batch: &ClassBatch<B>) -> Tensor<B, 1> {
        self.forward_classification(batch.clone()).loss
    }
}

burn_sam_suite::classification_steps!(Net);

/// The same initial weights every time (not the backend's generator, which the runs seed).
fn net() -> Net<B> {
    let device = Default::default();
    let mut net = Net {
        input: LinearConfig::new(FEATURES, 32).init(&device),
        dropout: DropoutConfig::new(0.25).init(),
        output: LinearConfig::new(32, CLASSES).init(&device),
    };
    let mut rng = burn_sam_suite::Rng::new(5);
    let mut fixed = |linear: &mut Linear<B>| {
        let [rows, columns] = linear.weight.dims();
        let values: Vec<f32> = (0..rows * columns)
            .map(|_| rng.uniform() as f32 - 0.5)
            .collect();
        let weight = Tensor::from_data(TensorData::new(values, [rows, columns]), &device);
        linear.weight = burn::module::Param::from_tensor(weight);
        linear.bias = Some(burn::module::Param::from_tensor(Tensor::zeros(
            [columns],
            &device,
        )));
    };
    fixed(&mut net.input);
    fixed(&mut net.output);
    net.valid();
    net
}

fn sgd() -> SgdOptim {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
}

fn seeded(rho: f64, seed: Option<u64>) -> Sam<SgdOptim> {
    SamConfig::new()
        .with_rho(rho)
        .with_pass_seed(seed)
        .init(sgd())
}

fn weights<M: Module<Flex>>(model: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl burn::module::ModuleVisitor<Flex> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<Flex, D>>) {
            self.0.extend(param.val().into_data().iter::<f32>());
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

fn loader() -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(16)
        .build(InMemDataset::new(blobs(96, 7, FEATURES, CLASSES)))
}

fn batches() -> Vec<ClassBatch<B>> {
    loader().iter().collect()
}

/// `steps` of `step_with` over the batches, from `net`.
fn direct(optim: &mut Sam<SgdOptim>, mut net: Net<B>, batches: &[ClassBatch<B>]) -> Net<B> {
    for batch in batches {
        let step = optim.step_with(0.1, net, |m: &Net<B>| m.loss(batch));
        net = step.expect("a step").module;
    }
    net
}

type Components = LearningComponentsMarker<B, f64, Net<B>, Sam<SgdOptim>>;

/// `epochs` of the Learner under `strategy`, checkpointed at full precision into `dir`.
fn learn(
    dir: &Path,
    optim: Sam<SgdOptim>,
    strategy: SamTraining<Components>,
    epochs: usize,
    resume: Option<usize>,
) -> Vec<f32> {
    let valid = DataLoaderBuilder::new(ClassBatcher)
        .batch_size(30)
        .build(InMemDataset::new(blobs(30, 99, FEATURES, CLASSES)));
    let mut training = SupervisedTraining::new(dir, loader(), valid)
        .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(strategy.into_strategy());
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    weights(&training.launch(Learner::new(net(), optim, 0.1)).model)
}

fn artifacts(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-sam-dropout-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn seeded_passes_draw_one_mask_per_step() {
    let batches = batches();

    // rho = 0: the base optimizer, fed the same seeds, bitwise; without seeds the second pass
    // draws other masks.
    let mut base = sgd();
    let mut expected = net();
    for (step, batch) in batches.iter().enumerate() {
        B::seed(&Default::default(), pass_seed(SEED, step as u64, 0));
        let grads = GradientsParams::from_grads(expected.loss(batch).backward(), &expected);
        expected = base.step(0.1, expected, grads);
    }
    let zero = direct(&mut seeded(0.0, Some(SEED)), net(), &batches);
    assert_eq!(
        weights(&zero.valid()),
        weights(&expected.valid()),
        "rho 0, seeded"
    );
    let unseeded = direct(&mut seeded(0.0, None), net(), &batches);
    assert_ne!(
        weights(&unseeded.valid()),
        weights(&expected.valid()),
        "rho 0, unseeded"
    );

    // A record round trip in the middle continues exactly: the step count is in the record.
    // SAM, and Momentum-SAM (one pass per step, at its look-ahead).
    let (first, second) = batches.split_at(3);
    let momentum_sam = || {
        SamConfig::new()
            .with_rho(1.0)
            .with_variant(burn_sam::SamVariant::momentum_sam())
            .with_pass_seed(Some(SEED))
            .init(sgd())
    };
    let sam = || seeded(0.05, Some(SEED));
    let optims: [(&str, &dyn Fn() -> Sam<SgdOptim>); 2] =
        [("SAM", &sam), ("Momentum-SAM", &momentum_sam)];
    for (what, optim) in optims {
        let mut uninterrupted = optim();
        let whole = direct(&mut uninterrupted, net(), &batches).valid();
        // Saved and resumed as the steps hand it back, at `w`.
        let mut first_half = optim();
        let saved = direct(&mut first_half, net(), first);
        let record = record_bytes::<B, _>(first_half.to_record());
        let mut resumed = optim().load_record(load_record::<B, _>(record));
        let end = direct(&mut resumed, saved, second).valid();
        assert_eq!(weights(&end), weights(&whole), "{what}: record round trip");
    }

    // The Learner's windows of 3 (6 batches: 2 steps an epoch) equal the direct ones.
    let optim = seeded(0.05, Some(SEED));
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(3)
        .unwrap();
    let learned = learn(&artifacts("window"), optim, strategy, 1, None);
    let mut accumulation = AccumulationConfig::new(3).init(seeded(0.05, Some(SEED)));
    let mut model = net();
    let micro_batches: Vec<_> = batches.iter().cloned().map(MicroBatch::new).collect();
    for window in accumulation.windows(micro_batches) {
        let step = accumulation.step(0.1, model, &window, |m: &Net<B>, b| m.loss(b));
        model = step.expect("a window").module;
    }
    assert_eq!(
        learned,
        weights(&model.valid()),
        "Learner window against direct"
    );

    // A Learner resumed from a checkpoint of epoch 1 ends as the uninterrupted run; without
    // seeds it does not (the generator is wherever the process left it).
    for seed in [Some(SEED), None] {
        let fresh = || {
            let optim = seeded(0.05, seed);
            let strategy = SamTraining::new(Default::default(), &optim);
            (optim, strategy)
        };
        let (optim, strategy) = fresh();
        let whole = learn(&artifacts("whole"), optim, strategy, 2, None);
        let dir = artifacts("parts");
        let (optim, strategy) = fresh();
        learn(&dir, optim, strategy, 1, None);
        let (optim, strategy) = fresh();
        let resumed = learn(&dir, optim, strategy, 2, Some(1));
        match seed {
            Some(_) => assert_eq!(resumed, whole, "seeded resume"),
            None => assert_ne!(resumed, whole, "unseeded resume"),
        }
    }

    // Over several replicas the one generator would be drawn from in any order: refused.
    let optim = seeded(0.05, Some(SEED));
    let devices = vec![Default::default(); 2];
    let strategy = SamTraining::data_parallel(devices, &optim, Ascent::Synced).unwrap();
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        learn(&artifacts("replicas"), optim, strategy, 1, None)
    }))
    .expect_err("seeded passes over two replicas");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("SamConfig.pass_seed = 11 with 2 replicas"),
        "{message}"
    );
}
