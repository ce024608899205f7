//! The arithmetic of the HorizontalPodAutoscaler, as upstream's controller does it: replicas
//! proposed by one metric (with its tolerance and the rebalancing of pods without metrics or
//! not ready), stabilization windows over past proposals, and the rate policies of
//! `behavior`. Pure: the controller feeds it samples and the clock.

use std::time::{Duration, Instant};

use serde_json::Value;

/// A ratio within this distance of 1 changes nothing (upstream's default tolerance).
pub const TOLERANCE: f64 = 0.1;

/// How long past proposals and scale events are kept (the longest window a spec can ask for).
pub const HISTORY: Duration = Duration::from_secs(3600);

/// One pod as a per-pod metric sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Ready (its `Ready` condition true).
    pub ready: bool,
    /// Its value of the metric (milli-units), when the metrics API has one.
    pub value: Option<i128>,
    /// Its request of the resource (milli-units; resource metrics only).
    pub request: Option<i128>,
}

/// What the pods of one per-pod metric propose.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// Replicas.
    pub replicas: i32,
    /// The average value over the pods with metrics (milli-units).
    pub average: i128,
    /// The average utilisation of the request, in percent (utilization targets).
    pub utilization: Option<i64>,
}

/// Why a metric proposes nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// No pod has a value.
    #[error("no metrics returned from the metrics API for the selected pods")]
    NoMetrics,
    /// A pod with a value has no request for the resource.
    #[error("missing request for {0}")]
    MissingRequest(String),
}

/// What a per-pod target asks for: an average utilisation of the request (percent) or an
/// average value (milli-units).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// `Utilization`.
    Utilization(i64),
    /// `AverageValue`.
    AverageValue(i128),
}

/// The replicas `samples` propose against `target`, with `current` replicas now. `resource`
/// names the metric in errors.
pub fn per_pod(
    current: i32,
    samples: &[Sample],
    target: Target,
    resource: &str,
) -> Result<Proposal, Error> {
    let with_value: Vec<(&Sample, i128)> = samples
        .iter()
        .filter_map(|s| s.value.map(|v| (s, v)))
        .collect();
    if with_value.is_empty() {
        return Err(Error::NoMetrics);
    }
    let ready: Vec<(&Sample, i128)> = with_value
        .iter()
        .copied()
        .filter(|(s, _)| s.ready)
        .collect();
    let unready = with_value.len() - ready.len();
    let missing = samples.len() - with_value.len();
    // The ratio of what the ready pods use to the target, and what it reports.
    let ratio_of = |pods: &[(i128, Option<i128>)]| -> Result<(f64, i128, Option<i64>), Error> {
        let total: i128 = pods.iter().map(|(v, _)| v).sum();
        let count = pods.len().max(1) as i128;
        match target {
            Target::Utilization(t) => {
                let mut requested: i128 = 0;
                for (_, r) in pods {
                    requested += r.ok_or_else(|| Error::MissingRequest(resource.to_string()))?;
                }
                if requested <= 0 {
                    return Err(Error::MissingRequest(resource.to_string()));
                }
                let utilization = (total * 100 / requested) as i64;
                Ok((
                    utilization as f64 / t.max(1) as f64,
                    total / count,
                    Some(utilization),
                ))
            }
            Target::AverageValue(t) => {
                let average = total / count;
                Ok((average as f64 / t.max(1) as f64, average, None))
            }
        }
    };
    let measured: Vec<(i128, Option<i128>)> = if ready.is_empty() {
        with_value.iter().map(|(s, v)| (*v, s.request)).collect()
    } else {
        ready.iter().map(|(s, v)| (*v, s.request)).collect()
    };
    let (ratio, average, utilization) = ratio_of(&measured)?;
    let proposal = |replicas: i32| Proposal {
        replicas,
        average,
        utilization,
    };
    if missing == 0 && (unready == 0 || ratio <= 1.0) {
        if (1.0 - ratio).abs() <= TOLERANCE {
            return Ok(proposal(current));
        }
        return Ok(proposal((ratio * measured.len() as f64).ceil() as i32));
    }
    // Pods without metrics count at the target when scaling down and at zero when scaling up;
    // pods not ready count at zero when scaling up (upstream's conservative rebalancing).
    let mut rebalanced = measured.clone();
    let at_target = |request: Option<i128>| match target {
        Target::Utilization(t) => request.unwrap_or(0) * t as i128 / 100,
        Target::AverageValue(t) => t,
    };
    for s in samples.iter().filter(|s| s.value.is_none()) {
        let v = if ratio < 1.0 { at_target(s.request) } else { 0 };
        rebalanced.push((v, s.request));
    }
    if ratio > 1.0 {
        for (s, _) in with_value.iter().filter(|(s, _)| !s.ready) {
            rebalanced.push((0, s.request));
        }
    }
    let (new_ratio, _, _) = ratio_of(&rebalanced)?;
    if (1.0 - new_ratio).abs() <= TOLERANCE || (ratio > 1.0) != (new_ratio > 1.0) {
        return Ok(proposal(current));
    }
    let replicas = (new_ratio * rebalanced.len() as f64).ceil() as i32;
    // Never move against the direction the measured pods ask for.
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return Ok(proposal(current));
    }
    Ok(proposal(replicas))
}

