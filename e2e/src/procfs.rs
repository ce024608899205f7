//! A process's memory and CPU time from `/proc`, for the benchmarks.

/// `VmRSS` and its peak `VmHWM`, in KiB; None when the process is gone.
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// `VmRSS` and `VmHWM` in MiB (0 when the process is gone).
pub fn memory_mib(pid: u32) -> (f64, f64) {
    memory_kib(pid).map_or((0.0, 0.0), |(rss, hwm)| {
        (rss as f64 / 1024.0, hwm as f64 / 1024.0)
    })
}

/// User + system CPU seconds the process has used (clock ticks / USER_HZ = 100).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let pid = std::process::id();
        let (rss, hwm) = memory_kib(pid).expect("own /proc status");
        assert!(rss > 0 && hwm >= rss, "{rss} {hwm}");
        assert!(cpu_seconds(pid).is_some_and(|s| s >= 0.0));
        assert!(memory_kib(u32::MAX).is_none());
    }
}
