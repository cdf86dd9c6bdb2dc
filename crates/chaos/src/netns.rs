//! Network namespaces for partitions (docs/reliability.md, "Partitions").
//!
//! Each node runs in a namespace of its own (`skua-chaos-<pid>-<i>`), joined to the host by a
//! veth pair whose host end is a port of a bridge (`skc<pid>`). The bridge holds the host's
//! addresses in a private /24 chosen free for the run: `.1` the harness (trigger receiver),
//! `.2` Mosquitto, `.3` Redis, `.4` Postgres; node `i` is `.(11 + i)`. Only `ip` (iproute2) is
//! needed, no packet filter: each namespace also has a veth pair `bh0`/`bh1` whose `bh1` end
//! stays down, so what is routed to `bh0` is dropped without an error. A partition from a
//! service is a host route for the service's address through `bh0` (with a permanent neighbour
//! entry, so no ARP fails and nothing is reported to the sender), and strict reverse-path
//! filtering drops the service's packets arriving on `eth0` while that route exists: both
//! directions go silent, established connections hang, new connects time out. Healing deletes
//! the route.
//!
//! Everything is named with the harness's pid; [`Netns`] removes its namespaces and bridge when
//! dropped, and [`remove_stale`] removes those of runs whose process is gone (a SIGKILLed run).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Namespaces are named `<NS_PREFIX><pid>-<node>`.
pub const NS_PREFIX: &str = "skua-chaos-";
/// The bridge is `<LINK_PREFIX><pid>`, node `i`'s host-side veth `<LINK_PREFIX><pid>n<i>`.
pub const LINK_PREFIX: &str = "skc";
/// The process name a live run has (`/proc/<pid>/comm`).
const PROCESS_NAME: &str = "skua-chaos";
/// A MAC address no interface has: the permanent neighbour entry of a partitioned address.
const NOWHERE_MAC: &str = "02:00:00:00:00:01";

/// The `ip` program (iproute2).
pub fn ip_program() -> PathBuf {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("ip"))
}

/// Runs `ip ARGS`; an error with its stderr when it fails.
fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new(ip_program())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes a sysctl inside namespace `ns`.
fn ns_sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    ip(&["netns", "exec", ns, "sh", "-c", &format!("echo {value} > {path}")]).map(drop)
}

/// Whether `pid` is a live `skua-chaos` process.
fn run_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == PROCESS_NAME)
}

/// Names of the namespaces `ip netns list` shows.
fn namespaces() -> Vec<String> {
    ip(&["netns", "list"])
        .map(|s| s.lines().filter_map(|l| l.split_whitespace().next().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Names of the host's links.
fn links() -> Vec<String> {
    ip(&["-o", "link", "show"])
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split(": ").nth(1))
                .map(|n| n.split('@').next().unwrap_or(n).to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The pid in a namespace name `skua-chaos-<pid>-<i>`.
fn ns_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let (pid, node) = rest.split_once('-')?;
    node.parse::<usize>().ok()?;
    pid.parse().ok()
}

/// The pid in a link name `skc<pid>` or `skc<pid>n<i>`.
fn link_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(LINK_PREFIX)?;
    let pid = rest.split_once('n').map_or(rest, |(p, node)| if node.parse::<usize>().is_ok() { p } else { "" });
    pid.parse().ok()
}

/// Removes the namespaces and links of `pid`'s run.
fn remove_run(pid: u32) {
    for ns in namespaces().into_iter().filter(|n| ns_pid(n) == Some(pid)) {
        let _ = ip(&["netns", "delete", &ns]);
    }
    for link in links().into_iter().filter(|l| link_pid(l) == Some(pid)) {
        let _ = ip(&["link", "delete", &link]);
    }
}

/// Removes the namespaces, bridges and veths of earlier runs whose process is gone; returns
/// how many runs it cleaned up.
pub fn remove_stale() -> usize {
    let mut dead: Vec<u32> = namespaces()
        .iter()
        .filter_map(|n| ns_pid(n))
        .chain(links().iter().filter_map(|l| link_pid(l)))
        .filter(|pid| !run_alive(*pid))
        .collect();
    dead.sort_unstable();
    dead.dedup();
    for pid in &dead {
        remove_run(*pid);
    }
    dead.len()
}

/// Parses `a.b.c.d` or `a.b.c.d/len`.
fn prefix(s: &str) -> Option<(u32, u32)> {
    let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len.parse().ok().filter(|l| *l <= 32)?))
}

fn overlaps((a, la): (u32, u32), (b, lb): (u32, u32)) -> bool {
    let len = la.min(lb);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a & mask == b & mask
}

/// A /24 in 10.100.0.0–10.199.255.0 that no address or route of the host touches, starting
/// from one the pid picks (concurrent runs start apart).
fn free_subnet(pid: u32) -> Result<[u8; 3]> {
    let mut used: Vec<(u32, u32)> = Vec::new();
    for line in ip(&["-4", "-o", "addr", "show"])?.lines() {
        let mut words = line.split_whitespace();
        while let Some(w) = words.next() {
            if w == "inet"
                && let Some(p) = words.next().and_then(prefix)
            {
                used.push(p);
            }
        }
    }
    for line in ip(&["-4", "route", "show", "table", "all"])?.lines() {
        // `PREFIX …` or `TYPE PREFIX …` (local, broadcast, unreachable, blackhole, …).
        if let Some(p) = line.split_whitespace().take(2).find_map(prefix) {
            used.push(p);
        }
    }
    const SLOTS: u32 = 100 * 256;
    let start = pid % SLOTS;
    (0..SLOTS)
        .map(|k| (start + k) % SLOTS)
        .map(|slot| [10, u8::try_from(100 + slot / 256).unwrap_or(199), u8::try_from(slot % 256).unwrap_or(0)])
        .find(|s| {
            let net = (u32::from(Ipv4Addr::new(s[0], s[1], s[2], 0)), 24);
            !used.iter().any(|u| overlaps(*u, net))
        })
        .context("no free /24 in 10.100.0.0/14-10.199.255.0/24")
}

