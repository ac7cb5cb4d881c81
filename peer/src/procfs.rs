//! Reading a local server's memory, CPU time and file descriptors from
//! Linux's `/proc`, and finding which process listens on a port.
//!
//! Finding the server: `/proc/net/tcp` and `/proc/net/tcp6` list every
//! socket of this network namespace with its state and inode; the process
//! whose `/proc/PID/fd/*` links to `socket:[INODE]` of the listening socket
//! owns it. A server inside a container has its own namespace, so for
//! `docker compose` this finds the port-forwarding proxy instead; the
//! callers recognise it by name and report no numbers rather than wrong ones.
//!
//! The parsers take text so they are unit-tested on captured samples.

use std::{
    fs,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
};

/// Clock ticks per second in `/proc/PID/stat`'s utime and stime. Linux fixes
/// this "USER_HZ" at 100 for user space on every mainstream architecture,
/// whatever the kernel's internal HZ; reading it via `sysconf` would need
/// `unsafe`, which this workspace forbids.
pub const USER_HZ: u64 = 100;

/// Socket state "listen" in `/proc/net/tcp` (`TCP_LISTEN` = 10).
const TCP_LISTEN: &str = "0A";

/// Processes that own a published container port on the host: numbers read
/// from them describe the proxy, not the server.
pub const PORT_PROXIES: &[&str] = &[
    "docker-proxy",
    "rootlessport",
    "rootlesskit",
    "slirp4netns",
    "pasta",
    "conmon",
];

/// One `/proc/net/tcp{,6}` address, `0100007F:23DC` or 32 hex digits and a port.
fn parse_proc_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // The kernel prints each 32-bit word of the address in host byte order.
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_ne_bytes(),
        )),
        32 => {
            let mut octets = [0u8; 16];
            for (i, word) in octets.chunks_exact_mut(4).enumerate() {
                let hex = ip.get(i * 8..i * 8 + 8)?;
                word.copy_from_slice(&u32::from_str_radix(hex, 16).ok()?.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether a socket listening on `local` accepts connections to `target`.
fn listener_serves(local: SocketAddr, target: SocketAddr) -> bool {
    if local.port() != target.port() {
        return false;
    }
    let target_ip = target.ip();
    match local.ip() {
        ip if ip.is_unspecified() => true,
        ip if ip == target_ip => true,
        // A dual-stack listener shows IPv4 peers as ::ffff:a.b.c.d.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4) == Some(target_ip),
        IpAddr::V4(_) => false,
    }
}

/// Inodes of the listening sockets in one `/proc/net/tcp{,6}` table that
/// accept connections to `target`.
pub fn listening_inodes(table: &str, target: SocketAddr) -> Vec<u64> {
    table
        .lines()
        .skip(1) // the column titles
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *state != TCP_LISTEN {
                return None;
            }
            listener_serves(parse_proc_addr(local)?, target)
                .then(|| inode.parse().ok())
                .flatten()
        })
        .collect()
}

/// The process that owns the socket listening for `target`, if it runs on
/// this machine in this network namespace and we may read its `/proc`.
pub fn listening_pid(target: SocketAddr) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, target));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let me = std::process::id();
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Processes come and go, and some are not ours to read: skip those.
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(link) = fs::read_link(fd.path())
                && wanted.iter().any(|w| Path::new(w) == link)
            {
                return Some(pid);
            }
        }
    }
    None
}

/// Socket state "established" in `/proc/net/tcp` (`TCP_ESTABLISHED` = 01).
const TCP_ESTABLISHED: &str = "01";

/// The server's side of its connections, as one `/proc/net/tcp{,6}` table
/// shows them: sockets whose local address is `server`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerSockets {
    /// Connections still established.
    pub established: usize,
    /// Their send queues summed (`tx_queue`: bytes written and not yet
    /// acknowledged by the peer, what `ss` calls Send-Q).
    pub send_queue_bytes: u64,
}

