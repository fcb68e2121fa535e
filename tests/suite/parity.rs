//! Whole trajectories against PyTorch running davda54/sam's algorithm
//! (`reference/sam_reference.py` wrote `tests/fixtures/sam_reference.json`).

use std::collections::HashMap;

use burn::module::Param;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_sam::SamConfig;
use burn_sam_suite::{Mlp, MlpConfig};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::util::{assert_close, grads, mse, tensors, tolerance};

#[derive(Deserialize)]
struct Fixture<C> {
    cases: Vec<C>,
}

/// The case of the fixture `json` whose `"name"` is `name`.
pub fn fixture_case<C: DeserializeOwned>(json: &str, name: &str) -> C {
    #[derive(Deserialize)]
    struct Named {
        name: String,
    }
    let names: Fixture<Named> = serde_json::from_str(json).expect("fixture");
    let index = names
        .cases
        .iter()
        .position(|case| case.name == name)
        .unwrap_or_else(|| panic!("no case {name} in the fixture"));
    let mut cases: Fixture<C> = serde_json::from_str(json).expect("fixture");
    cases.cases.swap_remove(index)
}

#[derive(Deserialize)]
struct Case {
    name: String,
    sizes: Vec<usize>,
    optimizer: String,
    options: HashMap<String, f64>,
    rho: f64,
    adaptive: bool,
    eta: f64,
    init: Vec<Vec<f64>>,
    x: Vec<f64>,
    y: Vec<f64>,
    batch: usize,
    trajectory: Vec<Vec<Vec<f64>>>,
}

fn case(name: &str) -> Case {
    fixture_case(include_str!("../fixtures/sam_reference.json"), name)
}

pub fn tensor<B: AutodiffBackend, const D: usize>(
    values: &[f64],
    shape: [usize; D],
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
}

/// Batch `step` of a fixture's inputs `x` and targets `y` (flattened, `batch` rows a step) for
/// an MLP of layer `sizes`.
pub fn fixture_batch<B: AutodiffBackend>(
    sizes: &[usize],
    x: &[f64],
    y: &[f64],
    batch: usize,
    step: usize,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let (d_in, d_out) = (sizes[0], *sizes.last().unwrap());
    let x = &x[step * batch * d_in..(step + 1) * batch * d_in];
    let y = &y[step * batch * d_out..(step + 1) * batch * d_out];
    (
        tensor::<B, 2>(x, [batch, d_in]),
        tensor::<B, 2>(y, [batch, d_out]),
    )
}

/// The MLP of layer `sizes` with the reference's initial weights (Burn's layout).
pub fn reference_model<B: AutodiffBackend>(sizes: &[usize], init: &[Vec<f64>]) -> Mlp<B> {
    let mut model: Mlp<B> = MlpConfig::new(sizes.to_vec()).init(&Default::default());
    for (i, layer) in model.layers.iter_mut().enumerate() {
        let (d_in, d_out) = (sizes[i], sizes[i + 1]);
        layer.weight = Param::from_tensor(tensor(&init[2 * i], [d_in, d_out]));
        layer.bias = Some(Param::from_tensor(tensor(&init[2 * i + 1], [d_out])));
    }
    model
}

/// torch's SGD with the reference's options (`momentum`, no dampening).
pub fn torch_sgd<B: AutodiffBackend>(options: &HashMap<String, f64>) -> impl Optimizer<Mlp<B>, B> {
    let momentum = options.get("momentum").map(|&momentum| {
        // torch's SGD has no dampening by default; Burn's default is 0.1.
        MomentumConfig::new()
            .with_momentum(momentum)
            .with_dampening(0.0)
    });
    SgdConfig::new().with_momentum(momentum).init()
}

/// Runs the case through `Optimizer::step`, twice per batch, and compares every step.
fn follow<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(case: &Case, mut optim: O) {
    let lr = case.options["lr"];
    let mut model = reference_model::<B>(&case.sizes, &case.init);
    // Burn's Adam computes its bias corrections `sqrt(1 - beta_2^t)` from f32 hyperparameters
    // in f32 (6e-6 relative error at t = 2): plain Adam already differs from torch's by that
    // fraction of each update, whatever SAM does.
    let tolerance = match case.optimizer.as_str() {
        "adam" => tolerance::<B>().max(1e-6),
        _ => tolerance::<B>(),
    };
    for (step, expected) in case.trajectory.iter().enumerate() {
        let (x, y) = fixture_batch::<B>(&case.sizes, &case.x, &case.y, case.batch, step);
        for _pass in 0..2 {
            let loss = mse(model.forward(x.clone()), y.clone());
            let grads = grads(&model, loss);
            model = optim.step(lr, model, grads);
        }
        let what = format!("{} step {}", case.name, step + 1);
        assert_close(&tensors(&model), expected, tolerance, &what);
    }
}

pub fn run<B: AutodiffBackend>(name: &str) {
    let case = case(name);
    let sam = SamConfig::new()
        .with_rho(case.rho)
        .with_adaptive(case.adaptive)
        .with_eta(case.eta);
    match case.optimizer.as_str() {
        "sgd" => {
            let base = torch_sgd::<B>(&case.options);
            follow::<B, _>(&case, sam.init(base).step_per_pass());
        }
        "adam" => {
            let base = AdamConfig::new()
                .with_epsilon(case.options["eps"] as f32)
                .init();
            follow::<B, _>(&case, sam.init(base).step_per_pass());
        }
        other => panic!("unknown optimizer {other} in the fixture"),
    }
}
