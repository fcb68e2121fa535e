//! Gradient accumulation that equals the large batch, alone and with SAM.
//!
//! Not implemented yet: this crate reserves the name and its place in the workspace. Its
//! behaviour (item-weighted micro-batches, flushed partial windows, one loss scale per window,
//! exact and per-micro-batch SAM) is specified in the project's accumulation issue.
