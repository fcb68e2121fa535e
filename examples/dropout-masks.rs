//! Do SAM's two passes generalise differently when they see the same dropout masks
//! (`SamConfig::pass_seed`, as Google's JAX SAM does with one PRNG key) than with masks of
//! their own (davda54/sam)? SAM over SGD (momentum 0.9) on the UCI digits with 30% of the
//! training labels replaced, an MLP with dropout, for seeds 1 to 5: clean test accuracy of
//! each, and their means.
//!
//! `cargo run --example dropout-masks -- [seeds] [epochs]` (5 and 20 by default; the
//! dependencies are optimised in the dev profile)

use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Int, Tensor};
use burn_sam::SamConfig;
use burn_sam_suite::digits::{Digits, CLASSES, FEATURES};
use burn_sam_suite::Rng;

type B = Autodiff<Flex>;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    input: Linear<B>,
    dropout: Dropout,
    output: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            input: LinearConfig::new(FEATURES, 128).init(device),
            dropout: DropoutConfig::new(0.25).init(),
            output: LinearConfig::new(128, CLASSES).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let hidden = self.input.forward(x).tanh();
        self.output.forward(self.dropout.forward(hidden))
    }

    fn loss(&self, (x, y): &(Tensor<B, 2>, Tensor<B, 1, Int>)) -> Tensor<B, 1> {
        let logits = self.forward(x.clone());
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, y.clone())
    }
}

/// Clean test accuracy after `epochs` of SAM from seed `seed`, the passes seeded or not.
fn run(train: &Digits, test: &Digits, seed: u64, epochs: usize, same_masks: bool) -> f64 {
    let device = Default::default();
    // The same initial weights and batch order for both kinds of masks.
    B::seed(&device, seed);
    let mut model = Net::<B>::new(&device);
    model.valid();
    let mut optim = SamConfig::new()
        .with_rho(0.1)
        .with_pass_seed(same_masks.then_some(seed))
        .init(
            SgdConfig::new()
                .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
                .init(),
        );
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    for _ in 0..epochs {
        rng.shuffle(&mut order);
        for indices in order.chunks(64) {
            let batch = train.batch::<B>(indices, FloatDType::F32, &device);
            let step = optim.step_with(0.05, model, |m: &Net<B>| m.loss(&batch));
            model = step.expect("a SAM step").module;
        }
    }
    let all: Vec<usize> = (0..test.len()).collect();
    let (x, y) = test.batch::<Flex>(&all, FloatDType::F32, &device);
    let predicted = model.valid().forward(x).argmax(1).squeeze::<1>();
    let right = predicted.equal(y).int().sum().into_scalar();
    right as f64 / test.len() as f64
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let (seeds, epochs) = (
        args.first().copied().unwrap_or(5),
        args.get(1).copied().unwrap_or(20),
    );
    let digits = Digits::load(Path::new("examples/data/digits.csv.gz")).expect("the data set");
    let (clean, test) = digits.split(297);
    let (mut same, mut own) = (Vec::new(), Vec::new());
    for seed in 1..=seeds as u64 {
        let mut train = clean.clone();
        train.corrupt(0.3, &mut Rng::new(seed.wrapping_mul(7919)));
        same.push(run(&train, &test, seed, epochs, true));
        own.push(run(&train, &test, seed, epochs, false));
        println!(
            "seed {seed}: same masks {:.2}%, masks of their own {:.2}%",
            100.0 * same.last().unwrap(),
            100.0 * own.last().unwrap()
        );
    }
    println!(
        "mean over {seeds} seeds, {epochs} epochs: same masks {:.2}%, masks of their own {:.2}%",
        100.0 * mean(&same),
        100.0 * mean(&own)
    );
}
