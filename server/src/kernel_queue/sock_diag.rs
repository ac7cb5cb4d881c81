//! The one question this module asks the kernel (Linux): "how many bytes of
//! this TCP socket are unsent or unacknowledged?", named by the socket's
//! addresses, over a `NETLINK_SOCK_DIAG` socket, and the kernel's answer.
//!
//! The messages are laid out by the rust-netlink crates:
//! `netlink-packet-core` for the netlink header and its error message,
//! `netlink-packet-sock-diag` for `inet_diag_req_v2` and `inet_diag_msg`.
//! The socket itself is socket2's, opened and read with its safe calls.

use std::{io, net::SocketAddr, time::Duration};

use netlink_packet_core::{
    ErrorBuffer, NETLINK_HEADER_LEN, NLM_F_REQUEST, NLMSG_ERROR, NetlinkBuffer, NetlinkHeader,
    NetlinkMessage,
};
use netlink_packet_sock_diag::{
    AF_INET, AF_INET6, IPPROTO_TCP, SOCK_DIAG_BY_FAMILY, SockDiagMessage,
    inet::{self, ExtensionFlags, InetRequest, InetRequestBuffer, InetResponseBuffer, StateFlags},
};
use socket2::{Domain, Protocol, Socket, Type};

use super::SocketId;

/// Bytes of one request: `struct nlmsghdr` + `struct inet_diag_req_v2`.
pub const REQUEST_LEN: usize = NETLINK_HEADER_LEN + inet::REQUEST_LEN;

/// "No cookie": the kernel then finds the socket by its addresses alone.
/// Set by hand: the crate's `SocketId::new_v4` and `new_v6` start at zero,
/// a cookie no socket has, and the kernel would answer `ENOENT`.
const INET_DIAG_NOCOOKIE: [u8; 8] = [0xFF; 8];

/// Every TCP state, as this request has always asked. The crate's
/// `StateFlags` names only the eleven classic states (bits 1 to 11).
const EVERY_STATE: u32 = u32::MAX;

/// The `sock_diag` request, numbered `seq`, for the TCP socket `id`: the
/// kernel looks it up by its addresses (an exact lookup, not a dump).
pub fn request(id: &SocketId, seq: u32) -> [u8; REQUEST_LEN] {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = seq;
    // This socket's side is the source; any interface; no cookie.
    let question = InetRequest {
        family: match id.local {
            SocketAddr::V4(_) => AF_INET,
            SocketAddr::V6(_) => AF_INET6,
        },
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        // Widened to every bit once written: see `EVERY_STATE`.
        states: StateFlags::all(),
        socket_id: inet::SocketId {
            source_port: id.local.port(),
            destination_port: id.peer.port(),
            source_address: id.local.ip(),
            destination_address: id.peer.ip(),
            interface_id: 0,
            cookie: INET_DIAG_NOCOOKIE,
        },
    };
    let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(question).into());
    message.finalize();
    let mut b = [0; REQUEST_LEN];
    message.serialize(&mut b);
    InetRequestBuffer::new(&mut b[NETLINK_HEADER_LEN..]).set_states(EVERY_STATE);
    b
}

/// What the kernel answered to request `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The socket, with its unsent and unacknowledged bytes.
    Queue {
        seq: u32,
        inode: u32,
        wqueue: u32,
    },
    /// No socket with those addresses (`ENOENT`): it is closed.
    NotFound {
        seq: u32,
    },
    /// Any other error, as a positive errno.
    Error {
        seq: u32,
        errno: i32,
    },
    Malformed,
}

/// Parses the kernel's answer: one netlink message. Only the two numbers
/// it needs are read from an `inet_diag_msg`, so nothing is allocated.
pub fn parse_reply(b: &[u8]) -> Reply {
    // Checks that the length field covers the header and fits in `b`.
    let Ok(message) = NetlinkBuffer::new_checked(b) else {
        return Reply::Malformed;
    };
    let seq = message.sequence_number();
    match message.message_type() {
        NLMSG_ERROR => match ErrorBuffer::new_checked(message.payload()) {
            Ok(error) => {
                let errno = error.code().map_or(0, |code| code.get().wrapping_neg());
                if errno == libc::ENOENT {
                    Reply::NotFound { seq }
                } else {
                    Reply::Error { seq, errno }
                }
            }
            Err(_) => Reply::Malformed,
        },
        SOCK_DIAG_BY_FAMILY => match InetResponseBuffer::new_checked(message.payload()) {
            Ok(socket) => Reply::Queue {
                seq,
                inode: socket.inode(),
                wqueue: socket.send_queue(),
            },
            Err(_) => Reply::Malformed,
        },
        _ => Reply::Malformed,
    }
}

