//! The gradient exchange across ranks: a reduce-scatter in replica order, then an all-gather.
//!
//! The gradient, flattened in the module's order of float parameters, is cut into one shard
//! per rank. Every rank sends shard `j` of each of its replicas' gradients to rank `j` (one
//! all-to-all); rank `j` adds all replicas' shard `j` in global replica order with the
//! [`WeightedSum`] one process adds whole gradients with, and one all-gather gives every rank
//! every summed shard. Each element sees one process's additions in one process's order, so
//! every rank holds bitwise the one-process sum, and a rank sends about 2 (N - 1) / N of a
//! gradient per exchange, a ring all-reduce's bytes, where an all-gather of the gradients
//! sends N - 1 gradients. Values travel in the float type they have: a lone f16 gradient as
//! f16, a weighted or accumulated one as its f32 sum.

use std::ops::Range;

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Device, Tensor, TensorData};
use burn_sam::diagnostics;

use super::peers::{Peers, Reader, Writer};
use super::wire::{grads_from_host, grads_to_host, read_data, write_data};
use crate::grad_sum::{Summed, WeightedSum};

/// Elements `elements` (row-major) of float parameter `param`: a part of one rank's shard.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Piece {
    param: usize,
    elements: Range<usize>,
}

/// The pieces of each rank's shard, in rank order, for parameters of `sizes` elements: of the
/// `E` elements in all, rank `j` of `ranks` owns `[E j / N, E (j + 1) / N)`.
fn shards(sizes: &[usize], ranks: usize) -> Vec<Vec<Piece>> {
    let total: usize = sizes.iter().sum();
    let mut pieces = vec![Vec::new(); ranks];
    let mut start = 0;
    for (param, &size) in sizes.iter().enumerate() {
        let end = start + size;
        for (rank, shard) in pieces.iter_mut().enumerate() {
            let (first, last) = (total * rank / ranks, total * (rank + 1) / ranks);
            let (from, to) = (first.max(start), last.min(end));
            if from < to {
                shard.push(Piece {
                    param,
                    elements: from - start..to - start,
                });
            }
        }
        start = end;
    }
    pieces
}

/// One replica's gradient on the host, parameter by parameter.
struct Term {
    as_came: bool,
    grads: Vec<Option<TensorData>>,
}

/// The sum of every rank's `local` gradients (its replicas', in replica order) in global
/// replica order, on `device`, and the bytes this rank sent the others for it.
pub(super) fn exchange<B: AutodiffBackend, M: AutodiffModule<B>>(
    peers: &Peers,
    model: &M,
    local: Vec<Summed>,
    device: &Device<B>,
) -> (Summed, u64) {
    let params = flattened(model);
    let sizes: Vec<usize> = params
        .iter()
        .map(|param| param.shape().num_elements())
        .collect();
    let shards = shards(&sizes, peers.size());
    let terms: Vec<Term> = local
        .into_iter()
        .map(|summed| Term {
            as_came: summed.as_came,
            grads: grads_to_host(model, summed.grads),
        })
        .collect();
    let me = peers.rank();
    let outgoing: Vec<Vec<u8>> = shards
        .iter()
        .map(|pieces| write_terms(&terms, pieces))
        .collect();
    drop(terms);
    let mut sent: usize = outgoing
        .iter()
        .enumerate()
        .filter(|(rank, _)| *rank != me)
        .map(|(_, bytes)| bytes.len())
        .sum();
    let incoming = peers.all_to_all(outgoing);

    let sum = sum_shard(&params, &shards[me], &incoming, device);
    let mine = write_sum(&params, &shards[me], sum);
    sent += mine.len() * (peers.size() - 1);
    let sums = peers.all_gather(mine);
    let sum = assemble(model, params.len(), &shards, &sums, device);
    (sum, sent as u64)
}

/// The module's float parameters flattened, with their ids: the parameters [`WeightedSum`]
/// adds shards of (only their ids are read).
fn flattened<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> Vec<Param<Tensor<B, 1>>> {
    struct Flatten<B: AutodiffBackend>(Vec<Param<Tensor<B, 1>>>);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Flatten<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let flat = param.val().inner().reshape([param.shape().num_elements()]);
            let flat = Param::initialized(param.id, Tensor::from_inner(flat));
            self.0.push(flat);
        }
    }
    let mut flatten = Flatten(Vec::new());
    model.visit(&mut flatten);
    flatten.0
}

/// For the owner of `pieces`: each term's pieces, the term's `as_came` before them.
fn write_terms(terms: &[Term], pieces: &[Piece]) -> Vec<u8> {
    let mut writer = Writer::default();
    writer.u64(terms.len() as u64);
    for term in terms {
        writer.u8(term.as_came as u8);
        for piece in pieces {
            write_piece(
                &mut writer,
                term.grads[piece.param].as_ref(),
                &piece.elements,
            );
        }
    }
    writer.0
}

