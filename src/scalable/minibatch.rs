//! Minibatch streams: epochs of seeded random permutations of the training rows, cut into
//! batches of the given size (the last batch of an epoch holds the remainder: 52 rows for
//! N = 7352 at |S| = 100). Every row is seen once an epoch; each method scales a batch by
//! N / |batch|, so its gradient stays unbiased. Galy-Fajou et al.'s code draws each minibatch
//! afresh at a fixed |S| instead (notes §5.4): the epoch's short batch is the difference, a
//! little more noise in the steps that see it.
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

/// `batch: full` or a minibatch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Batch {
    Size(usize),
    Named(BatchName),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchName {
    /// Every training row every step (batch CAVI, batch EP).
    Full,
}

impl Batch {
    /// Rows per step for `n` training rows (`full`: all of them).
    pub fn rows(&self, n: usize) -> usize {
        match *self {
            Batch::Size(s) => s.min(n),
            Batch::Named(BatchName::Full) => n,
        }
    }

    pub fn is_full(&self) -> bool {
        *self == Batch::Named(BatchName::Full)
    }
}

/// Batches of `size` rows; each epoch is a fresh permutation, split in order, the last batch of
/// an epoch possibly smaller. A stream is deterministic in its seed.
#[derive(Clone, Debug)]
pub struct Minibatches {
    order: Vec<usize>,
    size: usize,
    at: usize,
    epoch: u64,
    rng: Pcg64,
}

impl Minibatches {
    /// A stream over rows 0..n; `size` is capped at n.
    pub fn new(n: usize, size: usize, seed: u64) -> Self {
        assert!(n > 0 && size > 0, "a minibatch stream needs rows and a positive batch size");
        let mut rng = Pcg64::seed_from_u64(seed);
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut rng);
        Minibatches { order, size: size.min(n), at: 0, epoch: 0, rng }
    }

    /// The next batch of row indices.
    pub fn next_batch(&mut self) -> Vec<usize> {
        if self.at >= self.order.len() {
            self.order.shuffle(&mut self.rng);
            self.at = 0;
            self.epoch += 1;
        }
        let end = (self.at + self.size).min(self.order.len());
        let batch = self.order[self.at..end].to_vec();
        self.at = end;
        batch
    }

    /// Completed epochs.
    pub fn epochs(&self) -> u64 {
        self.epoch
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.order.len().div_ceil(self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_visits_every_row_once_and_a_seed_fixes_the_stream() {
        let mut s = Minibatches::new(10, 4, 3);
        assert_eq!(s.batches_per_epoch(), 3);
        for epoch in 0..3 {
            let mut seen: Vec<usize> = (0..3).flat_map(|_| s.next_batch()).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..10).collect::<Vec<_>>(), "epoch {epoch}");
        }
        let a: Vec<Vec<usize>> = {
            let mut s = Minibatches::new(10, 4, 3);
            (0..7).map(|_| s.next_batch()).collect()
        };
        let b: Vec<Vec<usize>> = {
            let mut s = Minibatches::new(10, 4, 3);
            (0..7).map(|_| s.next_batch()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a[0], a[3], "a new epoch is a new permutation");
        assert_eq!(Minibatches::new(3, 50, 1).next_batch().len(), 3);
    }
}
