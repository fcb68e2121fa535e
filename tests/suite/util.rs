use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{set_default_float_dtype, AutodiffBackend, Backend};
use burn::tensor::{DType, Distribution, Element, FloatDType, Tensor};
use burn_sam_suite::{Mlp, MlpConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Makes `dtype` the float type of every tensor this process creates on `B`'s default
/// device (Flex picks it at run time, once per process).
pub fn use_float_dtype<B: Backend>(dtype: FloatDType) {
    let device = Default::default();
    // Fails harmlessly once the device is initialised; the assertion below is the check.
    let _ = set_default_float_dtype::<B>(&device, dtype);
    assert_eq!(
        float_dtype::<B>(),
        DType::from(dtype),
        "default float dtype"
    );
}

/// The float type tensors are created with.
pub fn float_dtype<B: Backend>() -> DType {
    Tensor::<B, 1>::zeros([1], &Default::default()).dtype()
}

/// Whether Burn rounds scalar operands (learning rate, momentum) and loaded records to a
/// narrower type than the tensors: Flex with f64 tensors keeps `FloatElem = f32`.
pub fn narrow_scalars<B: Backend>() -> bool {
    float_dtype::<B>() == DType::F64 && <B::FloatElem as Element>::dtype() != DType::F64
}

/// What a backend's f32 matmul rounds its inputs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulInputs {
    /// f32, as every CPU backend and Vulkan.
    F32,
    /// TF32 (8-bit exponent, 10-bit mantissa, f32 accumulation): CUDA's tensor-core kernels,
    /// which CubeCL's matmul uses for f32 whenever the GPU has them (Burn 0.21 has no switch).
    Tf32,
}

static TF32_MATMUL: AtomicBool = AtomicBool::new(false);

/// Declares what this process's backend rounds f32 matmul inputs to (F32 unless told).
pub fn use_matmul_inputs(inputs: MatmulInputs) {
    TF32_MATMUL.store(inputs == MatmulInputs::Tf32, Ordering::Relaxed);
}

/// Relative tolerance for comparing with a reference computed in f64.
pub fn tolerance<B: Backend>() -> f64 {
    match float_dtype::<B>() {
        DType::F64 if narrow_scalars::<B>() => 1e-6,
        DType::F64 => 1e-10,
        // Every gradient is off by about the unit roundoff of the matmul inputs (seen on an
        // H200: 0.24 u between two TF32 computations of one gradient), and the variants
        // amplify it: LookSAM's kept direction is the difference of two nearly parallel
        // gradients (3.2 u after its second step). 20 u leaves room for a whole trajectory.
        _ if tf32_matmul() => 20.0 * TF32_UNIT_ROUNDOFF,
        _ => 2e-4,
    }
}

/// TF32's unit roundoff (10-bit mantissa, rounded to nearest): 2^-11.
pub const TF32_UNIT_ROUNDOFF: f64 = 1.0 / 2048.0;

/// Whether this process's backend rounds f32 matmul inputs to TF32.
pub fn tf32_matmul() -> bool {
    TF32_MATMUL.load(Ordering::Relaxed)
}

/// The largest relative deviation `assert_close` has seen in this process since the last
/// call (NaN-free; 0 when it saw none): what a run reports beside pass or fail.
pub fn take_max_deviation() -> f64 {
    f64::from_bits(MAX_DEVIATION.swap(0, Ordering::Relaxed))
}

static MAX_DEVIATION: AtomicU64 = AtomicU64::new(0);

fn record_deviation(deviation: f64) {
    // Non-negative floats order as their bits do.
    MAX_DEVIATION.fetch_max(deviation.to_bits(), Ordering::Relaxed);
}

/// Every float tensor of `module` (parameters and running statistics), in visit order,
/// as f64.
pub fn tensors<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<f64>> {
    struct Collect(Vec<Vec<f64>>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let data = param.val().into_data();
            self.0.push(data.iter::<f64>().collect());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

pub fn assert_close(actual: &[Vec<f64>], expected: &[Vec<f64>], tol: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: number of tensors");
    for (a, e) in actual.iter().flatten().zip(expected.iter().flatten()) {
        let deviation = (a - e).abs() / e.abs().max(1.0);
        record_deviation(if deviation.is_nan() {
            f64::INFINITY
        } else {
            deviation
        });
    }
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert_eq!(a.len(), e.len(), "{what}: size of tensor {i}");
        for (j, (a, e)) in a.iter().zip(e).enumerate() {
            assert!(
                (a - e).abs() <= tol * e.abs().max(1.0),
                "{what}: tensor {i}[{j}] = {a}, expected {e} (tolerance {tol})"
            );
        }
    }
}

pub fn mse<B: Backend>(output: Tensor<B, 2>, target: Tensor<B, 2>) -> Tensor<B, 1> {
    (output - target).powi_scalar(2).mean()
}

pub fn grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    loss: Tensor<B, 1>,
) -> GradientsParams {
    GradientsParams::from_grads(loss.backward(), module)
}

/// A seeded MLP and a seeded regression batch per step.
pub struct Problem<B: Backend> {
    pub model: Mlp<B>,
    pub batches: Vec<(Tensor<B, 2>, Tensor<B, 2>)>,
}

pub fn problem<B: Backend>(steps: usize) -> Problem<B> {
    let device = Default::default();
    B::seed(&device, 7);
    let model = MlpConfig::new(vec![5, 16, 3]).init(&device);
    // Burn initialises parameters lazily, and each clone of an uninitialised parameter draws
    // its own values: read them once so that every clone starts from the same weights.
    tensors(&model);
    let normal = Distribution::Normal(0.0, 1.0);
    let batches = (0..steps)
        .map(|_| {
            (
                Tensor::random([8, 5], normal, &device),
                Tensor::random([8, 3], normal, &device),
            )
        })
        .collect();
    Problem { model, batches }
}

/// Gradient of the batch's loss at `model`.
pub fn batch_grads<B: AutodiffBackend>(
    model: &Mlp<B>,
    (x, y): &(Tensor<B, 2>, Tensor<B, 2>),
) -> GradientsParams {
    grads(model, mse(model.forward(x.clone()), y.clone()))
}

/// Replaces the gradient of the first layer's weight with `value` everywhere.
pub fn poison<B: AutodiffBackend>(model: &Mlp<B>, grads: &mut GradientsParams, value: f64) {
    let id = model.layers[0].weight.id;
    let grad = grads
        .remove::<B::InnerBackend, 2>(id)
        .expect("layer 0 has a gradient");
    grads.register(id, grad.mul_scalar(0.0).add_scalar(value));
}
