//! What the ranks agree to do next, from every rank's batches and item counts, and the bytes
//! they exchange to agree on it.

use burn::train::{LearningComponentsTypes, TrainingModel};

use super::peers::{Reader, Writer};
use super::{Input, SamTraining};
use crate::optimizer::WindowOptimizer;
use crate::window::item_weights;

/// What the ranks agreed to do next.
#[derive(Debug, PartialEq)]
pub(super) enum Plan {
    /// A step, with this process's batches' weights, replica by replica.
    Step(Vec<Vec<f64>>),
    /// No rank has a batch left this epoch.
    EpochDone,
    /// Some rank's interrupter asked to stop.
    Stopped,
}

/// One rank's part of the plan: whether its interrupter asks to stop and, replica by replica,
/// the item count of each of its next batches (`None` without item counts).
#[derive(Debug, PartialEq)]
struct RankBatches {
    stop: bool,
    replicas: Vec<Vec<Option<usize>>>,
}

/// How a batch without an item count is written.
const NO_COUNT: u64 = u64::MAX;

impl RankBatches {
    /// `stop` (u8), the replica count, then each replica's batch count and items (u64 each).
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Writer::default();
        bytes.u8(self.stop as u8);
        bytes.u64(self.replicas.len() as u64);
        for batches in &self.replicas {
            bytes.u64(batches.len() as u64);
            for items in batches {
                bytes.u64(items.map_or(NO_COUNT, |items| items as u64));
            }
        }
        bytes.0
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        let mut reader = Reader::new(bytes);
        let stop = reader.u8() == 1;
        let replicas = (0..reader.u64())
            .map(|_| {
                (0..reader.u64())
                    .map(|_| Some(reader.u64()).filter(|&items| items != NO_COUNT))
                    .map(|items| items.map(|items| items as usize))
                    .collect()
            })
            .collect();
        Self { stop, replicas }
    }
}

/// The plan of the rank at `rank`, from every rank's batches in rank order: each batch's
/// weight is its share of the whole job's step, as one process with all the replicas would
/// weight it.
///
/// # Panics
/// When the job's item counts cannot be weighted (some batches counted and others not, or a
/// batch of 0 items), with [`item_weights`]'s error.
fn agree(ranks: &[RankBatches], rank: usize) -> Plan {
    if ranks.iter().any(|batches| batches.stop) {
        return Plan::Stopped;
    }
    let all = |ranks: &[RankBatches]| -> Vec<Option<usize>> {
        let replicas = ranks.iter().flat_map(|batches| &batches.replicas);
        replicas.flatten().copied().collect()
    };
    let counts = all(ranks);
    if counts.is_empty() {
        return Plan::EpochDone;
    }
    let weights = item_weights(counts.into_iter()).unwrap_or_else(|error| panic!("{error}"));
    let mut own = weights[all(&ranks[..rank]).len()..].iter().copied();
    let replicas = &ranks[rank].replicas;
    let weights = replicas
        .iter()
        .map(|batches| own.by_ref().take(batches.len()).collect())
        .collect();
    Plan::Step(weights)
}

impl<LC> SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    /// Each of this process's batches' share of the step, replica by replica, from every
    /// rank's batches and item counts; or why no step is taken: every rank's loaders are
    /// done, or `stop` is set on some rank (its interrupter).
    pub(super) fn plan(&self, shards: &[Vec<Input<LC>>], stop: bool) -> Plan {
        let count = |input: &Input<LC>| self.items.as_ref().map(|items| items(input));
        let mine = RankBatches {
            stop,
            replicas: shards
                .iter()
                .map(|inputs| inputs.iter().map(count).collect())
                .collect(),
        };
        let peers = self.replicas.peers();
        let gathered = peers.all_gather(mine.to_bytes());
        let ranks: Vec<_> = gathered
            .iter()
            .map(|bytes| RankBatches::from_bytes(bytes))
            .collect();
        agree(&ranks, peers.rank())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(stop: bool, replicas: &[&[Option<usize>]]) -> RankBatches {
        let replicas = replicas.iter().map(|batches| batches.to_vec()).collect();
        RankBatches { stop, replicas }
    }

    #[test]
    fn a_rank_reads_back_what_another_wrote() {
        let batches = rank(true, &[&[Some(3), Some(0)], &[], &[None]]);
        let bytes = batches.to_bytes();
        // 1 + 8 (replicas) + 8 + 2 * 8 + 8 + 8 + 8: the format is fixed-width.
        assert_eq!(bytes.len(), 57);
        assert_eq!(bytes[0], 1);
        assert_eq!(RankBatches::from_bytes(&bytes), batches);
        assert_eq!(
            RankBatches::from_bytes(&rank(false, &[]).to_bytes()),
            rank(false, &[])
        );
    }

    #[test]
    fn each_rank_gets_its_batches_shares_of_the_whole_step() {
        // 10 items over the job: rank 0 has 2 replicas (4 + 1 items and 2), rank 1 one (3).
        let ranks = [
            rank(false, &[&[Some(4), Some(1)], &[Some(2)]]),
            rank(false, &[&[Some(3)]]),
        ];
        assert_eq!(
            agree(&ranks, 0),
            Plan::Step(vec![vec![0.4, 0.1], vec![0.2]])
        );
        assert_eq!(agree(&ranks, 1), Plan::Step(vec![vec![0.3]]));
        // Without item counts every batch weighs the same; a done loader has no batch.
        let ranks = [rank(false, &[&[None], &[]]), rank(false, &[&[None, None]])];
        let third = 1.0 / 3.0;
        assert_eq!(agree(&ranks, 0), Plan::Step(vec![vec![third], vec![]]));
        assert_eq!(agree(&ranks, 1), Plan::Step(vec![vec![third, third]]));
    }

    #[test]
    fn a_stop_anywhere_stops_every_rank_and_no_batch_ends_the_epoch() {
        let ranks = [rank(false, &[&[Some(1)]]), rank(true, &[&[Some(1)]])];
        assert_eq!(agree(&ranks, 0), Plan::Stopped);
        let done = [rank(false, &[&[]]), rank(false, &[&[], &[]])];
        assert_eq!(agree(&done, 1), Plan::EpochDone);
    }

    #[test]
    #[should_panic(expected = "some micro-batches give an item count and others do not")]
    fn counts_on_some_ranks_only_are_refused() {
        agree(&[rank(false, &[&[Some(2)]]), rank(false, &[&[None]])], 0);
    }
}
