//! Open files: raising `RLIMIT_NOFILE` at start, reading it and counting open descriptors for
//! `/metrics` and the upgrade check (issue 23, item 2).
//!
//! Limits are `u64`, [`u64::MAX`] for "unlimited". On non-unix targets nothing is raised and
//! nothing is known ([`None`]).

/// The open-file limit before and after [`raise_soft_limit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (the most the soft limit may be raised to).
    pub hard: u64,
    /// Why the soft limit could not be raised, if it could not.
    pub error: Option<String>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; [`None`] where there is no such limit.
#[cfg(unix)]
#[must_use]
pub fn raise_soft_limit() -> Option<Raised> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let before = current.unwrap_or(u64::MAX);
    let hard = maximum.unwrap_or(u64::MAX);
    if before >= hard {
        return Some(Raised { before, soft: before, hard, error: None });
    }
    let error = setrlimit(Resource::Nofile, Rlimit { current: maximum, maximum }).err().map(|e| e.to_string());
    Some(Raised { before, soft: soft_limit().unwrap_or(before), hard, error })
}

/// Raises nothing: no `RLIMIT_NOFILE` here.
#[cfg(not(unix))]
#[must_use]
pub fn raise_soft_limit() -> Option<Raised> {
    None
}

/// The soft `RLIMIT_NOFILE` now ([`u64::MAX`] when unlimited).
#[cfg(unix)]
#[must_use]
pub fn soft_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit};
    Some(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}

/// No `RLIMIT_NOFILE` here.
#[cfg(not(unix))]
#[must_use]
pub fn soft_limit() -> Option<u64> {
    None
}

/// The descriptors this process has open now, counted in `/proc/self/fd` (Linux only; one
/// directory read, meant for a scrape, not for every request).
#[must_use]
pub fn open_count() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    // The listing includes the descriptor of the directory being read.
    Some((dir.count() as u64).saturating_sub(1))
}

/// Connection slots the open-file limit leaves room for: `soft - reserve`; [`None`] when the
/// limit is unknown or unlimited.
#[must_use]
pub fn budget(soft: Option<u64>, reserve: usize) -> Option<usize> {
    let soft = soft.filter(|&s| s != u64::MAX)?;
    Some(usize::try_from(soft.saturating_sub(reserve as u64)).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_the_soft_limit_less_the_reserve() {
        assert_eq!(budget(Some(1024), 256), Some(768));
        assert_eq!(budget(Some(100), 256), Some(0));
        assert_eq!(budget(Some(u64::MAX), 256), None);
        assert_eq!(budget(None, 256), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn open_count_counts_open_files() {
        let files: Vec<_> = (0..20).map(|_| std::fs::File::open("/proc/self/status").unwrap()).collect();
        let n = open_count().unwrap();
        // Other tests run in parallel threads: only a lower bound is certain (ours, and stdio).
        assert!(n >= 23, "{n} descriptors counted with 20 files open");
        drop(files);
    }

    #[cfg(unix)]
    #[test]
    fn raise_lifts_the_soft_limit_to_the_hard_limit() {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
        // Lowered by one below the hard limit (harmless to the tests running alongside), then raised.
        let lowered = match maximum {
            Some(hard) => hard - 1,
            None => current.unwrap_or(1 << 20).min(1 << 20),
        };
        setrlimit(Resource::Nofile, Rlimit { current: Some(lowered), maximum }).unwrap();
        let r = raise_soft_limit().unwrap();
        assert_eq!(r.before, lowered);
        assert_eq!(r.error, None);
        assert_eq!(r.hard, maximum.unwrap_or(u64::MAX));
        assert_eq!(r.soft, r.hard, "soft raised to hard");
        assert_eq!(soft_limit(), Some(r.hard));
        // Already at the hard limit: nothing to do.
        let again = raise_soft_limit().unwrap();
        assert_eq!((again.before, again.soft), (r.hard, r.hard));
    }
}
