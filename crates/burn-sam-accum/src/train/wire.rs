//! Gradients and weights as bytes for the other ranks: each float parameter in the module's
//! order, its tensor's bytes as they are (f16 stays f16, a sum in f32 stays f32), so what a
//! rank decodes is bitwise what another rank encoded.

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_sam::diagnostics;

use super::peers::{Reader, Writer};

const DTYPES: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

/// Float values of `dtype`, as their bytes.
pub(super) fn write_data(writer: &mut Writer, dtype: DType, bytes: &[u8]) {
    let tag = DTYPES
        .iter()
        .position(|float| *float == dtype)
        .unwrap_or_else(|| panic!("a float tensor of {dtype:?}: not a float type"));
    writer.u8(tag as u8);
    writer.bytes(bytes);
}

/// What [`write_data`] wrote, as a tensor of `shape`.
pub(super) fn read_data(reader: &mut Reader<'_>, shape: Vec<usize>) -> TensorData {
    let dtype = DTYPES[reader.u8() as usize];
    TensorData::from_bytes_vec(reader.bytes().to_vec(), shape, dtype)
}

/// `grads` (of `model`'s parameters) on the host, parameter by parameter in the module's
/// order, `None` for a parameter without one.
pub(super) fn grads_to_host<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    mut grads: GradientsParams,
) -> Vec<Option<TensorData>> {
    struct Read<'a>(&'a mut GradientsParams, Vec<Option<TensorData>>);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Read<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let grad = self.0.remove::<B::InnerBackend, D>(param.id);
            self.1.push(grad.map(diagnostics::read_back));
        }
    }
    let mut read = Read(&mut grads, Vec::new());
    model.visit(&mut read);
    read.1
}

/// Gradients of `model`'s parameters on `device` from `(dtype, bytes)`, one per parameter in
/// the module's order (as [`grads_to_host`] lists them).
pub(super) fn grads_from_host<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    host: Vec<Option<(DType, Vec<u8>)>>,
    device: &Device<B>,
) -> GradientsParams {
    struct Write<'a, B: Backend> {
        host: std::vec::IntoIter<Option<(DType, Vec<u8>)>>,
        grads: GradientsParams,
        device: &'a Device<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Write<'_, B::InnerBackend> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let Some((dtype, bytes)) = self.host.next().flatten() else {
                return;
            };
            let data = TensorData::from_bytes_vec(bytes, param.shape().dims::<D>().to_vec(), dtype);
            let grad = Tensor::<B::InnerBackend, D>::from_data(data, (self.device, dtype));
            self.grads.register::<B::InnerBackend, D>(param.id, grad);
        }
    }
    let mut write = Write {
        host: host.into_iter(),
        grads: GradientsParams::new(),
        device,
    };
    model.visit(&mut write);
    write.grads
}

/// The module's float parameters as bytes.
pub(super) fn write_weights<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> Vec<u8> {
    struct Write(Writer);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Write {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let data = diagnostics::read_back(param.val());
            write_data(&mut self.0, data.dtype, data.as_bytes());
        }
    }
    let mut write = Write(Writer::default());
    model.visit(&mut write);
    write.0 .0
}

/// `model` with the float parameters [`write_weights`] wrote (ids, devices and whether each
/// requires a gradient kept).
pub(super) fn read_weights<B: AutodiffBackend, M: AutodiffModule<B>>(model: M, bytes: &[u8]) -> M {
    struct Read<'a>(Reader<'a>);
    impl<B: AutodiffBackend> ModuleMapper<B> for Read<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper): (ParamId, _, _) = param.consume();
            let data = read_data(&mut self.0, tensor.shape().dims::<D>().to_vec());
            let dtype = data.dtype;
            let mut read = Tensor::from_data(data, (&tensor.device(), dtype));
            if tensor.is_require_grad() {
                read = read.require_grad();
            }
            Param::from_mapped_value(id, read, mapper)
        }
    }
    model.map(&mut Read(Reader::new(bytes)))
}

/// The shapes of the module's float parameters, in its order.
pub(super) fn shapes<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> String {
    struct Shapes(Vec<String>);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(format!("{:?}", param.shape().dims::<D>()));
        }
    }
    let mut shapes = Shapes(Vec::new());
    model.visit(&mut shapes);
    shapes.0.join(" ")
}
