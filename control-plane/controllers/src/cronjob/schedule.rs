//! Cron schedules as CronJobs accept them: five fields (minute, hour, day of month, month, day
//! of week) with `*`, `?`, lists, ranges, steps and month / weekday names; the macros
//! `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`; and a
//! `CRON_TZ=<zone>` or `TZ=<zone>` prefix.
//!
//! As upstream (robfig/cron): when both day of month and day of week are restricted, a day
//! matching either runs; a local time skipped by a DST change does not run, a repeated one
//! runs once.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Errors parsing a schedule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not five fields (or an unknown macro).
    #[error("expected exactly 5 fields, found {0}: {1:?}")]
    FieldCount(usize, String),
    /// A field value that does not parse or is out of range.
    #[error("invalid {field} field {value:?}")]
    Field {
        /// Which field.
        field: &'static str,
        /// The text.
        value: String,
    },
    /// An unknown time zone.
    #[error("unknown time zone {0:?}")]
    TimeZone(String),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day of month was `*` / `?`.
    any_day: bool,
    /// Day of week was `*` / `?`.
    any_weekday: bool,
    /// The zone from a `CRON_TZ=` prefix, if any.
    pub zone: Option<TimeZone>,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn name_value(s: &str, names: &[&str], base: u32) -> Option<u32> {
    let lower = s.to_ascii_lowercase();
    names
        .iter()
        .position(|n| *n == lower)
        .map(|i| i as u32 + base)
        .or_else(|| s.parse().ok())
}

