//! The process's memory for `/metrics` (`process_resident_memory_bytes`, issue 23, item 10):
//! WebSocket load is connections and memory, which CPU-based autoscaling does not see.

/// Resident set size in bytes (`VmRSS` of `/proc/self/status`); [`None`] where unknown.
#[must_use]
pub fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

/// `VmRSS:   1234 kB` → bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut parts = line.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => Some(n.saturating_mul(1024)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        assert_eq!(parse_vm_rss("Name:\tskua\nVmRSS:\t   2048 kB\nThreads: 4\n"), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name:\tskua\n"), None);
        #[cfg(target_os = "linux")]
        assert!(resident_memory_bytes().is_some_and(|b| b > 0));
    }
}