/// The replicas an object-wide value proposes (`Object` and `External` metrics): `Value`
/// targets scale by the ratio of value to target; `AverageValue` targets divide the value.
pub fn whole(current: i32, value: i128, target: i128, average: bool) -> i32 {
    let target = target.max(1);
    if average {
        let ratio = value as f64 / (target as f64 * current.max(1) as f64);
        if (1.0 - ratio).abs() <= TOLERANCE {
            return current;
        }
        return (value as f64 / target as f64).ceil() as i32;
    }
    let ratio = value as f64 / target as f64;
    if (1.0 - ratio).abs() <= TOLERANCE {
        return current;
    }
    (ratio * current as f64).ceil() as i32
}

/// One direction's rules (`behavior.scaleUp` / `scaleDown`), as upstream defaults them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// Stabilization window.
    pub window: Duration,
    /// `Max`, `Min` or `Disabled`.
    pub select: String,
    /// `(Pods|Percent, value, period)`.
    pub policies: Vec<(String, i64, Duration)>,
}

impl Rules {
    /// The rules of `behavior[field]` (`scaleUp` or `scaleDown`), upstream's defaults filling
    /// what is missing.
    pub fn of(behavior: &Value, up: bool) -> Rules {
        let field = if up { "scaleUp" } else { "scaleDown" };
        let rules = &behavior[field];
        let default_window = if up { 0 } else { 300 };
        let window = rules["stabilizationWindowSeconds"]
            .as_u64()
            .unwrap_or(default_window);
        let select = rules["selectPolicy"].as_str().unwrap_or("Max").to_string();
        let mut policies: Vec<(String, i64, Duration)> = rules["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["type"].as_str()?.to_string(),
                    p["value"].as_i64()?,
                    Duration::from_secs(p["periodSeconds"].as_u64()?),
                ))
            })
            .collect();
        if policies.is_empty() {
            policies = if up {
                vec![
                    ("Pods".into(), 4, Duration::from_secs(15)),
                    ("Percent".into(), 100, Duration::from_secs(15)),
                ]
            } else {
                vec![("Percent".into(), 100, Duration::from_secs(15))]
            };
        }
        Rules {
            window: Duration::from_secs(window),
            select,
            policies,
        }
    }
}

/// Both directions' rules of a `behavior`.
#[derive(Clone, Debug, PartialEq)]
pub struct Behavior {
    /// `scaleUp`.
    pub up: Rules,
    /// `scaleDown`.
    pub down: Rules,
}

impl Behavior {
    /// The rules of `behavior`, upstream's defaults filling what is missing.
    pub fn of(behavior: &Value) -> Behavior {
        Behavior {
            up: Rules::of(behavior, true),
            down: Rules::of(behavior, false),
        }
    }
}

/// What one autoscaler remembers between passes: its unstabilized proposals and its scale
/// events (replicas added or removed), each with when.
#[derive(Clone, Debug, Default)]
pub struct History {
    proposals: Vec<(Instant, i32)>,
    ups: Vec<(Instant, i32)>,
    downs: Vec<(Instant, i32)>,
}

impl History {
    /// Notes a scale from `from` to `to` at `now`.
    pub fn scaled(&mut self, now: Instant, from: i32, to: i32) {
        if to > from {
            self.ups.push((now, to - from));
        } else if to < from {
            self.downs.push((now, from - to));
        }
    }

    fn forget_before(&mut self, now: Instant) {
        let keep = |at: &Instant| now.saturating_duration_since(*at) <= HISTORY;
        self.proposals.retain(|(at, _)| keep(at));
        self.ups.retain(|(at, _)| keep(at));
        self.downs.retain(|(at, _)| keep(at));
    }
}

fn changed_within(events: &[(Instant, i32)], now: Instant, period: Duration) -> i32 {
    events
        .iter()
        .filter(|(at, _)| now.saturating_duration_since(*at) < period)
        .map(|(_, n)| n)
        .sum()
}

