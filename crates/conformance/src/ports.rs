//! Private services on free ports (issue 35). A free port is found by binding port 0 and
//! releasing it for the service, so another process may bind it in between: the service then
//! fails to start, or, worse, a test talks to someone else's listener. [`wait_listening`] tells
//! these apart by asking the kernel which process holds the listening socket (`/proc/net/tcp*`
//! and the child's `/proc/<pid>/fd`), so a caller can start again on a fresh port.

use std::time::{Duration, Instant};

/// A loopback port nobody listened on a moment ago (bound and released).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// How a service started on a port turned out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// The process listens on the port.
    Yes,
    /// Another process listens on the port (it was taken after it was picked).
    Taken,
    /// The process ended (for a daemon: typically "address already in use").
    Exited,
    /// Neither within the time given.
    TimedOut,
}

/// Waits until process `pid` listens on TCP `port` (any address), another process does, or
/// `pid` ends, polling every 10 ms for at most `within`.
#[must_use]
pub fn wait_listening(pid: u32, port: u16, within: Duration) -> Listening {
    let deadline = Instant::now() + within;
    loop {
        let inodes = listening_inodes(port);
        if !inodes.is_empty() {
            return if owns_any(pid, &inodes) { Listening::Yes } else { Listening::Taken };
        }
        if gone(pid) {
            return Listening::Exited;
        }
        if Instant::now() >= deadline {
            return Listening::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` holds a socket listening on TCP `port`.
#[must_use]
pub fn owns_listener(pid: u32, port: u16) -> bool {
    owns_any(pid, &listening_inodes(port))
}

/// The inodes of the sockets listening on TCP `port`, IPv4 and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let local_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "0A" && local_port == Some(port) {
                out.extend(inode.parse::<u64>().ok().filter(|i| *i != 0));
            }
        }
    }
    out
}

fn owns_any(pid: u32, inodes: &[u64]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok).filter_map(|e| std::fs::read_link(e.path()).ok()).any(|target| {
        let t = target.to_string_lossy();
        t.strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| inodes.contains(&i))
    })
}

/// Whether process `pid` has ended (gone, or a zombie not yet reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_told_apart_from_one_of_another_process() {
        let me = std::process::id();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert_eq!(wait_listening(me, port, Duration::from_secs(5)), Listening::Yes);
        assert!(owns_listener(me, port));
        // A process that does not hold the socket: pid 1.
        assert_eq!(wait_listening(1, port, Duration::from_secs(5)), Listening::Taken);
        drop(listener);
        assert!(!owns_listener(me, port));
    }

    #[test]
    fn an_ended_process_is_seen_as_such() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let port = free_port().expect("free port");
        let seen = wait_listening(pid, port, Duration::from_secs(5));
        let _ = child.wait();
        assert_eq!(seen, Listening::Exited);
    }
}