impl ServerSockets {
    /// Reads the table and adds what it shows for `server`.
    pub fn add_table(&mut self, table: &str, server: SocketAddr) {
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(queues)) =
                (fields.get(1), fields.get(3), fields.get(4))
            else {
                continue;
            };
            if *state != TCP_ESTABLISHED || parse_proc_addr(local) != Some(server) {
                continue;
            }
            self.established += 1;
            let tx = queues.split_once(':').map_or("0", |(tx, _)| tx);
            self.send_queue_bytes += u64::from_str_radix(tx, 16).unwrap_or(0);
        }
    }

    /// Both live tables of this network namespace; `None` if neither reads.
    pub fn read(server: SocketAddr) -> Option<Self> {
        let mut sockets = Self::default();
        let mut read_any = false;
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(text) = fs::read_to_string(table) {
                sockets.add_table(&text, server);
                read_any = true;
            }
        }
        read_any.then_some(sockets)
    }
}

/// Memory the kernel holds for all TCP sockets, in pages: the `mem` of the
/// `TCP:` line of `/proc/net/sockstat` (what `tcp_mem`'s limits count).
pub fn sockstat_tcp_mem_pages(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "mem")?;
    words.next()?.parse().ok()
}

/// A `kB` line of `/proc/PID/status`, e.g. `VmRSS:   12345 kB`, in bytes.
pub fn status_bytes(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// utime + stime from `/proc/PID/stat`, in clock ticks, all threads.
/// The command name (field 2) may hold spaces and parentheses, so fields
/// are counted from the last `)`.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    // Field 3 (state) is the first after the name; utime is field 14.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The soft and hard "Max open files" of `/proc/PID/limits`
/// (`None` stands for "unlimited").
pub fn nofile_limits(limits: &str) -> Option<(Option<u64>, Option<u64>)> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut values = line["Max open files".len()..].split_whitespace();
    let parse = |v: &str| {
        if v == "unlimited" {
            Some(None)
        } else {
            v.parse().ok().map(Some)
        }
    };
    Some((parse(values.next()?)?, parse(values.next()?)?))
}

/// What one look at a process shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Resident memory now (VmRSS), bytes.
    pub rss: u64,
    /// The most resident memory the process has ever had (VmHWM), bytes.
    pub hwm: u64,
    /// CPU time used so far by all its threads, in [`USER_HZ`] ticks.
    pub cpu_ticks: u64,
}

/// One thread's CPU time so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    pub tid: u32,
    /// The thread's name (`comm`), e.g. `routing-worker-1`; the main
    /// thread's is the executable's.
    pub name: String,
    /// utime + stime, in [`USER_HZ`] ticks.
    pub cpu_ticks: u64,
}

/// Each thread's share of the CPU used between two [`Process::threads`]
/// readings, largest first, as (name, fraction of the total); threads that
/// used none are left out. Empty when no CPU was used at all.
pub fn thread_shares(before: &[ThreadCpu], after: &[ThreadCpu]) -> Vec<(String, f64)> {
    let used: Vec<(String, u64)> = after
        .iter()
        .map(|t| {
            let earlier = before
                .iter()
                .find(|b| b.tid == t.tid)
                .map_or(0, |b| b.cpu_ticks);
            (t.name.clone(), t.cpu_ticks.saturating_sub(earlier))
        })
        .filter(|(_, ticks)| *ticks > 0)
        .collect();
    let total: u64 = used.iter().map(|(_, ticks)| ticks).sum();
    let mut shares: Vec<(String, f64)> = used
        .into_iter()
        .map(|(name, ticks)| (name, ticks as f64 / total as f64))
        .collect();
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    shares
}

/// A process on this machine, read through `/proc/PID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
}

impl Process {
    pub fn new(pid: u32) -> Self {
        Self { pid }
    }

    fn read(&self, file: &str) -> std::io::Result<String> {
        fs::read_to_string(format!("/proc/{}/{file}", self.pid))
    }

    /// RSS, peak RSS and CPU time now; `None` once the process has gone.
    pub fn sample(&self) -> Option<Sample> {
        let status = self.read("status").ok()?;
        Some(Sample {
            rss: status_bytes(&status, "VmRSS")?,
            hwm: status_bytes(&status, "VmHWM")?,
            cpu_ticks: stat_cpu_ticks(&self.read("stat").ok()?)?,
        })
    }

