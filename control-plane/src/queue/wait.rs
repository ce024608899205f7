//! Estimated waits: when the devices a waiting pod needs — its own and those of its tenant's
//! workloads ahead of it — will have been freed. Where the runs holding enough of them declare
//! their ends (`activeDeadlineSeconds`, which the kubelet enforces), from those ends; else at
//! the rate GPUs freed up lately (the devices of admitted workloads that ended, over the last
//! [`WINDOW`]). Each said as such; none when nothing of a kind was freed lately.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use fabrik_gpu::queue::{Gpus, Input};

/// How far back the rate looks.
pub const WINDOW: Duration = Duration::from_secs(600);

/// Devices freed lately.
pub struct Freed {
    started: Instant,
    /// Held devices of each admitted workload at the last decision.
    held: BTreeMap<String, Gpus>,
    /// The admitted workloads the queue preempted, until they are gone: what they free is
    /// spoken for, no turnover a waiting pod can count on.
    preempted: BTreeSet<String>,
    /// When workloads ended, and what they held.
    ended: VecDeque<(Instant, Gpus)>,
    /// The admitted workloads that declare their ends at the last decision: when (nanoseconds
    /// since the epoch) and what they hold.
    ends: Vec<(i128, Gpus)>,
    /// When the last decision was made (nanoseconds since the epoch).
    decided: i128,
}

impl Default for Freed {
    fn default() -> Freed {
        Freed::since(Instant::now())
    }
}

impl Freed {
    /// Counting from `started`.
    pub fn since(started: Instant) -> Freed {
        Freed {
            started,
            held: BTreeMap::new(),
            preempted: BTreeSet::new(),
            ended: VecDeque::new(),
            ends: Vec::new(),
            decided: 0,
        }
    }

    /// Notes the admitted workloads of a decision made at `now`: those gone since the last one
    /// freed what they held — but for those the queue preempted ([`Freed::preempting`]): what a
    /// preemption frees is spoken for, and a burst of them would make every wait look short.
    pub fn observe(&mut self, input: &Input, now: Instant) {
        let held: BTreeMap<String, Gpus> = input
            .admitted
            .iter()
            .map(|a| (a.key.clone(), a.gpus()))
            .collect();
        for (key, gpus) in &self.held {
            if !held.contains_key(key) && !gpus.is_empty() && !self.preempted.contains(key) {
                self.ended.push_back((now, gpus.clone()));
            }
        }
        self.preempted.retain(|key| held.contains_key(key));
        self.ends = input
            .admitted
            .iter()
            .filter_map(|a| Some((a.ends_by?, held.get(&a.key)?.clone())))
            .collect();
        self.decided = input.now;
        self.held = held;
        while self
            .ended
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > WINDOW)
        {
            self.ended.pop_front();
        }
    }

    /// Notes the workloads a decision preempts.
    pub fn preempting<'k>(&mut self, keys: impl IntoIterator<Item = &'k str>) {
        self.preempted.extend(keys.into_iter().map(str::to_string));
    }

    /// Devices of `resource` freed per second lately.
    fn rate(&self, resource: &str, now: Instant) -> f64 {
        let freed: i64 = self
            .ended
            .iter()
            .map(|(_, g)| g.get(resource).copied().unwrap_or(0))
            .sum();
        let span = now.duration_since(self.started).min(WINDOW).as_secs_f64();
        if span <= 0.0 {
            return 0.0;
        }
        freed as f64 / span
    }

    /// Seconds until `n` devices of `resource` are freed by the runs that declare their ends,
    /// if they hold that many.
    fn declared(&self, resource: &str, n: i64) -> Option<f64> {
        let mut ends: Vec<(i128, i64)> = self
            .ends
            .iter()
            .filter_map(|(end, g)| Some((*end, *g.get(resource)?)))
            .collect();
        ends.sort_unstable();
        let mut freed = 0;
        for (end, k) in ends {
            freed += k;
            if freed >= n {
                return Some((end - self.decided).max(0) as f64 / 1e9);
            }
        }
        None
    }

    /// What to tell a pod that needs `ahead` to be freed first.
    pub fn describe(&self, ahead: &Gpus, now: Instant) -> String {
        let needed = ahead.iter().filter(|(_, n)| **n > 0);
        let declared: Option<Vec<f64>> =
            needed.clone().map(|(r, n)| self.declared(r, *n)).collect();
        if let Some(secs) = declared.filter(|d| !d.is_empty()) {
            return format!(
                "estimated wait {} (when the runs holding the GPUs it needs end, as they declare)",
                readable(secs.into_iter().fold(0.0, f64::max))
            );
        }
        let mut worst: Option<f64> = Some(0.0);
        for (r, n) in needed {
            let rate = self.rate(r, now);
            worst = match (worst, rate > 0.0) {
                (Some(w), true) => Some(w.max(*n as f64 / rate)),
                _ => None,
            };
        }
        let minutes = WINDOW.as_secs() / 60;
        match worst {
            Some(secs) => format!(
                "estimated wait {} (at the rate GPUs were freed in the last {minutes} min)",
                readable(secs)
            ),
            None => format!(
                "no estimated wait: none of the GPUs it needs were freed in the last {minutes} min"
            ),
        }
    }
}

