//! Gradients and weights as bytes for the other ranks: each float parameter in the module's
//! order, its tensor's bytes as they are (f16 stays f16, a sum in f32 stays f32), so what a
//! rank decodes is bitwise what another rank encoded.

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Device, Tensor, TensorData};

use super::peers::{Reader, Writer};
use crate::grad_sum::Summed;

const DTYPES: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

fn write_data(writer: &mut Writer, data: TensorData) {
    let tag = DTYPES
        .iter()
        .position(|dtype| *dtype == data.dtype)
        .unwrap_or_else(|| panic!("a float tensor of {:?}: not a float type", data.dtype));
    writer.u8(tag as u8);
    writer.bytes(data.as_bytes());
}

fn read_data(reader: &mut Reader<'_>, shape: Vec<usize>) -> TensorData {
    let dtype = DTYPES[reader.u8() as usize];
    TensorData::from_bytes_vec(reader.bytes().to_vec(), shape, dtype)
}

/// `summed` (gradients of `model`'s parameters) into `writer`.
pub(super) fn write_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    writer: &mut Writer,
    model: &M,
    summed: &Summed,
) {
    struct Write<'a> {
        writer: &'a mut Writer,
        grads: &'a GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Write<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            match self.grads.get::<B::InnerBackend, D>(param.id) {
                Some(grad) => {
                    self.writer.u8(1);
                    write_data(self.writer, grad.into_data());
                }
                None => self.writer.u8(0),
            }
        }
    }
    writer.u8(summed.as_came as u8);
    model.visit(&mut Write {
        writer,
        grads: &summed.grads,
    });
}

/// What [`write_grads`] wrote, on `device`.
pub(super) fn read_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    reader: &mut Reader<'_>,
    model: &M,
    device: &Device<B>,
) -> Summed {
    struct Read<'a, 'b, B: Backend> {
        reader: &'a mut Reader<'b>,
        grads: GradientsParams,
        device: &'a Device<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Read<'_, '_, B::InnerBackend> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if self.reader.u8() == 1 {
                let data = read_data(self.reader, param.shape().dims::<D>().to_vec());
                let dtype = data.dtype;
                let grad = Tensor::<B::InnerBackend, D>::from_data(data, (self.device, dtype));
                self.grads.register::<B::InnerBackend, D>(param.id, grad);
            }
        }
    }
    let as_came = reader.u8() == 1;
    let mut read = Read {
        reader,
        grads: GradientsParams::new(),
        device,
    };
    model.visit(&mut read);
    Summed {
        grads: read.grads,
        as_came,
    }
}

/// The module's float parameters as bytes.
pub(super) fn write_weights<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> Vec<u8> {
    struct Write(Writer);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Write {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            write_data(&mut self.0, param.val().into_data());
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
