//! Seeded, portable randomness: a SplitMix64 generator and integer length distributions.
//!
//! Golden snapshots must not move when a dependency is updated or the platform changes, so the
//! generator is spelled out here (SplitMix64, Steele et al. 2014) instead of borrowing
//! `rand::StdRng`, whose algorithm may change between `rand` releases, and every draw that
//! decides a length or a mask uses integer arithmetic or exact `f64` comparisons only.

use serde::{Deserialize, Serialize};

/// SplitMix64: a 64-bit generator whose output depends only on its seed.
///
/// # Example
/// ```
/// use golden::dist::SplitMix64;
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    /// ```
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent generator for item `index` of stream `stream` under `seed` (for example
    /// the tokens of document 17), so that drawing one stream never shifts another.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// let a = SplitMix64::stream(1, 2, 3).next_u64();
    /// assert_ne!(a, SplitMix64::stream(1, 2, 4).next_u64());
    /// assert_eq!(a, SplitMix64::stream(1, 2, 3).next_u64());
    /// ```
    pub fn stream(seed: u64, stream: u64, index: u64) -> Self {
        let s = mix(seed ^ mix(stream.wrapping_add(0x5851_F42D_4C95_7F2D)));
        Self::new(mix(s ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    /// The next 64 random bits.
    ///
    /// ```text
    /// state += 0x9E3779B97F4A7C15;  z = state
    /// z = (z ^ z>>30)·0xBF58476D1CE4E5B9;  z = (z ^ z>>27)·0x94D049BB133111EB;  z ^ z>>31
    /// ```
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// let mut r = SplitMix64::new(1);
    /// assert_ne!(r.next_u64(), r.next_u64());
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// A uniform integer in `0..n` (unbiased, by rejection); 0 when `n == 0`.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// let mut r = SplitMix64::new(3);
    /// assert!((0..1000).all(|_| r.below(6) < 6));
    /// assert_eq!(r.below(0), 0);
    /// ```
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// A uniform integer in `lo..=hi` (`lo` when `hi < lo`).
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// let mut r = SplitMix64::new(3);
    /// assert!((0..1000).all(|_| (5..=9).contains(&r.inclusive(5, 9))));
    /// ```
    pub fn inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { lo + self.below(hi - lo + 1) }
    }

    /// A uniform `f64` in `[0, 1)` with 53 random bits (exact: no rounding is involved).
    ///
    /// # Example
    /// ```
    /// # use golden::dist::SplitMix64;
    /// let x = SplitMix64::new(9).unit();
    /// assert!((0.0..1.0).contains(&x));
    /// ```
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The SplitMix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A distribution of integer lengths (tokens, image patches), written in a recipe as a table
/// with a `kind`.
///
/// ```text
/// fixed      { len }                    always len
/// uniform    { min, max }               uniform on min..=max
/// histogram  { buckets = [[lo, hi, w], …] }
///            bucket j with probability w_j / Σw, then uniform on lo_j..=hi_j
/// ```
///
/// # Example
/// ```
/// use golden::dist::{LengthDist, SplitMix64};
/// let d = LengthDist::Histogram { buckets: vec![(10, 19, 3), (100, 100, 1)] };
/// assert_eq!((d.min(), d.max()), (10, 100));
/// let mut rng = SplitMix64::new(1);
/// let x = d.sample(&mut rng);
/// assert!((10..=19).contains(&x) || x == 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthDist {
    /// Every draw is `len`.
    Fixed {
        /// The length.
        len: u32,
    },
    /// Uniform on `min..=max`.
    Uniform {
        /// Smallest length.
        min: u32,
        /// Largest length.
        max: u32,
    },
    /// A piecewise-uniform histogram: `[lo, hi, weight]` per bucket, `lo..=hi` inclusive.
    Histogram {
        /// `(lo, hi, weight)` per bucket.
        buckets: Vec<(u32, u32, u32)>,
    },
}

impl LengthDist {
    /// One draw.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::{LengthDist, SplitMix64};
    /// assert_eq!(LengthDist::Fixed { len: 130 }.sample(&mut SplitMix64::new(0)), 130);
    /// ```
    pub fn sample(&self, rng: &mut SplitMix64) -> u32 {
        match self {
            LengthDist::Fixed { len } => *len,
            LengthDist::Uniform { min, max } => {
                rng.inclusive(u64::from(*min), u64::from(*max)) as u32
            }
            LengthDist::Histogram { buckets } => {
                let total: u64 = buckets.iter().map(|b| u64::from(b.2)).sum();
                let mut pick = rng.below(total);
                for &(lo, hi, w) in buckets {
                    if pick < u64::from(w) {
                        return rng.inclusive(u64::from(lo), u64::from(hi)) as u32;
                    }
                    pick -= u64::from(w);
                }
                // Unreachable for a validated histogram (Σw > 0).
                buckets.last().map_or(0, |b| b.1)
            }
        }
    }

    /// The smallest value a draw can take.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::LengthDist;
    /// assert_eq!(LengthDist::Uniform { min: 3, max: 9 }.min(), 3);
    /// ```
    pub fn min(&self) -> u32 {
        match self {
            LengthDist::Fixed { len } => *len,
            LengthDist::Uniform { min, .. } => *min,
            LengthDist::Histogram { buckets } => {
                buckets.iter().filter(|b| b.2 > 0).map(|b| b.0).min().unwrap_or(0)
            }
        }
    }

    /// The largest value a draw can take.
    ///
    /// # Example
    /// ```
    /// # use golden::dist::LengthDist;
    /// assert_eq!(LengthDist::Uniform { min: 3, max: 9 }.max(), 9);
    /// ```
    pub fn max(&self) -> u32 {
        match self {
            LengthDist::Fixed { len } => *len,
            LengthDist::Uniform { max, .. } => *max,
            LengthDist::Histogram { buckets } => {
                buckets.iter().filter(|b| b.2 > 0).map(|b| b.1).max().unwrap_or(0)
            }
        }
    }

    /// Why this distribution cannot be sampled, if it cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        match self {
            LengthDist::Fixed { .. } => None,
            LengthDist::Uniform { min, max } if min > max => {
                Some(format!("min ({min}) is greater than max ({max})"))
            }
            LengthDist::Uniform { .. } => None,
            LengthDist::Histogram { buckets } => {
                if let Some((j, b)) = buckets.iter().enumerate().find(|(_, b)| b.0 > b.1) {
                    return Some(format!("bucket {j} has lo ({}) greater than hi ({})", b.0, b.1));
                }
                if buckets.iter().map(|b| u64::from(b.2)).sum::<u64>() == 0 {
                    return Some("needs at least one bucket with a positive weight".into());
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (Vigna's reference implementation).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn histogram_draws_stay_in_their_buckets_and_follow_weights() {
        let d = LengthDist::Histogram { buckets: vec![(1, 1, 1), (2, 2, 3), (5, 9, 0)] };
        let mut rng = SplitMix64::new(5);
        let draws: Vec<u32> = (0..4000).map(|_| d.sample(&mut rng)).collect();
        let twos = draws.iter().filter(|&&x| x == 2).count();
        assert!(draws.iter().all(|&x| x == 1 || x == 2));
        assert!((2800..3200).contains(&twos), "{twos}");
        assert_eq!((d.min(), d.max()), (1, 2));
    }

    #[test]
    fn bad_distributions_name_their_problem() {
        let bad = LengthDist::Histogram { buckets: vec![(5, 3, 1)] };
        assert_eq!(bad.problem().unwrap(), "bucket 0 has lo (5) greater than hi (3)");
        let empty = LengthDist::Histogram { buckets: vec![(1, 3, 0)] };
        assert!(empty.problem().unwrap().contains("positive weight"));
        assert!(LengthDist::Uniform { min: 4, max: 2 }.problem().is_some());
    }
}