/// `45 s`, `4 min`, `2 h 10 min`.
fn readable(secs: f64) -> String {
    let s = secs.ceil() as u64;
    match s {
        0..=59 => "under a minute".to_string(),
        60..=3599 => format!("about {} min", s.div_ceil(60)),
        _ => format!("about {} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_gpu::placement::model::PodRequest;
    use fabrik_gpu::queue::{Admitted, HeldPod};

    fn admitted(key: &str, gpus: i64) -> Admitted {
        Admitted {
            tenant: "a".into(),
            key: key.into(),
            pods: vec![HeldPod {
                request: PodRequest {
                    requests: [("nvidia.com/gpu".to_string(), gpus)].into(),
                    ..Default::default()
                },
                node: "n1".into(),
                devices: Vec::new(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_wait_is_what_must_free_up_at_the_recent_rate() {
        let t0 = Instant::now();
        let mut freed = Freed::since(t0);
        let mut input = Input {
            admitted: vec![admitted("w1", 4), admitted("w2", 2)],
            ..Default::default()
        };
        freed.observe(&input, t0);
        let ahead: Gpus = [("nvidia.com/gpu".to_string(), 6)].into();
        // Nothing freed yet: no estimate, said so.
        assert!(freed
            .describe(&ahead, t0 + Duration::from_secs(60))
            .starts_with("no estimated wait"),);
        // 4 GPUs freed in the first 2 minutes: 2 per minute; 6 more take about 3 minutes.
        input.admitted.remove(0);
        freed.observe(&input, t0 + Duration::from_secs(30));
        let said = freed.describe(&ahead, t0 + Duration::from_secs(120));
        assert!(said.starts_with("estimated wait about 3 min"), "{said}");
        // Out of the window, the rate forgets them.
        freed.observe(&input, t0 + WINDOW + Duration::from_secs(60));
        let said = freed.describe(&ahead, t0 + WINDOW + Duration::from_secs(60));
        assert!(said.starts_with("no estimated wait"), "{said}");
    }

    #[test]
    fn what_preemptions_free_is_no_turnover() {
        let t0 = Instant::now();
        let mut freed = Freed::since(t0);
        let mut input = Input {
            admitted: vec![admitted("gang", 8), admitted("run", 2)],
            ..Default::default()
        };
        freed.observe(&input, t0);
        // The gang is preempted, then gone; the run ends on its own.
        freed.preempting(["gang"]);
        input.admitted[0].leaving = true;
        freed.observe(&input, t0 + Duration::from_secs(10));
        input.admitted.clear();
        freed.observe(&input, t0 + Duration::from_secs(20));
        // Only the run's 2 GPUs count: 2 in 2 minutes, 4 more take about 4 minutes (with the
        // gang's 8, it would have said under a minute).
        let need: Gpus = [("nvidia.com/gpu".to_string(), 4)].into();
        let said = freed.describe(&need, t0 + Duration::from_secs(120));
        assert!(said.starts_with("estimated wait about 4 min"), "{said}");
    }

    #[test]
    fn declared_ends_give_the_wait_where_they_cover_what_is_needed() {
        let s = 1_000_000_000i128;
        let t0 = Instant::now();
        let mut freed = Freed::since(t0);
        let mut runs = vec![admitted("w1", 4), admitted("w2", 2), admitted("w3", 2)];
        runs[0].ends_by = Some(700 * s);
        runs[1].ends_by = Some(250 * s);
        let input = Input {
            admitted: runs,
            now: 100 * s,
            ..Default::default()
        };
        freed.observe(&input, t0);
        let need = |n: i64| -> Gpus { [("nvidia.com/gpu".to_string(), n)].into() };
        // 2 freed at 250 s (in 150 s), 6 by 700 s (in 10 min).
        let said = freed.describe(&need(2), t0);
        assert!(
            said.starts_with("estimated wait about 3 min (when the runs"),
            "{said}"
        );
        let said = freed.describe(&need(5), t0);
        assert!(
            said.starts_with("estimated wait about 10 min (when the runs"),
            "{said}"
        );
        // More than the declaring runs hold: the rate (none yet).
        let said = freed.describe(&need(7), t0);
        assert!(said.starts_with("no estimated wait"), "{said}");
    }

    #[test]
    fn gpus_held_through_resource_claims_count_as_freed_and_as_ending() {
        let s = 1_000_000_000i128;
        let t0 = Instant::now();
        let mut freed = Freed::since(t0);
        // A run whose pod asks for no GPU in its requests but holds 4 through a claim.
        let mut run = admitted("claims", 0);
        run.pods[0].request.requests.clear();
        run.pods[0].request.claimed = [("nvidia.com/gpu".to_string(), 4)].into();
        run.ends_by = Some(220 * s);
        let mut input = Input {
            admitted: vec![run],
            now: 100 * s,
            ..Default::default()
        };
        freed.observe(&input, t0);
        let need: Gpus = [("nvidia.com/gpu".to_string(), 4)].into();
        let said = freed.describe(&need, t0);
        assert!(
            said.starts_with("estimated wait about 2 min (when the runs"),
            "{said}"
        );
        // Once it is gone, its 4 GPUs are what freed up lately.
        input.admitted.clear();
        freed.observe(&input, t0 + Duration::from_secs(60));
        let said = freed.describe(&need, t0 + Duration::from_secs(120));
        assert!(said.starts_with("estimated wait about 2 min"), "{said}");
    }
}
