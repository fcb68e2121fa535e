//! Records as bytes, for save-and-resume tests and byte-for-byte state comparisons.

use burn::record::{BinBytesRecorder, DoublePrecisionSettings, Record, Recorder};
use burn::tensor::backend::Backend;

type Bytes = BinBytesRecorder<DoublePrecisionSettings>;

/// `record` serialized as Burn's binary recorder writes it, floats in f64.
pub fn record_bytes<B: Backend, R: Record<B>>(record: R) -> Vec<u8> {
    Recorder::<B>::record(&Bytes::default(), record, ()).expect("a record serializes")
}

/// The record `bytes` hold, loaded on `B`'s default device.
pub fn load_record<B: Backend, R: Record<B>>(bytes: Vec<u8>) -> R {
    Recorder::<B>::load(&Bytes::default(), bytes, &Default::default()).expect("a record loads")
}
