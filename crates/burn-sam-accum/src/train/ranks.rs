//! MPI ranks (cargo feature `mpi`): the processes one [`SamTraining`](super::SamTraining)
//! spans, launched by `mpirun -np N` or Slurm's `srun`, and the collectives it uses (all-gather,
//! all-to-all, broadcast), all called from the training thread only.

use std::fmt;
use std::sync::Arc;

use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use mpi::{Count, Threading};

/// This process's place among the MPI ranks of a job. [`Ranks::init`] initialises MPI once per
/// process; keep the value (or a clone) alive until training ends: dropping the last one
/// finalises MPI.
///
/// Under `Ranks`, a panic on any thread of any rank prints its message and the rank, then
/// ends the whole job (`MPI_Abort`): the other ranks never wait for a rank that is gone.
///
/// ```no_run
/// use burn_sam_accum::train::Ranks;
///
/// let ranks = Ranks::init()?;
/// if ranks.is_root() {
///     println!("{} ranks", ranks.size());
/// }
/// # Ok::<(), burn_sam_accum::train::RanksError>(())
/// ```
#[derive(Clone)]
pub struct Ranks {
    universe: Arc<Universe>,
    rank: usize,
    size: usize,
}

/// Why [`Ranks::init`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RanksError {
    /// MPI was initialised before in this process.
    AlreadyInitialized,
    /// The MPI library gives a lower thread level than `MPI_THREAD_SERIALIZED`, which
    /// [`SamTraining`](super::SamTraining) needs: its replicas' threads never call MPI, but the
    /// training thread need not be the one that initialised it.
    ThreadLevel {
        /// The level the library provides.
        provided: String,
    },
}

impl fmt::Display for RanksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyInitialized => write!(
                f,
                "MPI is already initialised in this process: call `Ranks::init` once"
            ),
            Self::ThreadLevel { provided } => write!(
                f,
                "the MPI library provides thread level {provided}, SamTraining needs \
                 Serialized or Multiple: use an MPI built with thread support"
            ),
        }
    }
}

impl std::error::Error for RanksError {}

impl Ranks {
    /// Initialises MPI with thread level `MPI_THREAD_SERIALIZED` (only one thread calls MPI
    /// at a time: the training thread), checks that the library provides it, and makes a
    /// panic end the job on every rank.
    ///
    /// # Errors
    /// MPI already initialised, or a library without that thread level.
    pub fn init() -> Result<Self, RanksError> {
        let (universe, provided) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or(RanksError::AlreadyInitialized)?;
        if provided < Threading::Serialized {
            return Err(RanksError::ThreadLevel {
                provided: format!("{provided:?}"),
            });
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        abort_on_panic(rank, size);
        Ok(Self {
            universe: Arc::new(universe),
            rank,
            size,
        })
    }

    /// This process's rank, from 0.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this is rank 0, the one that validates, logs and writes checkpoints.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Every rank's `mine`, in rank order.
    pub(super) fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let world = self.universe.world();
        let mut lens = vec![0 as Count; self.size];
        world.all_gather_into(&self.count(mine.len()), &mut lens[..]);
        let mut received = vec![0u8; total(&lens)];
        let mut partition = PartitionMut::new(&mut received[..], &lens[..], displacements(&lens));
        world.all_gather_varcount_into(mine, &mut partition);
        split(&received, &lens)
    }

    /// What each rank sent this one, in rank order, where `to_each[r]` goes to rank `r`.
    pub(super) fn all_to_all(&self, to_each: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let world = self.universe.world();
        let sent_lens: Vec<Count> = to_each
            .iter()
            .map(|bytes| self.count(bytes.len()))
            .collect();
        let mut lens = vec![0 as Count; self.size];
        world.all_to_all_into(&sent_lens[..], &mut lens[..]);
        let sent = to_each.concat();
        let sent = Partition::new(&sent[..], &sent_lens[..], displacements(&sent_lens));
        let mut received = vec![0u8; total(&lens)];
        let mut partition = PartitionMut::new(&mut received[..], &lens[..], displacements(&lens));
        world.all_to_all_varcount_into(&sent, &mut partition);
        split(&received, &lens)
    }

    /// `len` bytes as an MPI count.
    fn count(&self, len: usize) -> Count {
        Count::try_from(len).unwrap_or_else(|_| {
            panic!(
                "rank {}: {len} bytes to send in one collective, MPI counts at most {}",
                self.rank,
                Count::MAX
            )
        })
    }

    /// Rank 0's `bytes`, on every rank (the others' `bytes` are ignored).
    pub(super) fn broadcast(&self, bytes: Vec<u8>) -> Vec<u8> {
        let world = self.universe.world();
        let root = world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        let mut buffer = match self.rank {
            0 => bytes,
            _ => vec![0u8; len as usize],
        };
        root.broadcast_into(&mut buffer[..]);
        buffer
    }
}

/// Where each rank's part starts in a buffer of all parts, in rank order.
fn displacements(lens: &[Count]) -> Vec<Count> {
    lens.iter()
        .scan(0, |offset, &len| {
            let start = *offset;
            *offset += len;
            Some(start)
        })
        .collect()
}

fn total(lens: &[Count]) -> usize {
    lens.iter().map(|&len| len as usize).sum()
}

/// `received`, the parts of `lens` in order, split.
fn split(received: &[u8], lens: &[Count]) -> Vec<Vec<u8>> {
    let mut rest = received;
    lens.iter()
        .map(|&len| {
            let (part, tail) = rest.split_at(len as usize);
            rest = tail;
            part.to_vec()
        })
        .collect()
}

/// A panic anywhere prints as usual, then names the rank and aborts the job: the other ranks
/// would otherwise wait in their next collective for ever.
fn abort_on_panic(rank: usize, size: usize) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        eprintln!("burn-sam: rank {rank} of {size} panicked (above); ending the job");
        SimpleCommunicator::world().abort(101);
    }));
}
