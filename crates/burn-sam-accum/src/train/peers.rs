//! The processes one training run spans: this one alone, or the MPI ranks of a job (cargo
//! feature `mpi`). Everything that crosses processes goes through [`Peers::all_gather`] (every
//! rank's bytes, in rank order), [`Peers::all_to_all`] (bytes for each rank) or
//! [`Peers::broadcast`] (rank 0's), so one process is the one-rank case of the same code.

#[cfg(feature = "mpi")]
use super::ranks::Ranks;

/// This process and, under MPI, the other ranks.
#[derive(Clone, Default)]
pub(super) struct Peers {
    #[cfg(feature = "mpi")]
    ranks: Option<Ranks>,
}

/// Where this process's replicas sit among all processes' (global replica indices follow the
/// ranks in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// The global index of this process's first replica.
    pub first: usize,
    /// Replicas over all processes.
    pub total: usize,
}

impl Peers {
    #[cfg(feature = "mpi")]
    pub fn ranks(ranks: Ranks) -> Self {
        Self { ranks: Some(ranks) }
    }

    pub fn rank(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.rank();
        }
        0
    }

    pub fn size(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.size();
        }
        1
    }

    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// Every process's `mine`, in rank order.
    pub fn all_gather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = self.ranks.as_ref().filter(|ranks| ranks.size() > 1) {
            return ranks.all_gather(&mine);
        }
        vec![mine]
    }

    /// What each process sent this one, in rank order, where `to_each[r]` goes to rank `r`.
    pub fn all_to_all(&self, to_each: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        assert_eq!(to_each.len(), self.size(), "one message per rank");
        #[cfg(feature = "mpi")]
        if let Some(ranks) = self.ranks.as_ref().filter(|ranks| ranks.size() > 1) {
            return ranks.all_to_all(&to_each);
        }
        to_each
    }

    /// Rank 0's `bytes` on every process.
    pub fn broadcast(&self, bytes: Vec<u8>) -> Vec<u8> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = self.ranks.as_ref().filter(|ranks| ranks.size() > 1) {
            return ranks.broadcast(bytes);
        }
        bytes
    }

    /// Rank 0's flag on every process.
    pub fn broadcast_flag(&self, flag: bool) -> bool {
        self.broadcast(vec![flag as u8]) == [1]
    }

    /// The replicas' layout, once every process has `local` replicas and `settings` equal
    /// to rank 0's.
    ///
    /// # Panics
    /// On every rank, naming each setting that differs, its value there and on rank 0: a run
    /// whose ranks disagree would not be the run asked for.
    pub fn handshake(&self, local: usize, settings: &[(&str, String)]) -> Layout {
        let mut mine = Writer::default();
        mine.u64(local as u64);
        for (name, value) in settings {
            mine.text(&format!("{name} {value}"));
        }
        let all = self.all_gather(mine.0);
        let mut counts = Vec::with_capacity(all.len());
        let mut lines = Vec::with_capacity(all.len());
        for bytes in &all {
            let mut reader = Reader::new(bytes);
            counts.push(reader.u64() as usize);
            lines.push(
                (0..settings.len())
                    .map(|_| reader.text())
                    .collect::<Vec<_>>(),
            );
        }
        let mut differences = Vec::new();
        for (rank, rank_lines) in lines.iter().enumerate().skip(1) {
            for (line, root_line) in rank_lines.iter().zip(&lines[0]) {
                if line != root_line {
                    differences.push(format!("rank {rank} has {line}, rank 0 {root_line}"));
                }
            }
        }
        assert!(
            differences.is_empty(),
            "SamTraining: the ranks were started with different configurations: {}",
            differences.join("; ")
        );
        if let Some(rank) = counts.iter().position(|&count| count == 0) {
            panic!("SamTraining: rank {rank} has no replica: give each rank at least 1 device");
        }
        Layout {
            first: counts[..self.rank()].iter().sum(),
            total: counts.iter().sum(),
        }
    }
}

/// Bytes written for a collective: little-endian integers, length-prefixed byte strings.
#[derive(Default)]
pub(super) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    pub fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    pub fn text(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }
}

/// Reads what a [`Writer`] wrote, in the same order.
pub(super) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    fn take(&mut self, len: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(len);
        self.0 = tail;
        head
    }

    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }

    pub fn bytes(&mut self) -> &'a [u8] {
        let len = self.u64() as usize;
        self.take(len)
    }

    pub fn text(&mut self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_is_rank_zero_of_one() {
        let peers = Peers::default();
        assert_eq!((peers.rank(), peers.size()), (0, 1));
        assert_eq!(peers.all_gather(vec![1, 2]), vec![vec![1, 2]]);
        assert_eq!(peers.all_to_all(vec![vec![4]]), vec![vec![4]]);
        assert_eq!(peers.broadcast(vec![3]), vec![3]);
        assert!(peers.broadcast_flag(true) && !peers.broadcast_flag(false));
        let layout = peers.handshake(3, &[("window", "2".into())]);
        assert_eq!(layout, Layout { first: 0, total: 3 });
    }

    #[test]
    fn a_reader_reads_what_a_writer_wrote() {
        let mut writer = Writer::default();
        writer.u8(7);
        writer.u64(u64::MAX - 1);
        writer.text("window 4");
        writer.bytes(&[]);
        let mut reader = Reader::new(&writer.0);
        assert_eq!(reader.u8(), 7);
        assert_eq!(reader.u64(), u64::MAX - 1);
        assert_eq!(reader.text(), "window 4");
        assert_eq!(reader.bytes(), &[] as &[u8]);
        assert!(reader.0.is_empty());
    }
}
