use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{set_default_float_dtype, AutodiffBackend, Backend};
use burn::tensor::{DType, Distribution, Element, FloatDType, Tensor};
use burn_sam_suite::{Mlp, MlpConfig};

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

/// Relative tolerance for comparing with a reference computed in f64.
pub fn tolerance<B: Backend>() -> f64 {
    match float_dtype::<B>() {
        DType::F64 if narrow_scalars::<B>() => 1e-6,
        DType::F64 => 1e-10,
        _ => 2e-4,
    }
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
