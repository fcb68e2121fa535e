//! The UCI optical digits (`examples/data/digits.csv.gz`): loading, the fixed train/test
//! split, and symmetric label noise.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Int, Tensor, TensorData};

use crate::{ClassBatch, Rng};

/// Pixels per image (8x8).
pub const FEATURES: usize = 64;
/// Digit classes.
pub const CLASSES: usize = 10;

/// Images (pixels scaled to [0, 1]) and labels.
#[derive(Clone)]
pub struct Digits {
    /// One row of 64 pixels per image.
    pub pixels: Vec<[f32; FEATURES]>,
    /// The digit of each image.
    pub labels: Vec<usize>,
}

impl Digits {
    /// Reads the gzipped CSV (64 pixels from 0 to 16, then the digit, per line).
    pub fn load(path: &Path) -> Result<Self, String> {
        let file = std::fs::File::open(path)
            .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let mut digits = Digits {
            pixels: Vec::new(),
            labels: Vec::new(),
        };
        for (line_number, line) in text.lines().enumerate() {
            let bad = |what: &str| format!("{}:{}: {what}", path.display(), line_number + 1);
            let values: Vec<u8> = line
                .split(',')
                .map(|value| value.trim().parse())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("expected integers"))?;
            let [pixels @ .., label] = values.as_slice() else {
                return Err(bad("empty line"));
            };
            if pixels.len() != FEATURES || usize::from(*label) >= CLASSES {
                return Err(bad("expected 64 pixels and a digit"));
            }
            let mut image = [0.0; FEATURES];
            for (scaled, &pixel) in image.iter_mut().zip(pixels) {
                *scaled = f32::from(pixel) / 16.0;
            }
            digits.pixels.push(image);
            digits.labels.push(usize::from(*label));
        }
        Ok(digits)
    }

    /// The number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn select(&self, indices: &[usize]) -> Self {
        Digits {
            pixels: indices.iter().map(|&i| self.pixels[i]).collect(),
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
        }
    }

    /// A fixed split (independent of the run's seed): `test` images held out, the rest trains.
    pub fn split(&self, test: usize) -> (Self, Self) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        Rng::new(0x5eed).shuffle(&mut order);
        let (test_indices, train_indices) = order.split_at(test);
        (self.select(train_indices), self.select(test_indices))
    }

    /// Symmetric label noise: each label is replaced, with probability `noise`, by one of the
    /// nine other classes drawn uniformly. Returns the fraction actually changed.
    pub fn corrupt(&mut self, noise: f64, rng: &mut Rng) -> f64 {
        let mut changed = 0;
        for label in &mut self.labels {
            if rng.uniform() < noise {
                let other = 1 + rng.below(CLASSES - 1);
                *label = (*label + other) % CLASSES;
                changed += 1;
            }
        }
        changed as f64 / self.len() as f64
    }

    /// The images at `indices` as a `[n, 64]` tensor of `dtype`, and their labels.
    pub fn batch<B: Backend>(
        &self,
        indices: &[usize],
        dtype: FloatDType,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let pixels: Vec<f32> = indices.iter().flat_map(|&i| self.pixels[i]).collect();
        let labels: Vec<i64> = indices.iter().map(|&i| self.labels[i] as i64).collect();
        let x =
            Tensor::<B, 2>::from_data(TensorData::new(pixels, [indices.len(), FEATURES]), device);
        let y = Tensor::from_data(TensorData::new(labels, [indices.len()]), device);
        (x.cast(dtype), y)
    }
}

/// Batches images of a [`Digits`] set by index, in f32.
#[derive(Clone)]
struct DigitsBatcher {
    digits: Arc<Digits>,
}

impl<B: Backend> Batcher<B, usize, ClassBatch<B>> for DigitsBatcher {
    fn batch(&self, indices: Vec<usize>, device: &B::Device) -> ClassBatch<B> {
        let (inputs, targets) = self.digits.batch(&indices, FloatDType::F32, device);
        ClassBatch { inputs, targets }
    }
}

/// A Burn data loader over `digits` in batches of `batch_size`, shuffled with `seed` each
/// epoch.
pub fn digits_loader<B: Backend>(
    digits: Digits,
    batch_size: usize,
    seed: u64,
) -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    let len = digits.len();
    let batcher = DigitsBatcher {
        digits: Arc::new(digits),
    };
    DataLoaderBuilder::new(batcher)
        .batch_size(batch_size)
        .shuffle(seed)
        .build(InMemDataset::new((0..len).collect::<Vec<usize>>()))
}
