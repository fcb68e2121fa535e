//! What every PyTorch fixture case shares (`reference/` writes `tests/fixtures/*.json`): an
//! MLP's layer sizes and initial weights, and the data its steps take, read once here for the
//! five runners (`parity`, `clipping`, `family`, `momentum_sam`, `adaptive`).

use burn::module::Param;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_sam_suite::{Mlp, MlpConfig};
use serde::de::DeserializeOwned;
use serde::Deserialize;

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

/// A case's MLP and data: each runner's `Case` holds one, flattened (`#[serde(flatten)]`).
#[derive(Deserialize)]
pub struct FixtureMlp {
    /// Layer widths, input first.
    pub sizes: Vec<usize>,
    /// Weights and biases in Burn's layout, layer by layer.
    pub init: Vec<Vec<f64>>,
    /// Inputs and targets, flattened, `batch` rows a step.
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub batch: usize,
}

impl FixtureMlp {
    /// The MLP with the reference's initial weights.
    pub fn model<B: AutodiffBackend>(&self) -> Mlp<B> {
        let sizes = &self.sizes;
        let mut model: Mlp<B> = MlpConfig::new(sizes.clone()).init(&Default::default());
        for (i, layer) in model.layers.iter_mut().enumerate() {
            let (d_in, d_out) = (sizes[i], sizes[i + 1]);
            layer.weight = Param::from_tensor(tensor(&self.init[2 * i], [d_in, d_out]));
            layer.bias = Some(Param::from_tensor(tensor(&self.init[2 * i + 1], [d_out])));
        }
        model
    }

    /// The inputs and targets of step `step`.
    pub fn batch<B: AutodiffBackend>(&self, step: usize) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let (d_in, d_out) = (self.sizes[0], *self.sizes.last().unwrap());
        let rows = step * self.batch..(step + 1) * self.batch;
        let x = &self.x[rows.start * d_in..rows.end * d_in];
        let y = &self.y[rows.start * d_out..rows.end * d_out];
        (
            tensor::<B, 2>(x, [self.batch, d_in]),
            tensor::<B, 2>(y, [self.batch, d_out]),
        )
    }
}

pub fn tensor<B: AutodiffBackend, const D: usize>(
    values: &[f64],
    shape: [usize; D],
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
}