fn write_piece(writer: &mut Writer, data: Option<&TensorData>, elements: &Range<usize>) {
    let Some(data) = data else {
        return writer.u8(0);
    };
    let size = data.dtype.size();
    writer.u8(1);
    write_data(
        writer,
        data.dtype,
        &data.as_bytes()[elements.start * size..elements.end * size],
    );
}

fn read_piece(reader: &mut Reader<'_>, piece: &Piece) -> Option<TensorData> {
    (reader.u8() == 1).then(|| read_data(reader, vec![piece.elements.len()]))
}

/// This rank's shard of the sum: every rank's terms (`incoming`, in rank order) added in
/// order, each term's `pieces` as gradients of a module of the flattened `params` they cut.
fn sum_shard<B: AutodiffBackend>(
    params: &[Param<Tensor<B, 1>>],
    pieces: &[Piece],
    incoming: &[Vec<u8>],
    device: &Device<B>,
) -> Summed {
    let shard: Vec<_> = pieces
        .iter()
        .map(|piece| params[piece.param].clone())
        .collect();
    let mut sum = WeightedSum::default();
    for bytes in incoming {
        let mut reader = Reader::new(bytes);
        for _ in 0..reader.u64() {
            let as_came = reader.u8() == 1;
            let mut grads = GradientsParams::new();
            for (param, piece) in shard.iter().zip(pieces) {
                if let Some(data) = read_piece(&mut reader, piece) {
                    let dtype = data.dtype;
                    let grad = Tensor::<B::InnerBackend, 1>::from_data(data, (device, dtype));
                    grads.register(param.id, grad);
                }
            }
            sum.add_summed(&shard, Summed { grads, as_came })
                .unwrap_or_else(|error| panic!("{error}"));
        }
    }
    sum.finish()
}

/// This rank's summed shard (its `pieces` of `params`) for every rank.
fn write_sum<B: AutodiffBackend>(
    params: &[Param<Tensor<B, 1>>],
    pieces: &[Piece],
    sum: Summed,
) -> Vec<u8> {
    let mut writer = Writer::default();
    writer.u8(sum.as_came as u8);
    for piece in pieces {
        let grad = sum.grads.get::<B::InnerBackend, 1>(params[piece.param].id);
        let data = grad.map(diagnostics::read_back);
        write_piece(&mut writer, data.as_ref(), &(0..piece.elements.len()));
    }
    writer.0
}

/// The whole sum on `device`, from every rank's summed shard (`sums`, in rank order).
fn assemble<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    params: usize,
    shards: &[Vec<Piece>],
    sums: &[Vec<u8>],
    device: &Device<B>,
) -> Summed {
    let mut host = vec![None; params];
    let mut as_came = false;
    for (pieces, bytes) in shards.iter().zip(sums) {
        let mut reader = Reader::new(bytes);
        // The same on every rank: each summed the same terms.
        as_came = reader.u8() == 1;
        for piece in pieces {
            if let Some(data) = read_piece(&mut reader, piece) {
                let (_, bytes) = host[piece.param].get_or_insert_with(|| (data.dtype, Vec::new()));
                bytes.extend_from_slice(data.as_bytes());
            }
        }
    }
    Summed {
        grads: grads_from_host(model, host, device),
        as_came,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(param: usize, elements: Range<usize>) -> Piece {
        Piece { param, elements }
    }

    #[test]
    fn shards_split_the_flattened_gradient_evenly_across_parameters() {
        // 10 elements in 3 parameters, 3 ranks: [0, 3), [3, 6), [6, 10).
        let shards = shards(&[4, 1, 5], 3);
        assert_eq!(
            shards,
            vec![
                vec![piece(0, 0..3)],
                vec![piece(0, 3..4), piece(1, 0..1), piece(2, 0..1)],
                vec![piece(2, 1..5)],
            ]
        );
    }

    #[test]
    fn every_element_has_one_owner_in_order() {
        for (sizes, ranks) in [(vec![7, 0, 3, 12], 4), (vec![1], 3), (vec![5, 5], 1)] {
            let shards = shards(&sizes, ranks);
            assert_eq!(shards.len(), ranks);
            let mut owned: Vec<(usize, usize)> = Vec::new();
            for piece in shards.iter().flatten() {
                assert!(
                    !piece.elements.is_empty(),
                    "{sizes:?} over {ranks}: empty piece"
                );
                owned.extend(piece.elements.clone().map(|element| (piece.param, element)));
            }
            let all: Vec<_> = sizes
                .iter()
                .enumerate()
                .flat_map(|(param, &size)| (0..size).map(move |element| (param, element)))
                .collect();
            assert_eq!(owned, all, "{sizes:?} over {ranks}");
            // Shard sizes differ by at most one element.
            let lens: Vec<usize> = shards
                .iter()
                .map(|pieces| pieces.iter().map(|piece| piece.elements.len()).sum())
                .collect();
            let (least, most) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
            assert!(most - least <= 1, "{sizes:?} over {ranks}: {lens:?}");
        }
    }
}
