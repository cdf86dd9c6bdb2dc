//! Skips that nobody can miss (STYLE.md §8): a test whose service or program is missing calls
//! [`skip`], which fails the test under `CI=true`, and otherwise passes it after saying why
//! twice: a line straight to the process's stderr (libtest captures `eprintln!` of passing
//! tests, not direct writes), and a line appended to the file named by `SKUA_TEST_SKIP_LOG`,
//! which `scripts/test.sh` sets and prints as the last lines of the test command.

use std::io::Write as _;

/// The variable naming the file every skip is appended to (unset: no file).
pub const SKIP_LOG_VAR: &str = "SKUA_TEST_SKIP_LOG";

/// Whether this is CI's run (`CI=true`), where a missing service fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Records that the running test skips, and why; the caller then returns without testing.
///
/// # Panics
/// Under `CI=true`: a missing service or program is a failure there.
pub fn skip(why: &str) {
    assert!(!in_ci(), "{why}, and CI=true: tests may not be skipped in CI");
    let line = format!("{}: {why}", test_name());
    let _ = writeln!(std::io::stderr(), "SKIPPED: {line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR).filter(|p| !p.is_empty()) {
        // One short write with O_APPEND: lines from parallel tests and binaries do not interleave.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = appended {
            let _ = writeln!(std::io::stderr(), "warning: cannot append to {SKIP_LOG_VAR}={}: {e}", path.display());
        }
    }
}

/// `<test binary> <test>`: the binary's name without cargo's hash suffix, and libtest's name for
/// the current thread, which is the test's path (tokio's test runtimes run the body on it).
fn test_name() -> String {
    let exe = std::env::current_exe().ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let binary = exe.map(|s| s.rsplit_once('-').map_or(s.clone(), |(name, _)| name.to_owned())).unwrap_or_default();
    let thread = std::thread::current();
    format!("{binary} {}", thread.name().unwrap_or("?"))
}