/// What one question about a socket told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// Unsent and unacknowledged bytes (`write_seq - snd_una`).
    Queue(u32),
    /// Closed, or its addresses now belong to another socket (an orphaned
    /// socket, closed by this process but still sending, has inode 0).
    Gone,
}

/// A `NETLINK_SOCK_DIAG` socket, with a bound on each answer's wait.
pub(crate) fn open_diag() -> io::Result<Socket> {
    let diag = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::DGRAM,
        Some(Protocol::from(libc::NETLINK_SOCK_DIAG)),
    )?;
    diag.set_read_timeout(Some(DIAG_ANSWER_LIMIT))?;
    Ok(diag)
}

/// The kernel answers at once; a missing answer is an error, not a hang.
const DIAG_ANSWER_LIMIT: Duration = Duration::from_secs(1);

/// Asks the kernel about `id`, as request `seq`. Unconnected, a netlink
/// socket sends to the kernel. Answers to earlier, timed-out requests are
/// skipped by their number.
pub(super) fn query(diag: &Socket, id: &SocketId, seq: u32, buf: &mut [u8]) -> io::Result<Found> {
    use std::io::Read;
    diag.send(&request(id, seq))?;
    loop {
        let mut reader: &Socket = diag;
        let n = reader.read(buf)?;
        match parse_reply(&buf[..n]) {
            Reply::Queue { seq: s, .. }
            | Reply::NotFound { seq: s }
            | Reply::Error { seq: s, .. }
                if s != seq =>
            {
                continue;
            }
            Reply::Queue { inode, wqueue, .. } if u64::from(inode) == id.inode => {
                return Ok(Found::Queue(wqueue));
            }
            Reply::Queue { .. } | Reply::NotFound { .. } => return Ok(Found::Gone),
            Reply::Error { errno, .. } => return Err(io::Error::from_raw_os_error(errno)),
            Reply::Malformed => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "malformed sock_diag answer",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::net::TcpStream;

    use super::*;
    use crate::kernel_queue::{SentBytes, accounting::socket_of};

    fn id(local: &str, peer: &str) -> SocketId {
        SocketId {
            local: local.parse().expect("address"),
            peer: peer.parse().expect("address"),
            inode: 48213,
        }
    }

    /// Given a loopback IPv4 socket, the request is `nlmsghdr` +
    /// `inet_diag_req_v2` for TCP in any state: its own side as the source,
    /// ports big-endian, no cookie.
    #[test]
    fn a_request_names_one_tcp_socket_by_its_addresses() {
        let b = request(&id("127.0.0.1:9180", "127.0.0.2:50000"), 7);
        assert_eq!(b.len(), 72);
        assert_eq!(b[0..4], 72_u32.to_ne_bytes(), "length");
        assert_eq!(b[4..6], 20_u16.to_ne_bytes(), "SOCK_DIAG_BY_FAMILY");
        assert_eq!(b[6..8], 1_u16.to_ne_bytes(), "NLM_F_REQUEST");
        assert_eq!(b[8..12], 7_u32.to_ne_bytes(), "sequence number");
        assert_eq!((b[16], b[17]), (2, 6), "AF_INET, IPPROTO_TCP");
        assert_eq!(b[20..24], [0xFF; 4], "every state");
        assert_eq!(b[24..28], [0x23, 0xDC, 0xC3, 0x50], "ports 9180, 50000");
        assert_eq!(
            b[28..44],
            [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(b[44..48], [127, 0, 0, 2]);
        assert_eq!(b[60..64], [0; 4], "any interface");
        assert_eq!(b[64..72], [0xFF; 8], "INET_DIAG_NOCOOKIE");
        let v6 = request(&id("[::1]:9180", "[::ffff:127.0.0.1]:50000"), 8);
        assert_eq!(v6[16], 10, "AF_INET6");
        assert_eq!(v6[28..44], std::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(v6[54..60], [0xFF, 0xFF, 127, 0, 0, 1], "v4-mapped peer");
    }

    /// A reply of `len` bytes, of netlink type `kind`, numbered `seq`.
    fn reply(kind: u16, seq: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        b[4..6].copy_from_slice(&kind.to_ne_bytes());
        b[8..12].copy_from_slice(&seq.to_ne_bytes());
        b
    }

    #[test]
    fn replies_give_the_queue_or_say_the_socket_is_gone() {
        let mut found = reply(20, 7, 88);
        found[76..80].copy_from_slice(&0x1F400_u32.to_ne_bytes());
        found[84..88].copy_from_slice(&48213_u32.to_ne_bytes());
        assert_eq!(
            parse_reply(&found),
            Reply::Queue {
                seq: 7,
                inode: 48213,
                wqueue: 0x1F400
            }
        );
        let mut gone = reply(2, 8, 36);
        gone[16..20].copy_from_slice(&(-2_i32).to_ne_bytes());
        assert_eq!(parse_reply(&gone), Reply::NotFound { seq: 8 });
        let mut refused = reply(2, 9, 36);
        refused[16..20].copy_from_slice(&(-1_i32).to_ne_bytes());
        assert_eq!(parse_reply(&refused), Reply::Error { seq: 9, errno: 1 });
    }

    /// Short, cut-off, over-long and unknown messages give `Malformed`, and
    /// no panic.
    #[test]
    fn malformed_replies_are_told_apart() {
        let mut says_longer = reply(20, 1, 88);
        says_longer[0..4].copy_from_slice(&200_u32.to_ne_bytes());
        for bad in [
            vec![],
            vec![0; 11],
            reply(20, 1, 16),
            reply(20, 1, 87),
            reply(2, 1, 19),
            reply(3, 1, 88),
            reply(20, 1, 88)[..40].to_vec(),
            says_longer,
        ] {
            assert_eq!(parse_reply(&bad), Reply::Malformed, "{bad:?}");
        }
    }

    /// The cost behind [`crate::knobs::KERNEL_QUEUE_POLL`]: given 1,000
    /// loopback connections (2,000 sockets), when the kernel is asked about
    /// each server-side socket 20 times, then every one is found each time;
    /// the time per question is printed, not asserted (a measurement, run
    /// by hand: `cargo test -p routing-server --release --lib -- --ignored
    /// --nocapture query_cost`).
    #[tokio::test]
    #[ignore = "opens 2,000 sockets and prints a measurement"]
    async fn query_cost_at_2000_sockets() {
        const PAIRS: usize = 1000;
        const ROUNDS: u32 = 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut pairs = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let client = TcpStream::connect(addr).await.expect("connect");
            let (server, _) = listener.accept().await.expect("accept");
            pairs.push((client, server));
        }
        let ids: Vec<SocketId> = pairs
            .iter()
            .map(|(_, server)| socket_of(server).expect("listed"))
            .collect();
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        let (cpu_before, started) = (cpu_ticks(), Instant::now());
        let mut seq = 0;
        for _ in 0..ROUNDS {
            for id in &ids {
                seq += 1;
                let found = query(&diag, id, seq, &mut buf).expect("answered");
                assert_eq!(found, Found::Queue(0), "found, nothing queued");
            }
        }
        let questions = ROUNDS * PAIRS as u32;
        let wall = started.elapsed() / questions;
        let cpu_us = (cpu_ticks() - cpu_before) as f64 * 10_000.0 / f64::from(questions);
        eprintln!("{questions} questions: {wall:?} per question (wall), {cpu_us:.1} µs CPU each");
    }

    /// This process's user + system CPU time, in clock ticks (1/100 s).
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let after_name = stat.rsplit_once(") ").expect("stat format").1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let tick = |i: usize| fields[i].parse::<u64>().expect("ticks");
        tick(11) + tick(12)
    }

    /// Given a dual-stack listener (`[::]`) and clients on `::1` and on
    /// `127.0.0.1` (a v4-mapped peer), when the kernel is asked about each
    /// server-side socket, then both are found by their IPv6 addresses.
    /// Where this machine has no IPv6 loopback the test says so and passes.
    #[tokio::test]
    async fn ipv6_and_v4_mapped_sockets_are_found() {
        let Ok(listener) = tokio::net::TcpListener::bind("[::]:0").await else {
            eprintln!("no IPv6 on this machine: nothing to check");
            return;
        };
        let port = listener.local_addr().expect("addr").port();
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        for (n, client_ip) in ["::1", "127.0.0.1"].into_iter().enumerate() {
            let Ok(client) = TcpStream::connect((client_ip, port)).await else {
                eprintln!("cannot reach the listener from {client_ip}: skipped");
                continue;
            };
            let (server, _) = listener.accept().await.expect("accept");
            let id = SentBytes::of(&server)
                .socket
                .expect("Linux lists the socket");
            assert!(id.local.is_ipv6(), "{id:?}");
            let seq = u32::try_from(n).expect("small") + 1;
            assert_eq!(
                query(&diag, &id, seq, &mut buf).expect("answered"),
                Found::Queue(0),
                "{client_ip}: {id:?}"
            );
            drop((server, client));
        }
    }
}
