use burn::backend::{Autodiff, Flex};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::set_default_float_dtype;
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_sam_suite::{Mlp, MlpConfig};
type B = Autodiff<Flex>;
fn main() {
    let device = Default::default();
    set_default_float_dtype::<B>(&device, FloatDType::F16).unwrap();
    let model: Mlp<B> = MlpConfig::new(vec![4, 8, 2]).init(&device);
    let x = Tensor::<B, 2>::random([16, 4], Distribution::Normal(0.0, 1.0), &device);
    println!("x dtype {:?}", x.dtype());
    let loss = model.forward(x.clone()).powi_scalar(2).mean();
    println!("loss dtype {:?}", loss.dtype());
    let scaled = loss.clone().cast(FloatDType::F32).mul_scalar(65536.0);
    println!("scaled dtype {:?}", scaled.dtype());
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let g = grads.get::<Flex, 2>(model.layers[0].weight.id).unwrap();
    println!(
        "grad dtype {:?} {:?}",
        g.dtype(),
        g.clone()
            .into_data()
            .iter::<f32>()
            .take(3)
            .collect::<Vec<_>>()
    );
    let g32 = g.cast(FloatDType::F32);
    let mut grads32 = GradientsParams::new();
    grads32.register(model.layers[0].weight.id, g32);
    let mut sgd = SgdConfig::new().init();
    let w = model.layers[0].weight.val();
    let m = sgd.step(0.1, model, grads32);
    println!(
        "after step dtype {:?} vs {:?}",
        m.layers[0].weight.val().dtype(),
        w.dtype()
    );
}
