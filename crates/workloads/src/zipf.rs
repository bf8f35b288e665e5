//! A Zipfian choice over `0..n`: rank `i` is drawn with probability proportional to `1 / (i + 1)^s`.
//!
//! Written out (a cumulative table and a binary search) rather than taken from a distributions crate, so
//! that the stream of choices for a seed never changes under a dependency upgrade: generated histories are
//! reproducible from their seed.

use rand::Rng;

/// A Zipfian distribution over `0..n`.
#[derive(Clone, Debug, PartialEq)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `0..n` (at least one element) with exponent `s` (0 is uniform).
    pub fn new(n: u64, s: f64) -> Self {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n as usize);
        let mut total = 0.0;
        for i in 0..n {
            total += 1.0 / ((i + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// Draws one rank.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.r#gen();
        let i = self.cdf.partition_point(|&c| c < u);
        i.min(self.cdf.len() - 1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn low_ranks_are_chosen_more_often() {
        let z = Zipf::new(100, 1.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0u32; 100];
        for _ in 0..20_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > 2 * counts[3], "{:?}", &counts[..5]);
        assert!(counts[0] > 10 * counts[99]);
        // Rank 0 has probability 1/H(100) ≈ 0.193.
        assert!((3200..4500).contains(&counts[0]), "{}", counts[0]);
    }

    #[test]
    fn exponent_zero_is_uniform() {
        let z = Zipf::new(4, 0.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0u32; 4];
        for _ in 0..8000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (1700..2300).contains(&c)), "{counts:?}");
    }
}
