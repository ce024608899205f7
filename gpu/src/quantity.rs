//! Resource quantities as the scheduler counts them: CPU in millicores, everything else in
//! whole units (bytes for memory). Parses the Kubernetes quantity forms pods use (`500m`, `2`,
//! `1.5`, `512Mi`, `1G`, `1e3`); rounds up, as the scheduler must never under-count a request.

use thiserror::Error;

/// A quantity that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct Error(pub String);

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn suffix_factor(suffix: &str) -> Option<f64> {
    Some(match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// The value of `q` as a float of base units.
fn value(q: &str) -> Result<f64> {
    let q = q.trim();
    let bad = || Error(q.to_string());
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (number, factor) = if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
        let e: i32 = exp.parse().map_err(|_| bad())?;
        (number, 10f64.powi(e))
    } else {
        (number, suffix_factor(suffix).ok_or_else(bad)?)
    };
    let n: f64 = number.parse().map_err(|_| bad())?;
    if !n.is_finite() || n < 0.0 {
        return Err(bad());
    }
    Ok(n * factor)
}

/// CPU in millicores, rounded up.
pub fn millis(q: &str) -> Result<i64> {
    to_i64(value(q)? * 1000.0, q)
}

/// Whole units (bytes, counts), rounded up.
pub fn units(q: &str) -> Result<i64> {
    to_i64(value(q)?, q)
}

fn to_i64(v: f64, q: &str) -> Result<i64> {
    let up = (v - 1e-9).ceil().max(0.0);
    if up > i64::MAX as f64 {
        return Err(Error(q.to_string()));
    }
    // In range and non-negative: the conversion is exact enough for scheduling.
    Ok(up as i64)
}

/// A resource amount in the scheduler's unit: millicores for `cpu`, units otherwise.
pub fn amount(resource: &str, q: &str) -> Result<i64> {
    if resource == "cpu" {
        millis(q)
    } else {
        units(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_pods_use() {
        assert_eq!(millis("500m"), Ok(500));
        assert_eq!(millis("2"), Ok(2000));
        assert_eq!(millis("1.5"), Ok(1500));
        assert_eq!(millis("0.0001"), Ok(1));
        assert_eq!(units("512Mi"), Ok(512 * 1024 * 1024));
        assert_eq!(units("1G"), Ok(1_000_000_000));
        assert_eq!(units("1e3"), Ok(1000));
        assert_eq!(units("8"), Ok(8));
        assert_eq!(amount("memory", "1Ki"), Ok(1024));
    }

    #[test]
    fn garbage_is_an_error() {
        for q in ["", "abc", "1Xi", "-1", "1e", "1.2.3"] {
            assert!(units(q).is_err(), "{q}");
        }
    }
}
