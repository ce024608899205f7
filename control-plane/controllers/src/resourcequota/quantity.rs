//! Resource quantities (`500m`, `1.5Gi`, `2e3`) as exact milli-units, and back.
//!
//! Milli-units are exact for every quantity quota counts in practice (cpu to 1m, bytes,
//! device counts); finer values (`1u`) round up to 1m, as upstream rounds usage up.

/// Errors of this module.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The text is not a quantity.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
}

/// Parses a quantity into milli-units (rounded up).
pub fn parse_milli(text: &str) -> Result<i128, Error> {
    let bad = || Error::Invalid(text.to_string());
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() {
        return Err(bad());
    }
    // (numerator multiplier, denominator) applied to the number in milli-units.
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        e if e.starts_with(['e', 'E']) => (1, e[1..].parse::<i32>().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    let negative = number.starts_with('-');
    let digits = number.trim_start_matches(['+', '-']);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let all: String = format!("{int}{frac}");
    let mantissa: i128 = if all.is_empty() {
        0
    } else {
        all.parse().map_err(|_| bad())?
    };
    // value = mantissa * 10^(exp10 - frac.len()) * mul, in milli-units: * 10^3.
    let scale = exp10 + 3 - frac.len() as i32;
    let scaled = mantissa.checked_mul(mul).ok_or_else(bad)?;
    let value = if scale >= 0 {
        scaled
            .checked_mul(10i128.checked_pow(scale as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?
    } else {
        let div = 10i128.checked_pow(scale.unsigned_abs()).ok_or_else(bad)?;
        (scaled + div - 1) / div
    };
    Ok(if negative { -value } else { value })
}

/// Formats milli-units: whole values in the largest binary suffix that divides them when
/// `binary`, else as a plain integer; fractions as `<n>m`.
pub fn format_milli(milli: i128, binary: bool) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let whole = milli / 1000;
    if binary && whole != 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i128 << shift;
            if whole % unit == 0 {
                return format!("{}{suffix}", whole / unit);
            }
        }
    }
    whole.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let cases = [
            ("1", 1000),
            ("500m", 500),
            ("0.5", 500),
            ("1.5Gi", 1_610_612_736_000),
            ("1Ki", 1_024_000),
            ("2k", 2_000_000),
            ("1e3", 1_000_000),
            ("100u", 1),
            (".5", 500),
            ("0", 0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_milli(text), Ok(want), "{text}");
        }
        for bad in ["", "abc", "1x", "Gi", "1.2.3"] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_milli(1500, false), "1500m");
        assert_eq!(format_milli(2000, false), "2");
        assert_eq!(format_milli(2 * 1024 * 1024 * 1000, true), "2Mi");
        assert_eq!(format_milli(1000 * 1000, true), "1000");
        assert_eq!(format_milli(0, true), "0");
    }
}
