//! What the simulation benches share (`queue-bench`, `layout-bench`): a seeded random stream,
//! so that a workload is the same on every machine, and the figures they report (waits and
//! their percentiles, a reading's mean over windows of the run).

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

/// A job's wait from `arrival` to its first start, and whether it started; one that never did
/// waited until the end of a run of `seconds`.
pub fn wait(arrival: u64, first_start: Option<u64>, seconds: u64) -> (u64, bool) {
    match first_start {
        Some(s) => (s.saturating_sub(arrival), true),
        None => (seconds.saturating_sub(arrival), false),
    }
}

/// A reading's mean over consecutive windows of a run (allocation over time).
#[derive(Clone, Debug, Default)]
pub struct Windows {
    width: u64,
    seconds: u64,
    /// Per window: the sum of the readings and how many.
    sums: Vec<(f64, u64)>,
}

impl Windows {
    /// Windows of `width` seconds over a run of `seconds`.
    pub fn new(seconds: u64, width: u64) -> Windows {
        let width = width.max(1);
        Windows {
            width,
            seconds,
            sums: vec![(0.0, 0); seconds.div_ceil(width) as usize],
        }
    }

    /// Adds the reading `x` taken at second `t`.
    pub fn add(&mut self, t: u64, x: f64) {
        if let Some(w) = self.sums.get_mut((t / self.width) as usize) {
            w.0 += x;
            w.1 += 1;
        }
    }

    /// How many windows.
    pub fn len(&self) -> usize {
        self.sums.len()
    }

    /// Whether the run had no window.
    pub fn is_empty(&self) -> bool {
        self.sums.is_empty()
    }

    /// The windows' headings: `0–10 min`, `10–20 min`, …
    pub fn heads(&self) -> Vec<String> {
        (0..self.sums.len() as u64)
            .map(|w| {
                format!(
                    "{}–{} min",
                    w * self.width / 60,
                    ((w + 1) * self.width).min(self.seconds) / 60
                )
            })
            .collect()
    }

    /// Each window's mean, in percent (one decimal).
    pub fn percents(&self) -> Vec<String> {
        self.sums
            .iter()
            .map(|(sum, n)| format!("{:.1}", sum * 100.0 / (*n).max(1) as f64))
            .collect()
    }
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

    #[test]
    fn windows_average_their_readings_and_say_their_span() {
        let mut w = Windows::new(1500, 600);
        assert_eq!(w.len(), 3);
        w.add(0, 0.5);
        w.add(599, 1.0);
        w.add(600, 0.25);
        w.add(9999, 1.0);
        assert_eq!(w.heads(), vec!["0–10 min", "10–20 min", "20–25 min"]);
        assert_eq!(w.percents(), vec!["75.0", "25.0", "0.0"]);
        assert_eq!(wait(10, Some(25), 100), (15, true));
        assert_eq!(wait(10, None, 100), (90, false));
    }
}