/// The replicas to scale to, and why when they differ from `desired` (the condition reason and
/// message of `ScalingLimited`): `desired` stabilized over the windows, limited by the rate
/// policies and clamped to `[min, max]`. Records `desired` in `history`.
pub fn normalize(
    history: &mut History,
    now: Instant,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    behavior: &Behavior,
) -> (i32, &'static str, String) {
    let (up, down) = (&behavior.up, &behavior.down);
    history.forget_before(now);
    // Stabilize: the lowest proposal of the up window, the highest of the down window.
    let mut up_rec = desired;
    let mut down_rec = desired;
    for (at, r) in &history.proposals {
        let age = now.saturating_duration_since(*at);
        if age < up.window {
            up_rec = up_rec.min(*r);
        }
        if age < down.window {
            down_rec = down_rec.max(*r);
        }
    }
    history.proposals.push((now, desired));
    let mut stabilized = current;
    if stabilized < up_rec {
        stabilized = up_rec;
    }
    if stabilized > down_rec {
        stabilized = down_rec;
    }
    let (mut reason, mut message) = if stabilized != desired {
        (
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation".to_string(),
        )
    } else {
        (
            "DesiredWithinRange",
            "the desired count is within the acceptable range".to_string(),
        )
    };
    // Rate: what the policies allow in their periods, given what was already done in them;
    // then the bounds (upstream names whichever of the two limited the change).
    let mut out = stabilized;
    if stabilized > current {
        let limit = match up.select.as_str() {
            "Disabled" => current,
            select => {
                let proposals = up.policies.iter().map(|(ty, value, period)| {
                    let start = current - changed_within(&history.ups, now, *period);
                    if ty == "Pods" {
                        start + *value as i32
                    } else {
                        (start as f64 * (1.0 + *value as f64 / 100.0)).ceil() as i32
                    }
                });
                if select == "Min" {
                    proposals.min().unwrap_or(current)
                } else {
                    proposals.max().unwrap_or(current)
                }
            }
        }
        .max(current);
        let (allowed, why) = if max > limit {
            (limit, "ScaleUpLimit")
        } else {
            (max, "TooManyReplicas")
        };
        if out > allowed {
            out = allowed;
            reason = why;
            message = if why == "ScaleUpLimit" {
                "the desired replica count is increasing faster than the maximum scale rate".into()
            } else {
                "the desired replica count is more than the maximum replica count".into()
            };
        }
    } else if stabilized < current {
        let limit = match down.select.as_str() {
            "Disabled" => current,
            select => {
                let proposals = down.policies.iter().map(|(ty, value, period)| {
                    let start = current + changed_within(&history.downs, now, *period);
                    if ty == "Pods" {
                        start - *value as i32
                    } else {
                        (start as f64 * (1.0 - *value as f64 / 100.0)).floor() as i32
                    }
                });
                // `Max` picks the policy allowing the most change: the fewest replicas.
                if select == "Min" {
                    proposals.max().unwrap_or(current)
                } else {
                    proposals.min().unwrap_or(current)
                }
            }
        }
        .min(current);
        let (allowed, why) = if min < limit {
            (limit, "ScaleDownLimit")
        } else {
            (min, "TooFewReplicas")
        };
        if out < allowed {
            out = allowed;
            reason = why;
            message = if why == "ScaleDownLimit" {
                "the desired replica count is decreasing faster than the maximum scale rate".into()
            } else {
                "the desired replica count is less than the minimum replica count".into()
            };
        }
    }
    // A target outside the bounds is brought into them.
    if out > max {
        out = max;
        reason = "TooManyReplicas";
        message = "the desired replica count is more than the maximum replica count".into();
    }
    if out < min {
        out = min;
        reason = "TooFewReplicas";
        message = "the desired replica count is less than the minimum replica count".into();
    }
    (out, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods(values: &[(bool, Option<i128>)], request: i128) -> Vec<Sample> {
        values
            .iter()
            .map(|(ready, value)| Sample {
                ready: *ready,
                value: *value,
                request: Some(request),
            })
            .collect()
    }

    #[test]
    fn utilization_scales_by_the_ratio_beyond_the_tolerance() {
        // Two pods at 200m of 100m requested against 50 %: four times the target.
        let p = per_pod(
            2,
            &pods(&[(true, Some(200)), (true, Some(200))], 100),
            Target::Utilization(50),
            "cpu",
        )
        .expect("proposal");
        assert_eq!((p.replicas, p.utilization, p.average), (8, Some(200), 200));
        // Within 10 % of the target: unchanged.
        let p = per_pod(
            3,
            &pods(&[(true, Some(54)), (true, Some(52))], 100),
            Target::Utilization(50),
            "cpu",
        )
        .expect("proposal");
        assert_eq!(p.replicas, 3);
        // Far below: fewer.
        let p = per_pod(
            4,
            &pods(&[(true, Some(10)); 4], 100),
            Target::Utilization(50),
            "cpu",
        )
        .expect("proposal");
        assert_eq!(p.replicas, 1);
    }

    #[test]
    fn pods_without_metrics_or_not_ready_hold_back_the_change() {
        // Scaling up: the ready pod alone asks for twice as many, but with the pod without
        // metrics and the unready one counted idle the pods are under the target: unchanged.
        let samples = pods(&[(true, Some(100)), (false, Some(100)), (true, None)], 100);
        let p = per_pod(3, &samples, Target::Utilization(50), "cpu").expect("proposal");
        assert_eq!(p.replicas, 3);
        // Scaling down: a pod without metrics counts at the target (60 % of it here: still
        // within the current count).
        let samples = pods(&[(true, Some(10)), (true, None)], 100);
        let p = per_pod(2, &samples, Target::Utilization(50), "cpu").expect("proposal");
        assert_eq!(p.replicas, 2);
        // ... and with more idle pods measured, down to what the rebalanced ratio asks.
        let samples = pods(
            &[
                (true, Some(10)),
                (true, Some(10)),
                (true, Some(10)),
                (true, Some(10)),
                (true, None),
            ],
            100,
        );
        let p = per_pod(5, &samples, Target::Utilization(50), "cpu").expect("proposal");
        assert_eq!(p.replicas, 2);
    }

    #[test]
    fn missing_metrics_and_requests_are_errors() {
        assert_eq!(
            per_pod(
                1,
                &pods(&[(true, None)], 100),
                Target::Utilization(50),
                "cpu"
            ),
            Err(Error::NoMetrics)
        );
        let no_request = [Sample {
            ready: true,
            value: Some(5),
            request: None,
        }];
        assert_eq!(
            per_pod(1, &no_request, Target::Utilization(50), "cpu"),
            Err(Error::MissingRequest("cpu".into()))
        );
        // An average value needs no request.
        let p = per_pod(1, &no_request, Target::AverageValue(1), "cpu").expect("proposal");
        assert_eq!(p.replicas, 5);
    }

    #[test]
    fn object_values_scale_by_their_ratio() {
        assert_eq!(whole(2, 300, 100, false), 6);
        assert_eq!(whole(2, 105, 100, false), 2);
        assert_eq!(whole(2, 1000, 100, true), 10);
    }

    #[test]
    fn scale_down_waits_for_its_window_and_up_is_rate_limited() {
        let t0 = Instant::now();
        let b = Behavior::of(&Value::Null);
        assert_eq!(b.down.window, Duration::from_secs(300));
        let secs = Duration::from_secs;
        let mut h = History::default();
        // Up from 1 to 20 wanted: at most max(1 + 4, 2 × 1) = 5 in the first 15 s.
        let (r, reason, _) = normalize(&mut h, t0, 1, 20, 1, 10, &b);
        assert_eq!((r, reason), (5, "ScaleUpLimit"));
        h.scaled(t0, 1, 5);
        // Within the same period nothing more may be added beyond the period's limit.
        let (r, _, _) = normalize(&mut h, t0 + secs(5), 5, 20, 1, 10, &b);
        assert_eq!(r, 5);
        // After the period: up to the maximum.
        let (r, reason, _) = normalize(&mut h, t0 + secs(20), 5, 20, 1, 10, &b);
        assert_eq!((r, reason), (10, "TooManyReplicas"));
        // A lower proposal within the down window keeps the highest recent one.
        let (r, reason, _) = normalize(&mut h, t0 + secs(30), 10, 2, 1, 10, &b);
        assert_eq!((r, reason), (10, "ScaleDownStabilized"));
        // Without a window it goes down at once (100 % per 15 s allows all of it).
        let quick = Behavior::of(&json!({"scaleDown": {"stabilizationWindowSeconds": 0}}));
        let (r, _, _) = normalize(&mut History::default(), t0, 10, 2, 1, 10, &quick);
        assert_eq!(r, 2);
        // Disabled: never down.
        let off = Behavior::of(&json!({"scaleDown": {"selectPolicy": "Disabled"}}));
        let (r, _, _) = normalize(&mut History::default(), t0, 10, 2, 1, 10, &off);
        assert_eq!(r, 10);
    }
}
