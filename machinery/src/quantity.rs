//! Resource quantities (`100m`, `1Gi`, `2`, `1.5`, `1e3`, `500Mi`), as upstream
//! `k8s.io/apimachinery/pkg/api/resource.Quantity`.
//!
//! A quantity is held exactly as a whole number of nano-units (`i128`), so comparisons are
//! exact; digits below one nano-unit round up (away from zero) as upstream does. Magnitudes
//! above 2^63-1 units are rejected rather than capped. `Display` prints upstream's canonical
//! form in the notation the quantity was written in (binary SI, decimal SI or exponent):
//! `1.5` → `1500m`, `1.5Gi` → `1536Mi`, `1000` → `1k`, `1e3` → `1e3`.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Why a string is not a quantity; messages as upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not have the shape `<number><suffix>`.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    FormatWrong,
    /// The numeric part is malformed (e.g. two dots).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not a known unit or exponent.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// The magnitude exceeds 2^63-1 units.
    #[error("quantity is too large")]
    TooLarge,
    /// A JSON value that is neither a string nor a number.
    #[error("quantity must be a string or a number")]
    NotAString,
}

/// The notation a quantity was written in; it decides how it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`.
    BinarySI,
    /// Powers of 1000: `n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`.
    DecimalSI,
    /// `e<n>` / `E<n>`.
    DecimalExponent,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// (2^63 - 1) units, in nano-units.
const MAX_NANOS: i128 = (i64::MAX as i128) * NANOS_PER_UNIT;

/// An exact resource quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl Quantity {
    /// Zero (decimal SI).
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// The largest quantity, 2^63-1 units (decimal SI).
    pub const MAX: Quantity = Quantity {
        nanos: MAX_NANOS,
        format: Format::DecimalSI,
    };

    /// A quantity of `nanos` nano-units printed in `format`.
    pub fn from_nanos(nanos: i128, format: Format) -> Result<Self, QuantityError> {
        if nanos.abs() > MAX_NANOS {
            return Err(QuantityError::TooLarge);
        }
        Ok(Quantity { nanos, format })
    }

    /// The value in nano-units (exact).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The value in milli-units, rounded up (away from zero) like upstream `MilliValue`.
    pub fn milli_value(&self) -> i128 {
        div_away_from_zero(self.nanos, 1_000_000)
    }

    /// The value in whole units, rounded up (away from zero) like upstream `Value`.
    pub fn value(&self) -> i128 {
        div_away_from_zero(self.nanos, NANOS_PER_UNIT)
    }

    /// The notation used when printing.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the quantity is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether the quantity is negative.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The sum, in this quantity's notation; `None` when out of range.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        Quantity::from_nanos(nanos, self.format).ok()
    }

    /// Parses a JSON value: quantities are strings, but plain numbers are accepted as upstream.
    pub fn from_json(v: &Value) -> Result<Self, QuantityError> {
        match v {
            Value::String(s) => s.parse(),
            Value::Number(n) => n.to_string().parse(),
            _ => Err(QuantityError::NotAString),
        }
    }
}

fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n < 0 {
        q - 1
    } else {
        q + 1
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

/// The multiplier a suffix stands for.
enum Scale {
    Pow10(i64),
    Pow2(u32),
}

fn parse_suffix(suffix: &str) -> Result<(Scale, Format), QuantityError> {
    // The shape upstream's regular expression allows: [eEinumkKMGTP]*[-+]?[0-9]*
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let (_, tail) = suffix.split_at(letters);
    let tail = tail.strip_prefix(['+', '-']).unwrap_or(tail);
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::FormatWrong);
    }
    let decimal = |e: i64| Ok((Scale::Pow10(e), Format::DecimalSI));
    let binary = |b: u32| Ok((Scale::Pow2(b), Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exp = suffix
                .strip_prefix(['e', 'E'])
                .filter(|rest| {
                    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                })
                .ok_or(QuantityError::Suffix)?;
            let exp: i64 = exp.parse().map_err(|_| QuantityError::TooLarge)?;
            Ok((Scale::Pow10(exp), Format::DecimalExponent))
        }
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, s.get(1..).unwrap_or_default()),
            Some(b'+') => (false, s.get(1..).unwrap_or_default()),
            _ => (false, s),
        };
        let number_len = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(number_len);
        if number.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => {
                if f.contains('.') {
                    return Err(QuantityError::Numeric);
                }
                (i, f)
            }
            None => (number, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(QuantityError::Numeric);
        }
        let (scale, format) = parse_suffix(suffix)?;

        // Significant digits into `mantissa`, value = mantissa * 10^exp10 (+ sticky remainder).
        let mut mantissa: u128 = 0;
        let mut exp10: i64 = 0;
        let mut sticky = false;
        for b in int_part.bytes() {
            let digit = u128::from(b - b'0');
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(digit))
                .ok_or(QuantityError::TooLarge)?;
        }
        for b in frac_part.bytes() {
            let digit = u128::from(b - b'0');
            match mantissa.checked_mul(10).and_then(|m| m.checked_add(digit)) {
                Some(m) if m < 10u128.pow(37) => {
                    mantissa = m;
                    exp10 -= 1;
                }
                _ => sticky |= digit != 0,
            }
        }
        match scale {
            Scale::Pow10(e) => exp10 = exp10.saturating_add(e),
            Scale::Pow2(bits) => {
                let factor = 1u128 << bits;
                loop {
                    if let Some(m) = mantissa.checked_mul(factor) {
                        mantissa = m;
                        break;
                    }
                    sticky |= !mantissa.is_multiple_of(10);
                    mantissa /= 10;
                    exp10 += 1;
                }
            }
        }
        let shift = exp10.saturating_add(9);
        let mut nanos: u128 = if shift >= 0 {
            if mantissa == 0 {
                0
            } else {
                let pow = u32::try_from(shift)
                    .ok()
                    .and_then(|s| 10u128.checked_pow(s))
                    .ok_or(QuantityError::TooLarge)?;
                mantissa.checked_mul(pow).ok_or(QuantityError::TooLarge)?
            }
        } else {
            let pow = u32::try_from(-shift)
                .ok()
                .and_then(|s| 10u128.checked_pow(s));
            match pow {
                Some(p) => {
                    sticky |= !mantissa.is_multiple_of(p);
                    mantissa / p
                }
                None => {
                    sticky |= mantissa != 0;
                    0
                }
            }
        };
        if sticky {
            nanos = nanos.checked_add(1).ok_or(QuantityError::TooLarge)?;
        }
        let nanos = i128::try_from(nanos).map_err(|_| QuantityError::TooLarge)?;
        Quantity::from_nanos(if negative { -nanos } else { nanos }, format)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.abs();
        if self.format == Format::BinarySI
            && magnitude >= 1024 * NANOS_PER_UNIT
            && magnitude % NANOS_PER_UNIT == 0
        {
            let mut units = magnitude / NANOS_PER_UNIT;
            let mut steps = 0;
            while units % 1024 == 0 && steps < 6 {
                units /= 1024;
                steps += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                .get(steps)
                .copied()
                .unwrap_or("");
            return write!(f, "{sign}{units}{suffix}");
        }
        let mut number = magnitude;
        let mut exp: i32 = -9;
        while number % 1000 == 0 && exp < 18 {
            number /= 1000;
            exp += 3;
        }
        if self.format == Format::DecimalExponent {
            if exp == 0 {
                return write!(f, "{sign}{number}");
            }
            return write!(f, "{sign}{number}e{exp}");
        }
        let suffix = match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        };
        write!(f, "{sign}{number}{suffix}")
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(deserializer)?;
        Quantity::from_json(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_values_exactly() {
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("2").milli_value(), 2000);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("500Mi").value(), 500 << 20);
        assert_eq!(q("-1.5k").value(), -1500);
        assert_eq!(q("+3").value(), 3);
        assert_eq!(q(".5").milli_value(), 500);
        assert_eq!(q("5.").value(), 5);
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
        assert_eq!(q("1e-3").milli_value(), 1);
        assert_eq!(q("0.1Ki").milli_value(), 102_400);
        assert_eq!(q("100n").nanos(), 100);
        assert_eq!(q("1u").nanos(), 1000);
    }

    #[test]
    fn rounds_up_below_nano() {
        assert_eq!(q("0.1n").nanos(), 1);
        assert_eq!(q("-0.1n").nanos(), -1);
        assert_eq!(q("1e-30").nanos(), 1);
        assert_eq!(
            q("0.0000000000000000000000000000000000000000001").nanos(),
            1
        );
        assert_eq!(q("0.5m").milli_value(), 1);
        assert_eq!(q("1500m").value(), 2);
    }

    #[test]
    fn canonical_form() {
        let cases = [
            ("1.5", "1500m"),
            ("1.5Gi", "1536Mi"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000", "1k"),
            ("1e3", "1e3"),
            ("1000m", "1"),
            ("0.5Ki", "512"),
            ("1025Ki", "1025Ki"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-100m", "-100m"),
            ("100n", "100n"),
            ("1.5e3", "1500"),
            ("1500e-3", "1500e-3"),
            ("1e-3", "1e-3"),
            ("2E", "2E"),
            ("1.1Ki", "1126400m"),
        ];
        for (input, want) in cases {
            assert_eq!(q(input).to_string(), want, "{input}");
        }
        assert_eq!(q("1.5e3").format(), Format::DecimalExponent);
    }

    #[test]
    fn compares_across_notations() {
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1k"), q("1e3"));
        assert!(q("100m") < q("1"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("-1") < q("0"));
        assert_eq!(q("1").checked_add(&q("500m")), Some(q("1.5")));
    }

    #[test]
    fn rejects_malformed() {
        use QuantityError::*;
        let cases = [
            ("", FormatWrong),
            ("abc", FormatWrong),
            ("-", FormatWrong),
            ("1 Gi", FormatWrong),
            ("1Xi", FormatWrong),
            ("1.2.3", Numeric),
            (".", Numeric),
            ("1kk", Suffix),
            ("1e", Suffix),
            ("1Gb", FormatWrong),
            ("1e100", TooLarge),
            ("10E", TooLarge),
            ("99999999999999999999999999999999999999999", TooLarge),
            ("1e99999999999999999999", TooLarge),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<Quantity>(), Err(want), "{input}");
        }
        assert!(q("9E").value() > 0);
    }

    #[test]
    fn json_round_trip() {
        let v: Quantity =
            serde_json::from_value(serde_json::json!("1.5Gi")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(v).ok(),
            Some(serde_json::json!("1536Mi"))
        );
        let n: Quantity =
            serde_json::from_value(serde_json::json!(2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n, q("2"));
        assert!(serde_json::from_value::<Quantity>(serde_json::json!(true)).is_err());
    }
}
