//! CPU time and resident memory of a process, from `/proc` (Linux only).

use std::io;

/// Microseconds per clock tick in `/proc/<pid>/stat`. The kernel reports `utime`/`stime` in
/// `USER_HZ` units, which is 100 on every Linux architecture we run on (it is part of the ABI
/// and independent of the kernel's internal `HZ`).
pub const TICK_US: u64 = 10_000;

/// User plus system CPU time of `pid` in microseconds (all threads, from `/proc/<pid>/stat`).
///
/// # Errors
/// The process does not exist or the file does not parse.
pub fn cpu_us(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_cpu_ticks(&stat).map(|t| t * TICK_US).ok_or_else(|| bad("stat"))
}

/// `utime + stime` in ticks from the text of a `/proc/<pid>/stat` file.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    // After ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15)
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Resident set size of `pid` in KiB (`VmRSS` in `/proc/<pid>/status`).
///
/// # Errors
/// The process does not exist or has no `VmRSS` line.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| bad("status"))
}

/// Whole-machine CPU from the first line of `/proc/stat`, in microseconds summed over all
/// cores: (busy, of which softirq). Busy is everything but idle and iowait. Softirq time (most
/// of the loopback TCP receive path) is charged to no process, so per-process figures leave it
/// out; this shows how much there was.
///
/// # Errors
/// The file is missing or does not parse.
pub fn machine_cpu_us() -> io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().ok_or_else(|| bad("../stat"))?;
    let v: Vec<u64> = line.split_ascii_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal …
    if v.len() < 8 {
        return Err(bad("../stat"));
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    Ok((busy * TICK_US, v[6] * TICK_US))
}

/// Whether `pid` is a live process.
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("unexpected /proc/<pid>/{what} format"))
}

/// CPU of one process sampled at two instants.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuWindow {
    /// CPU microseconds at the start.
    pub start_us: u64,
    /// CPU microseconds at the end.
    pub end_us: u64,
}

impl CpuWindow {
    /// CPU microseconds spent between the samples.
    pub fn used_us(&self) -> u64 {
        self.end_us.saturating_sub(self.start_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_in_the_name_parses() {
        let s = "4242 (tokio runtime) S 1 4242 4242 0 -1 4194560 500 0 0 0 1234 567 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_stat_cpu_ticks(s), Some(1234 + 567));
    }

    #[test]
    fn this_process_has_cpu_and_rss() {
        let me = std::process::id();
        assert!(rss_kib(me).unwrap() > 0);
        assert!(cpu_us(me).is_ok());
        assert!(alive(me));
    }
}
