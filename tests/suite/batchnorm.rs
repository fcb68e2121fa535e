//! BatchNorm's running statistics see each batch once (davda54/sam #17).

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Element, ElementConversion, Tensor};
use burn_sam::SamConfig;

use super::util::tensors;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    input: Linear<B>,
    norm: BatchNorm<B>,
    output: Linear<B>,
}

impl<B: AutodiffBackend> Net<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            input: LinearConfig::new(4, 6).init(device),
            norm: BatchNormConfig::new(6).init(device),
            output: LinearConfig::new(6, 2).init(device),
        }
    }

    fn loss(&self, x: Tensor<B, 2>) -> Tensor<B, 1> {
        let hidden = self.norm.forward(self.input.forward(x)).tanh();
        self.output.forward(hidden).powi_scalar(2).mean()
    }

    /// An independent copy: clones share BatchNorm's running state, records do not.
    fn copy(&self, device: &B::Device) -> Self {
        Self::new(device).load_record(self.clone().into_record())
    }

    fn statistics(&self) -> Vec<Vec<f64>> {
        [&self.norm.running_mean, &self.norm.running_var]
            .map(|state| state.value_sync().into_data().iter::<f64>().collect())
            .to_vec()
    }
}

pub fn statistics_see_the_batch_once<B: AutodiffBackend>() {
    let device = Default::default();
    B::seed(&device, 11);
    let start = Net::<B>::new(&device);
    tensors(&start); // initialise the lazy parameters once, so that copies share them
    let x = Tensor::<B, 2>::random([16, 4], Distribution::Normal(1.0, 2.0), &device);

    // One forward pass at w: what the statistics must be after a SAM step.
    let once = start.copy(&device);
    drop(once.loss(x.clone()));
    let expected = once.statistics();

    // The same batch seen twice updates them twice: this is what the test guards against.
    let twice = start.copy(&device);
    drop(twice.loss(x.clone()));
    drop(twice.loss(x.clone()));
    assert_ne!(twice.statistics(), expected);

    let config = SamConfig::new().with_rho(0.5);
    let mut sam = config.init(SgdConfig::new().init());
    let step = sam
        .step_with(0.1, start.copy(&device), |net: &Net<B>| net.loss(x.clone()))
        .unwrap();
    assert_eq!(step.module.statistics(), expected, "step_with");
    assert_ne!(tensors(&step.module.input), tensors(&start.input));

    let mut sam = config.init(SgdConfig::new().init()).step_per_pass();
    let mut net = start.copy(&device);
    for _pass in 0..2 {
        let grads = GradientsParams::from_grads(net.loss(x.clone()).backward(), &net);
        net = sam.step(0.1, net, grads);
    }
    assert_eq!(net.statistics(), expected, "Optimizer::step");
    assert_eq!(tensors(&net.input), tensors(&step.module.input));
}

/// SAM-ON: `perturb_only(["BatchNorm"])` perturbs exactly the normalisation layer's scale and
/// shift (its running statistics are not parameters), with the norm over them alone: the
/// perturbation has length `rho` over gamma and beta.
pub fn sam_on_perturbs_only_the_normalisation_layers<B: AutodiffBackend>() {
    let device = Default::default();
    B::seed(&device, 12);
    let start = Net::<B>::new(&device);
    tensors(&start);
    let x = Tensor::<B, 2>::random([16, 4], Distribution::Normal(1.0, 2.0), &device);
    let rho = 0.5;
    let mut sam = SamConfig::new()
        .with_rho(rho)
        .with_perturb_only(Some(vec!["BatchNorm".into()]))
        .init(SgdConfig::new().init::<B, Net<B>>());
    let net = start.copy(&device);
    let grads = GradientsParams::from_grads(net.loss(x.clone()).backward(), &net);
    let perturbed = sam.ascend(0.1, net, grads).unwrap();
    assert_eq!(tensors(&perturbed.input), tensors(&start.input));
    assert_eq!(tensors(&perturbed.output), tensors(&start.output));
    let moved: f64 = [
        (&perturbed.norm.gamma, &start.norm.gamma),
        (&perturbed.norm.beta, &start.norm.beta),
    ]
    .iter()
    .map(|(after, before)| {
        let difference = after.val() - before.val();
        difference.powi_scalar(2).sum().into_scalar().elem::<f64>()
    })
    .sum::<f64>()
    .sqrt();
    let tolerance = match <B::FloatElem as Element>::dtype() {
        burn::tensor::DType::F64 => 1e-9,
        _ => 1e-4,
    };
    assert!(
        (moved - rho).abs() < tolerance * rho,
        "||e|| = {moved}, rho = {rho}"
    );
}

/// An f16 model with BatchNorm, saved at full precision and loaded into a freshly built model:
/// Burn loads the weights and the running statistics as f32; `resume` puts both back to f16
/// and the run continues bitwise, statistics included.
pub fn f16_resume_restores_the_running_statistics<B: AutodiffBackend>() {
    use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
    use burn::tensor::{DType, FloatDType};
    use burn_sam::{cast_params, LossScalerConfig, LossScaling, SamConfig};

    let device = Default::default();
    B::seed(&device, 5);
    let start = cast_params(Net::<B>::new(&device), FloatDType::F16);
    tensors(&start);
    let batches: Vec<Tensor<B, 2>> = (0..4)
        .map(|_| Tensor::random([8, 4], Distribution::Normal(0.0, 1.0), &device))
        .map(|x: Tensor<B, 2>| Tensor::<B, 2, burn::tensor::Float>::cast(x, FloatDType::F16))
        .collect();
    let config = SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(256.0)));
    let init = || config.init(SgdConfig::new().init());
    let run = |optim: &mut burn_sam::Sam<_>, mut model: Net<B>, batches: &[Tensor<B, 2>]| {
        for x in batches {
            let step = optim.step_with(0.05, model, |m: &Net<B>| m.loss(x.clone()));
            model = step.unwrap().module;
        }
        model
    };
    let expected = run(&mut init(), start.copy(&device), &batches);
    let mut optim = init();
    let model = run(&mut optim, start.copy(&device), &batches[..2]);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let saved = recorder.record(model.into_record(), ()).unwrap();
    let record = recorder
        .record(Optimizer::<Net<B>, B>::to_record(&optim), ())
        .unwrap();

    let fresh = cast_params(Net::<B>::new(&device), FloatDType::F16);
    let loaded = fresh.load_record(recorder.load(saved, &device).unwrap());
    assert_eq!(
        loaded.norm.running_mean.value().dtype(),
        DType::F32,
        "as Burn loads it"
    );
    let optim =
        Optimizer::<Net<B>, B>::load_record(init(), recorder.load(record, &device).unwrap());
    let mut optim = optim;
    let model = optim
        .resume(loaded)
        .unwrap_or_else(|e| panic!("{}", e.error));
    assert_eq!(model.norm.running_mean.value().dtype(), DType::F16);
    assert_eq!(model.norm.gamma.val().dtype(), DType::F16);
    let model = run(&mut optim, model, &batches[2..]);
    assert_eq!(tensors(&model), tensors(&expected));
    assert_eq!(model.statistics(), expected.statistics());
}