/// The run's namespaces, veths and bridge; removed when dropped.
#[derive(Debug)]
pub struct Netns {
    pid: u32,
    subnet: [u8; 3],
    nodes: usize,
}

impl Netns {
    /// Creates the bridge with the host's addresses and one namespace per node. Fails (after
    /// removing whatever it made) where the machine does not allow it: not root, no `ip`, no
    /// namespace or veth support.
    pub fn create(nodes: usize) -> Result<Self> {
        let pid = std::process::id();
        let subnet = free_subnet(pid)?;
        let net = Self { pid, subnet, nodes };
        net.build().inspect_err(|_| remove_run(pid))?;
        Ok(net)
    }

    fn build(&self) -> Result<()> {
        let bridge = self.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        for host in [Self::HARNESS, Self::MOSQUITTO, Self::REDIS, Self::POSTGRES] {
            ip(&["addr", "add", &format!("{}/24", self.addr(host)), "dev", &bridge])?;
        }
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..self.nodes {
            let ns = self.ns(i);
            let host_end = format!("{LINK_PREFIX}{}n{i}", self.pid);
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["link", "set", &host_end, "master", &bridge])?;
            ip(&["link", "set", &host_end, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.node_addr(i)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            // The drain: bh0 up, its peer bh1 down, so bh0 has no carrier and drops silently.
            ip(&["-n", &ns, "link", "add", "bh0", "type", "veth", "peer", "name", "bh1"])?;
            ip(&["-n", &ns, "link", "set", "bh0", "up"])?;
            for host in [Self::MOSQUITTO, Self::REDIS, Self::POSTGRES] {
                let addr = self.addr(host).to_string();
                ip(&["-n", &ns, "neigh", "replace", &addr, "lladdr", NOWHERE_MAC, "dev", "bh0", "nud", "permanent"])?;
            }
            for key in ["net.ipv4.conf.all.rp_filter", "net.ipv4.conf.eth0.rp_filter"] {
                ns_sysctl(&ns, key, "1")?;
            }
        }
        Ok(())
    }

    /// Last octet of the harness's host address (the trigger receiver).
    pub const HARNESS: u8 = 1;
    /// Last octet of Mosquitto's host address.
    pub const MOSQUITTO: u8 = 2;
    /// Last octet of Redis' host address.
    pub const REDIS: u8 = 3;
    /// Last octet of Postgres' host address.
    pub const POSTGRES: u8 = 4;

    /// `10.x.y.<last>`.
    pub fn addr(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }

    /// Node `i`'s address in its namespace.
    pub fn node_addr(&self, i: usize) -> Ipv4Addr {
        self.addr(u8::try_from(11 + i).unwrap_or(u8::MAX))
    }

    /// How many node namespaces it has.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `i`'s namespace.
    pub fn ns(&self, i: usize) -> String {
        format!("{NS_PREFIX}{}-{i}", self.pid)
    }

    fn bridge(&self) -> String {
        format!("{LINK_PREFIX}{}", self.pid)
    }

    /// Cuts node `i` from the host address `to` (both directions, silently).
    pub fn partition(&self, i: usize, to: Ipv4Addr) -> Result<()> {
        ip(&["-n", &self.ns(i), "route", "replace", &format!("{to}/32"), "dev", "bh0"]).map(drop)
    }

    /// Undoes [`Self::partition`].
    pub fn heal(&self, i: usize, to: Ipv4Addr) -> Result<()> {
        ip(&["-n", &self.ns(i), "route", "delete", &format!("{to}/32"), "dev", "bh0"]).map(drop)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        remove_run(self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_to_their_pid() {
        assert_eq!(ns_pid("skua-chaos-1234-0"), Some(1234));
        assert_eq!(ns_pid("skua-chaos-1234"), None);
        assert_eq!(ns_pid("other-1234-0"), None);
        assert_eq!(link_pid("skc1234"), Some(1234));
        assert_eq!(link_pid("skc1234n2"), Some(1234));
        assert_eq!(link_pid("skc1234nx"), None);
        assert_eq!(link_pid("eth0"), None);
    }

    #[test]
    fn prefixes_overlap_on_their_shorter_length() {
        let p = |s| prefix(s).expect("prefix");
        assert!(overlaps(p("10.100.3.0/24"), p("10.100.3.17")));
        assert!(overlaps(p("10.0.0.0/8"), p("10.100.3.0/24")));
        assert!(!overlaps(p("10.100.3.0/24"), p("10.100.4.0/24")));
        assert!(overlaps(p("0.0.0.0/0"), p("10.100.4.0/24")));
        assert_eq!(prefix("default"), None);
    }
}
