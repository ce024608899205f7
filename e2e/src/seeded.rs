//! What the simulation benches share (`queue-bench`, `layout-bench`): a seeded random stream,
//! so that a workload is the same on every machine, and the percentiles they report.

/// xorshift64* seeded through splitmix64: small, deterministic, good enough for a workload.
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi` (modulo bias is negligible here).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// A percentage roll: `0..100`.
    pub fn pct(&mut self) -> u64 {
        self.next_u64() % 100
    }
}

/// Nearest-rank percentile of sorted `v` (0 when empty).
pub fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// `p50 / p99 / max` of waits `(seconds, started)`, `≥` where jobs that never started (counted
/// with the time they waited until the end of the run) are among them.
pub fn wait_cell(waits: &[(u64, bool)]) -> String {
    let mut v: Vec<u64> = waits.iter().map(|(w, _)| *w).collect();
    v.sort_unstable();
    let Some(&max) = v.last() else {
        return "–".to_string();
    };
    let censored_from = waits
        .iter()
        .filter(|(_, started)| !started)
        .map(|(w, _)| *w)
        .min();
    let cell = |x: u64| match censored_from {
        Some(c) if x >= c => format!("≥ {x}"),
        _ => x.to_string(),
    };
    format!(
        "{} / {} / {}",
        cell(percentile(&v, 50.0)),
        cell(percentile(&v, 99.0)),
        cell(max)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_stream_and_ranges_stay_inside() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let x = a.range(30, 600);
            assert_eq!(x, b.range(30, 600));
            assert!((30..=600).contains(&x));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn waits_of_jobs_never_started_are_marked_as_lower_bounds() {
        assert_eq!(wait_cell(&[]), "–");
        let waits: Vec<(u64, bool)> = (1..=100).map(|w| (w, true)).collect();
        assert_eq!(wait_cell(&waits), "50 / 99 / 100");
        let mut waits = waits;
        waits.push((500, false));
        assert_eq!(wait_cell(&waits), "51 / 100 / ≥ 500");
    }
}
