//! Rolling-update arithmetic, as upstream's deployment controller does it: resolving
//! maxSurge / maxUnavailable, how far the new ReplicaSet may grow, and how far the old ones
//! may shrink.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Errors of the rolling-update arithmetic.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// maxSurge / maxUnavailable is neither an integer nor a percentage.
    #[error("invalid value {0:?}: must be an integer or a percentage")]
    InvalidValue(String),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Default maxSurge and maxUnavailable.
pub const DEFAULT: &str = "25%";

fn scaled(value: Option<&IntOrString>, total: i32, round_up: bool) -> Result<i32> {
    let v = match value {
        Some(IntOrString::Int(i)) => return Ok(*i),
        Some(IntOrString::String(s)) => s.as_str(),
        None => DEFAULT,
    };
    let pct = v
        .strip_suffix('%')
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| *p >= 0)
        .ok_or_else(|| Error::InvalidValue(v.to_string()))?;
    let num = pct * i64::from(total);
    let out = if round_up {
        (num + 99) / 100
    } else {
        num / 100
    };
    Ok(i32::try_from(out).unwrap_or(i32::MAX))
}

/// (maxSurge, maxUnavailable) for `replicas`: percentages of replicas, surge rounded up and
/// unavailability down; both zero would stall, so unavailability becomes 1.
pub fn resolve(
    replicas: i32,
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
) -> Result<(i32, i32)> {
    let surge = scaled(max_surge, replicas, true)?.max(0);
    let mut unavailable = scaled(max_unavailable, replicas, false)?.max(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// The new ReplicaSet's replicas: grown by what maxSurge leaves, never past `replicas`.
/// `total` is the sum of `spec.replicas` over all ReplicaSets.
pub fn new_replicas(replicas: i32, max_surge: i32, new_current: i32, total: i32) -> i32 {
    let max_total = replicas + max_surge;
    if total >= max_total {
        return new_current;
    }
    let up = (max_total - total).min(replicas - new_current).max(0);
    new_current + up
}

/// One old ReplicaSet: `spec.replicas` and `status.availableReplicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Old {
    /// spec.replicas.
    pub spec: i32,
    /// status.availableReplicas.
    pub available: i32,
}

/// The new `spec.replicas` of each old ReplicaSet (given oldest first): first unhealthy
/// replicas go, as far as the budget allows, then available ones while more than
/// `replicas - maxUnavailable` stay available.
pub fn scale_down_old(
    replicas: i32,
    max_unavailable: i32,
    new_spec: i32,
    new_available: i32,
    olds: &[Old],
) -> Vec<i32> {
    let mut targets: Vec<i32> = olds.iter().map(|o| o.spec).collect();
    let old_total: i32 = targets.iter().sum();
    if old_total == 0 {
        return targets;
    }
    let min_available = replicas - max_unavailable;
    let new_unavailable = (new_spec - new_available).max(0);
    let budget = new_spec + old_total - min_available - new_unavailable;
    if budget <= 0 {
        return targets;
    }
    let mut cleaned = 0;
    for (t, o) in targets.iter_mut().zip(olds) {
        if cleaned >= budget {
            break;
        }
        let unhealthy = (o.spec - o.available).max(0);
        let down = unhealthy.min(budget - cleaned);
        *t -= down;
        cleaned += down;
    }
    let available: i32 = new_available
        + olds
            .iter()
            .zip(&targets)
            .map(|(o, t)| o.available.min(*t))
            .sum::<i32>();
    if available <= min_available {
        return targets;
    }
    let mut to_scale = available - min_available;
    for t in targets.iter_mut() {
        if to_scale == 0 {
            break;
        }
        let down = (*t).min(to_scale);
        *t -= down;
        to_scale -= down;
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn resolves_fenceposts() {
        let cases = [
            (10, None, None, Ok((3, 2))),
            (3, None, None, Ok((1, 0))),
            (4, Some(s("50%")), Some(s("50%")), Ok((2, 2))),
            (
                5,
                Some(IntOrString::Int(0)),
                Some(IntOrString::Int(0)),
                Ok((0, 1)),
            ),
            (
                5,
                Some(IntOrString::Int(2)),
                Some(IntOrString::Int(1)),
                Ok((2, 1)),
            ),
            (1, Some(s("0%")), Some(s("10%")), Ok((0, 1))),
            (
                3,
                Some(s("abc")),
                None,
                Err(Error::InvalidValue("abc".into())),
            ),
            (
                3,
                None,
                Some(s("-5%")),
                Err(Error::InvalidValue("-5%".into())),
            ),
        ];
        for (i, (r, surge, unav, want)) in cases.into_iter().enumerate() {
            assert_eq!(resolve(r, surge.as_ref(), unav.as_ref()), want, "case {i}");
        }
    }

    #[test]
    fn new_replica_set_growth() {
        // (replicas, surge, new, total) → new
        let cases = [
            (3, 1, 0, 3, 1),
            (3, 1, 1, 4, 1),
            (3, 1, 1, 3, 2),
            (3, 1, 3, 3, 3),
            (10, 3, 0, 10, 3),
            (3, 0, 0, 2, 1),
            (5, 5, 0, 5, 5),
        ];
        for (i, (r, surge, new, total, want)) in cases.into_iter().enumerate() {
            assert_eq!(new_replicas(r, surge, new, total), want, "case {i}");
        }
    }

    #[test]
    fn old_replica_sets_shrink_within_max_unavailable() {
        let o = |spec, available| Old { spec, available };
        // (replicas, maxUnavailable, new spec, new available, olds) → targets
        type Case = (i32, i32, i32, i32, Vec<Old>, Vec<i32>);
        let cases: Vec<Case> = vec![
            // surge 1, unavailable 0: the new pod is not available yet → nothing goes.
            (3, 0, 1, 0, vec![o(3, 3)], vec![3]),
            // it became available → one old pod goes.
            (3, 0, 1, 1, vec![o(3, 3)], vec![2]),
            // unavailable 1 with nothing new available: one may go at once.
            (3, 1, 0, 0, vec![o(3, 3)], vec![2]),
            // unhealthy old pods go first, oldest ReplicaSet first.
            (4, 0, 2, 2, vec![o(2, 0), o(2, 2)], vec![0, 2]),
            (4, 1, 1, 0, vec![o(2, 1), o(2, 2)], vec![1, 2]),
            // nothing old left.
            (3, 1, 3, 3, vec![o(0, 0)], vec![0]),
        ];
        for (i, (r, mu, ns, na, olds, want)) in cases.into_iter().enumerate() {
            assert_eq!(scale_down_old(r, mu, ns, na, &olds), want, "case {i}");
        }
    }
}