    /// CPU time used so far by each of its threads, with the thread's name
    /// (`/proc/PID/task/TID/{stat,comm}`). Threads that end between the
    /// listing and the read are left out.
    pub fn threads(&self) -> Vec<ThreadCpu> {
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return Vec::new();
        };
        let mut threads: Vec<ThreadCpu> = tasks
            .flatten()
            .filter_map(|task| {
                let tid = task.file_name().to_str()?.parse().ok()?;
                let cpu_ticks =
                    stat_cpu_ticks(&fs::read_to_string(task.path().join("stat")).ok()?)?;
                let name = fs::read_to_string(task.path().join("comm")).ok()?;
                Some(ThreadCpu {
                    tid,
                    name: name.trim().to_string(),
                    cpu_ticks,
                })
            })
            .collect();
        threads.sort_by_key(|t| t.tid);
        threads
    }

    /// The executable's short name (`/proc/PID/comm`).
    pub fn name(&self) -> Option<String> {
        self.read("comm").ok().map(|s| s.trim().to_string())
    }

    /// Number of open file descriptors.
    pub fn open_fds(&self) -> Option<usize> {
        fs::read_dir(format!("/proc/{}/fd", self.pid))
            .ok()
            .map(|d| d.count())
    }

    /// Soft and hard open-file limits.
    pub fn nofile_limits(&self) -> Option<(Option<u64>, Option<u64>)> {
        nofile_limits(&self.read("limits").ok()?)
    }

    /// True if the process is a container engine's port forwarder.
    pub fn is_port_proxy(&self) -> bool {
        self.name()
            .is_some_and(|name| PORT_PROXIES.contains(&name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a machine running routing-server on 127.0.0.1:9180 and
    // a client connected to it (the second row, ESTABLISHED = 01).
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:23DC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:23DC 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
";

    // [::]:9190 and [::1]:9191, both listening.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:23E6 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:23E7 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5252 1 0000000000000000 100 0 0 10 0
";

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn addresses_decode_in_host_byte_order() {
        // These samples are from a little-endian machine.
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_proc_addr("0100007F:23DC"),
                Some(addr("127.0.0.1:9180"))
            );
            assert_eq!(
                parse_proc_addr("00000000000000000000000001000000:23E7"),
                Some(addr("[::1]:9191"))
            );
        }
        assert_eq!(parse_proc_addr("0100007F"), None);
        assert_eq!(parse_proc_addr("XYZ:23DC"), None);
    }

    /// Given a listener on 127.0.0.1:9180 and a connection to it, only the
    /// listener's inode is found; a wildcard listener serves any address.
    #[test]
    fn only_listening_sockets_that_serve_the_target_match() {
        if !cfg!(target_endian = "little") {
            return;
        }
        assert_eq!(listening_inodes(TCP, addr("127.0.0.1:9180")), [4242]);
        assert_eq!(
            listening_inodes(TCP, addr("127.0.0.2:9180")),
            Vec::<u64>::new()
        );
        assert_eq!(listening_inodes(TCP, addr("127.0.0.1:8080")), [4444]);
        assert_eq!(listening_inodes(TCP6, addr("127.0.0.1:9190")), [5151]);
        assert_eq!(listening_inodes(TCP6, addr("[::1]:9191")), [5252]);
        assert_eq!(
            listening_inodes(TCP6, addr("127.0.0.1:9191")),
            Vec::<u64>::new()
        );
    }

    /// Given two server-side sockets of 127.0.0.1:9180 (one with 0x1000
    /// bytes queued), the client's own end and a listener, only the two
    /// server-side ones count.
    #[test]
    fn server_sockets_count_established_local_ends() {
        if !cfg!(target_endian = "little") {
            return;
        }
        let table = format!(
            "{TCP}   3: 0100007F:23DC 0100007F:9C40 01 00001000:00000000 00:00000000 00000000     0        0 4545 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:23DC 0100007F:9C41 01 00000000:00000010 00:00000000 00000000     0        0 4646 1 0000000000000000 20 4 30 10 -1
"
        );
        let mut sockets = ServerSockets::default();
        sockets.add_table(&table, addr("127.0.0.1:9180"));
        assert_eq!(
            sockets,
            ServerSockets {
                established: 2,
                send_queue_bytes: 0x1000
            }
        );
    }

    #[test]
    fn sockstat_mem_is_in_pages() {
        let sockstat =
            "sockets: used 19\nTCP: inuse 2 orphan 0 tw 0 alloc 2 mem 50\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tcp_mem_pages(sockstat), Some(50));
        assert_eq!(sockstat_tcp_mem_pages("UDP: inuse 0 mem 3\n"), None);
    }

    #[test]
    fn status_lines_are_read_in_bytes() {
        let status =
            "Name:\trouting-server\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t3\n";
        assert_eq!(status_bytes(status, "VmRSS"), Some(10_240 * 1024));
        assert_eq!(status_bytes(status, "VmHWM"), Some(20_480 * 1024));
        assert_eq!(status_bytes(status, "VmSwap"), None);
        // A kernel thread has no VmRSS line at all.
        assert_eq!(status_bytes("Name:\tkthreadd\n", "VmRSS"), None);
    }

    /// Given a command name with spaces and a `)`, utime (14) and stime (15)
    /// are still found by counting from the last `)`.
    #[test]
    fn cpu_ticks_survive_odd_command_names() {
        let stat = "4242 (routing (x) server) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    731 269 0 0 20 0 3 0 12345 100000000 2500 18446744073709551615";
        assert_eq!(stat_cpu_ticks(stat), Some(731 + 269));
        assert_eq!(stat_cpu_ticks("4242 (short) S 1 2"), None);
    }

    /// Given two threads that used 30 and 10 ticks between the readings, one
    /// that used none and one born in between with 10, the shares are
    /// 60 %, 20 % and 20 %, largest first, and the idle thread is left out.
    #[test]
    fn thread_shares_count_only_what_was_used_between_readings() {
        let thread = |tid, name: &str, cpu_ticks| ThreadCpu {
            tid,
            name: name.into(),
            cpu_ticks,
        };
        let before = [
            thread(1, "main", 100),
            thread(2, "worker-1", 50),
            thread(3, "idle", 7),
        ];
        let after = [
            thread(1, "main", 110),
            thread(2, "worker-1", 80),
            thread(3, "idle", 7),
            thread(4, "new", 10),
        ];
        assert_eq!(
            thread_shares(&before, &after),
            [
                ("worker-1".to_string(), 0.6),
                ("main".to_string(), 0.2),
                ("new".to_string(), 0.2)
            ]
        );
        assert!(thread_shares(&after, &after).is_empty());
    }

    #[test]
    fn nofile_limits_parse_numbers_and_unlimited() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            256                  524288               files     \n";
        assert_eq!(nofile_limits(limits), Some((Some(256), Some(524_288))));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(nofile_limits(unlimited), Some((None, None)));
    }

    /// Given a socket this test process listens on, the live table lists it
    /// (`listening_pid` skips its caller, so the test stops at the inode),
    /// and our own `/proc` entry yields RSS, peak RSS, fds and limits.
    #[test]
    fn our_own_listener_is_in_the_table() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let local = listener.local_addr().expect("local addr");
        let table = fs::read_to_string("/proc/net/tcp").expect("linux /proc");
        assert_eq!(listening_inodes(&table, local).len(), 1);
        let me = Process::new(std::process::id());
        let sample = me.sample().expect("our own /proc");
        assert!(sample.rss > 0 && sample.hwm >= sample.rss);
        assert!(me.open_fds().is_some_and(|n| n > 0));
        assert!(me.nofile_limits().is_some());
        let threads = me.threads();
        assert!(
            threads.iter().any(|t| t.tid == me.pid),
            "the main thread is listed: {threads:?}"
        );
    }
}
