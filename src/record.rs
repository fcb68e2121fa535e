//! Records as bytes, for save-and-resume tests and byte-for-byte state comparisons.

use std::path::Path;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::record::{
    BinBytesRecorder, DoublePrecisionSettings, FileRecorder, FullPrecisionSettings,
    NamedMpkFileRecorder, Record, Recorder,
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_sam::record::SamRecord;
use burn_sam::Sam;

type Bytes = BinBytesRecorder<DoublePrecisionSettings>;

/// `record` serialized as Burn's binary recorder writes it, floats in f64.
pub fn record_bytes<B: Backend, R: Record<B>>(record: R) -> Vec<u8> {
    Recorder::<B>::record(&Bytes::default(), record, ()).expect("a record serializes")
}

/// The record `bytes` hold, loaded on `B`'s default device.
pub fn load_record<B: Backend, R: Record<B>>(bytes: Vec<u8>) -> R {
    Recorder::<B>::load(&Bytes::default(), bytes, &Default::default()).expect("a record loads")
}

/// SAM's own part of the optimizer checkpoint that Burn's `Learner` wrote for `epoch` under
/// `dir` (`<dir>/checkpoint/optim-<epoch>`), for a `Sam<O>` optimizer of module `M`, written
/// with a full-precision `NamedMpkFileRecorder`.
pub fn checkpoint_sam_record<B, M, O>(dir: &Path, epoch: usize) -> SamRecord
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    checkpoint_sam_record_with::<B, M, O, _>(recorder, dir, epoch)
}

/// [`checkpoint_sam_record`] of a checkpoint written with `recorder`.
pub fn checkpoint_sam_record_with<B, M, O, FR>(recorder: FR, dir: &Path, epoch: usize) -> SamRecord
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
    FR: FileRecorder<B>,
{
    let path = dir.join("checkpoint").join(format!("optim-{epoch}"));
    let record: <Sam<O> as Optimizer<M, B>>::Record = recorder
        .load(path, &Default::default())
        .expect("the optimizer checkpoint loads");
    record.1
}