/// Parses one field into a bit set of `min..=max`.
fn field(
    text: &str,
    field: &'static str,
    min: u32,
    max: u32,
    names: &[&str],
    base: u32,
) -> Result<u64> {
    let bad = || Error::Field {
        field,
        value: text.to_string(),
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| bad())?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(bad());
        }
        let (lo, hi) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                name_value(a, names, base).ok_or_else(bad)?,
                name_value(b, names, base).ok_or_else(bad)?,
            )
        } else {
            let v = name_value(range, names, base).ok_or_else(bad)?;
            // `5/15` means from 5 to the end.
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(bad());
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

impl Schedule {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Schedule> {
        let mut text = text.trim();
        let mut zone = None;
        if let Some(rest) = text
            .strip_prefix("CRON_TZ=")
            .or_else(|| text.strip_prefix("TZ="))
        {
            let (name, schedule) = rest
                .split_once(char::is_whitespace)
                .ok_or_else(|| Error::FieldCount(0, text.to_string()))?;
            zone = Some(zone_named(name)?);
            text = schedule.trim();
        }
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(Error::FieldCount(fields.len(), text.to_string()));
        }
        let mut weekdays = field(fields[4], "day-of-week", 0, 7, &WEEKDAYS, 0)?;
        // 7 is Sunday too.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let star = |f: &str| f == "*" || f == "?" || f.starts_with("*/") || f.starts_with("?/");
        Ok(Schedule {
            minutes: field(fields[0], "minute", 0, 59, &[], 0)?,
            hours: field(fields[1], "hour", 0, 23, &[], 0)?,
            days: field(fields[2], "day-of-month", 1, 31, &[], 0)?,
            months: field(fields[3], "month", 1, 12, &MONTHS, 1)?,
            weekdays,
            any_day: star(fields[2]),
            any_weekday: star(fields[4]),
            zone,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.any_day || self.any_weekday {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first time strictly after `after` that the schedule fires, in `tz` (the prefix's
    /// zone wins). None if it never fires within five years (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let tz = self.zone.as_ref().unwrap_or(tz);
        let start = after.to_zoned(tz.clone());
        let mut day = start.date();
        for _ in 0..(366 * 5) {
            if self.day_matches(day) {
                for h in (0..24).filter(|h| self.hours & (1 << h) != 0) {
                    for m in (0..60).filter(|m| self.minutes & (1 << m) != 0) {
                        let local = DateTime::from_parts(
                            day,
                            jiff::civil::Time::constant(h as i8, m as i8, 0, 0),
                        );
                        let amb = tz.to_ambiguous_timestamp(local);
                        // A time in a gap does not exist: skip it; a repeated one runs once.
                        if amb.is_ambiguous()
                            && matches!(amb.offset(), jiff::tz::AmbiguousOffset::Gap { .. })
                        {
                            continue;
                        }
                        let Ok(at) = amb.earlier() else {
                            continue;
                        };
                        if at > after {
                            return Some(at);
                        }
                    }
                }
            }
            day = day.checked_add(1.day()).ok()?;
        }
        None
    }
}

/// The zone called `name` (IANA name from the system's database, or `UTC`).
pub fn zone_named(name: &str) -> Result<TimeZone> {
    if name == "UTC" || name == "Etc/UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| Error::TimeZone(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn next_times() {
        let cases = [
            (
                "*/15 * * * *",
                "2024-01-01T00:07:00Z",
                "2024-01-01T00:15:00Z",
            ),
            ("* * * * *", "2024-01-01T00:07:00Z", "2024-01-01T00:08:00Z"),
            ("@hourly", "2024-01-01T00:00:00Z", "2024-01-01T01:00:00Z"),
            ("@daily", "2024-01-01T10:00:00Z", "2024-01-02T00:00:00Z"),
            ("@weekly", "2024-01-01T10:00:00Z", "2024-01-07T00:00:00Z"),
            ("@monthly", "2024-01-15T00:00:00Z", "2024-02-01T00:00:00Z"),
            ("@yearly", "2024-01-15T00:00:00Z", "2025-01-01T00:00:00Z"),
            (
                "30 2 * * mon-fri",
                "2024-01-06T00:00:00Z",
                "2024-01-08T02:30:00Z",
            ),
            (
                "0 0 29 feb *",
                "2024-03-01T00:00:00Z",
                "2028-02-29T00:00:00Z",
            ),
            // Day of month OR day of week when both are restricted.
            (
                "0 0 15 * sun",
                "2024-01-01T00:00:00Z",
                "2024-01-07T00:00:00Z",
            ),
            ("0 9 * * 7", "2024-01-01T00:00:00Z", "2024-01-07T09:00:00Z"),
            (
                "5/20 1 * * *",
                "2024-01-01T01:06:00Z",
                "2024-01-01T01:25:00Z",
            ),
            (
                "0 12 * JAN,Mar *",
                "2024-01-31T13:00:00Z",
                "2024-03-01T12:00:00Z",
            ),
            (
                "CRON_TZ=UTC 0 0 * * *",
                "2024-01-01T10:00:00Z",
                "2024-01-02T00:00:00Z",
            ),
        ];
        for (sched, after, want) in cases {
            let s = Schedule::parse(sched).expect(sched);
            assert_eq!(
                s.next_after(ts(after), &TimeZone::UTC),
                Some(ts(want)),
                "{sched} after {after}"
            );
        }
        let never = Schedule::parse("0 0 30 2 *").expect("parses");
        assert_eq!(
            never.next_after(ts("2024-01-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
    }

    #[test]
    fn time_zones() {
        let Ok(tz) = zone_named("Europe/Berlin") else {
            return; // No system time zone database here.
        };
        let s = Schedule::parse("0 9 * * *").expect("parses");
        assert_eq!(
            s.next_after(ts("2024-01-01T00:00:00Z"), &tz),
            Some(ts("2024-01-01T08:00:00Z"))
        );
        let prefixed = Schedule::parse("CRON_TZ=Europe/Berlin 0 9 * * *").expect("parses");
        assert_eq!(
            prefixed.next_after(ts("2024-07-01T00:00:00Z"), &TimeZone::UTC),
            Some(ts("2024-07-01T07:00:00Z"))
        );
        // 02:30 does not exist on 2024-03-31 in Berlin.
        let gap = Schedule::parse("30 2 * * *").expect("parses");
        assert_eq!(
            gap.next_after(ts("2024-03-30T12:00:00Z"), &tz),
            Some(ts("2024-04-01T00:30:00Z"))
        );
    }

    #[test]
    fn bad_schedules() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 8",
            "*/0 * * * *",
            "5-1 * * * *",
            "@every 5m",
            "CRON_TZ=Nowhere/Land * * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
