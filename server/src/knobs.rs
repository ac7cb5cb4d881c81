//! The chapter's tuning knobs, in one place.
//!
//! Every value here is a default that `routing-server --help` lets a reader
//! override by flag or environment variable (see [`crate::Config`]).
//!
//! Two sizes are not here, because no flag can reach them: h2's initial
//! write buffer (4 KiB) and read buffer (1 KiB), which every connection
//! holds for its whole life. h2 has no setting for them, so they are fixed
//! at build time by a small patch of h2 (`vendor/README.md`).

use std::time::Duration;

use crate::routing::catalog::Filler;

/// Where the server listens unless `--listen` / `ROUTING_LISTEN` says otherwise.
/// Loopback only: the chapter's commands all use `localhost:9180`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9180";

/// Largest response message the server will encode: 16 MiB.
///
/// tonic's default *encode* limit is unlimited, so without this a bug could
/// stream any size at a client. 16 MiB leaves room for the full 25-route
/// catalog (about 5.0 MB) while still being a cap. A larger response is
/// never sent: the call fails with `OUT_OF_RANGE` ("encoded message length
/// too large").
pub const MAX_SEND_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Largest request message the server will decode: 4 MiB, tonic's default.
///
/// Requests are small (1000 cargo items with short descriptions are ~25 kB), so
/// we keep the default on purpose: the chapter's rule is to raise a cap only
/// where a message really needs it. Larger requests get `OUT_OF_RANGE`.
pub const MAX_RECV_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// HTTP/2 keepalive: the server sends a PING on a connection after it has
/// been idle this long (5 s), to find dead peers and keep NAT/LB state warm.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// How long the server waits for the PING ack before it closes the
/// connection as dead: 20 s (grpc-go's default keepalive timeout).
///
/// The same value is the accepted sockets' `TCP_USER_TIMEOUT` (Linux), as
/// in grpc-go: when bytes the server sent stay unacknowledged for this
/// long, or the peer keeps its TCP receive window shut this long (the
/// kernel's zero-window probes count), the kernel closes the connection.
/// hyper's keepalive cannot: it counts the requests a stalled client keeps
/// sending as activity. The client sees its connection reset. The kernel
/// checks at its probe times (0.2 s, doubling), so a TCP-stalled reader is
/// closed between 20 s and about 26 s after it stopped reading.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The floor on how often a *client* may PING this server: 5 s, as in the
/// chapter (grpc-java `permitKeepAliveTime`, grpc-core
/// `grpc.http2.min_ping_interval_without_data_ms`).
///
/// tonic, hyper and h2 enforce no floor at all, so [`crate::connection::ping_floor`]
/// does: a PING sooner than this after the previous one is a strike, and the
/// third strike gets GOAWAY `ENHANCE_YOUR_CALM` with debug data
/// `too_many_pings`, after which the connection is closed. gRPC clients
/// (gRFC A8) then double their keepalive interval. Strikes reset whenever the
/// server sends HEADERS or DATA, so pings that ride along with real traffic
/// (grpc-go and grpc-core BDP pings) are never punished.
pub const MIN_PING_INTERVAL: Duration = Duration::from_secs(5);

/// Whether a client may PING while it has no call in flight: yes, as in the
/// chapter (grpc-java `permitKeepAliveWithoutCalls`,
/// `grpc.keepalive_permit_without_calls`). When false, every such PING is a
/// strike, and a client that keeps an idle connection warm is sent away.
pub const PERMIT_PINGS_WITHOUT_CALLS: bool = true;

/// PINGs the floor forgives: the third strike gets the GOAWAY. grpc-go and
/// grpc-core allow two (`maxPingStrikes`). Fixed on purpose: it is part of
/// the behaviour clients are written against, not a tuning knob.
pub const MAX_PING_STRIKES: u32 = 2;

/// Control frames that make no progress a connection may send before it is
/// sent away: 1,000 at any moment, topped up by [`CONTROL_FRAMES_PER_STREAM`]
/// for every stream the client opens (never above 1,000 again).
///
/// Counted: WINDOW_UPDATE on a stream that is not open (closed, refused or
/// never opened), SETTINGS (the first one included) and PRIORITY. None moves
/// a byte or starts a call, and h2 counts none of them: it drops a
/// WINDOW_UPDATE on a closed stream without a word, so no reset limit ever
/// fires. Yet each costs a frame parse (a SETTINGS, an ACK too), so one
/// connection could keep the server's core busy with them; four pushed
/// another client's GetQuote p99 from under 1 ms to 114 ms (issue 14).
///
/// Past the budget the connection gets GOAWAY `ENHANCE_YOUR_CALM` with
/// debug data `too_many_control_frames` and is closed, exactly as for the
/// ping floor. A well-behaved client never comes near it: WINDOW_UPDATEs on
/// open streams and on the connection itself (a large download sends
/// hundreds) are not counted, a stream's late WINDOW_UPDATEs are paid for by
/// the stream, and SETTINGS comes once plus a few window changes. 1,000 is
/// nghttp2's bound on queued SETTINGS and PING acks (`max_outbound_ack`).
/// `--control-frame-budget 0` turns the guard off.
pub const CONTROL_FRAME_BUDGET: u32 = 1000;

/// What each stream a client opens adds back to its control-frame budget: 8.
///
/// A stream can earn the server WINDOW_UPDATEs after its end: those the
/// client sent for data it read before it saw the end. That data is at most
/// one window, and clients send an update per half window (h2, Netty) or
/// per quarter (grpc-go), so at most 4 per stream; 8 is twice that, and
/// leaves room for a PRIORITY frame. Fixed on purpose, like
/// [`MAX_PING_STRIKES`]: it describes clients, it is not a tuning knob.
/// Envoy's rule has the same shape (WINDOW_UPDATEs allowed grow with the
/// streams opened and the DATA frames sent).
pub const CONTROL_FRAMES_PER_STREAM: u32 = 8;

/// Streams a client may have open at once on one connection: 100.
///
/// tonic advertises no `SETTINGS_MAX_CONCURRENT_STREAMS`, so without this a
/// single connection may open unlimited calls (hyper's own default is 200;
/// grpc-go's is unlimited, Envoy's 100). A client that opens more gets the
/// extra streams refused (`RST_STREAM REFUSED_STREAM`), which gRPC clients
/// retry or queue; well-behaved clients never exceed the advertised value.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// Streams the server may reset because of a client's protocol errors before
/// it sends GOAWAY `ENHANCE_YOUR_CALM` and closes the connection: 1024, h2's
/// own default.
///
/// tonic 0.14.3 and later pass `None` to hyper unless this is set, which
/// *switches off* h2's guard, although tonic's docs say it keeps hyper's
/// default. Without it, "MadeYouReset" (CVE-2025-8671) works: a client makes
/// the server reset streams itself (for example with a WINDOW_UPDATE that
/// overflows a stream's window) while the server still does each call's work.
pub const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// Bytes of all responses being sent at once, server-wide: 128 MiB.
///
/// A response stays in memory until the client has read it, and a client can
/// stop reading. Each ListRoutes call reserves its page's size before it is
/// built (an uncompressed page is sent from the shared catalog and holds far
/// less, but it is charged its size too, so the budget bounds pages in
/// flight the same way whatever the encoding); a call that would go over the budget fails at once with
/// `RESOURCE_EXHAUSTED` ("response budget ... retry, or ask for a smaller
/// page"), it is never queued. 128 MiB is about 25 full 5 MB pages in flight.
/// GetQuote and health answers are small and never reserve, so they are never
/// starved by it.
pub const RESPONSE_BUDGET_BYTES: usize = 128 * 1024 * 1024;

/// Share of the response budget one connection may hold at once: 25 %
/// (32 MiB of 128 MiB, six full pages).
///
/// Without it, one client that never reads can hold the whole budget for
/// the send deadline, and renew it by reconnecting, so that every other
/// client's ListRoutes is refused. Past its share, a connection's new
/// ListRoutes calls get `RESOURCE_EXHAUSTED` ("per-connection share of the
/// response budget (32 MiB) is in use by this connection's responses...");
/// other connections are still served. A quarter: four stalled
/// connections are needed to fill the budget, and then the stall rule
/// ([`STALLED_HOLDER_AFTER`]) makes room.
pub const RESPONSE_SHARE_PERCENT: u8 = 25;

/// A connection whose budgeted responses have sent nothing for 2 s is
/// "stalled": when the response budget is full and a ListRoutes call
/// arrives, the stalled connection holding the most is closed, and the call
/// gets its room (see [`crate::call::budget`]). Only if none is stalled is the
/// newcomer refused.
///
/// "Sent" is counted in slices of a response ([`PROGRESS_SLICE`]): each
/// slice h2 takes, and each it has finished writing, is progress, and so is
/// each acknowledgement the client's kernel sends for a response h2 has
/// let go of. So a reader slower than 256 KiB per 2 s (about 1 Mbit/s)
/// counts as stalled, but only matters when the budget is full. The closed
/// client sees its connection end.
pub const STALLED_HOLDER_AFTER: Duration = Duration::from_secs(2);

/// Largest slice of a budgeted response handed to h2 at once: 256 KiB
/// (tonic yields a whole page as one chunk).
///
/// Slices are how a response shows send progress (see
/// [`STALLED_HOLDER_AFTER`]), so the stall rule's rate is a slice per 2 s:
/// 256 KiB × 8 ÷ 2 s ≈ 1 Mbit/s. That is below what a full page needs to
/// beat the send deadline anyway (5.0 MB × 8 ÷ 30 s ≈ 1.3 Mbit/s).
/// Not smaller: every slice h2 holds is one entry in its connection's
/// frame queue, and h2 never shrinks that queue. With 64 KiB slices, a
/// 200 kB and a 400 kB page sent at once (`abuse bigframes`) queued 15
/// frames and left each idle connection a 16-entry queue, 5 KiB, for
/// life; with 256 KiB, 7 frames and 2.5 KiB. h2 still takes slices as they go out:
/// hyper asks for the next only while h2 holds less than its per-stream
/// send buffer ([`SEND_BUFFER_PER_STREAM`]).
pub const PROGRESS_SLICE: usize = 256 * 1024;

/// Unsent bytes the kernel may queue on one connection: 128 KiB
/// (`TCP_NOTSENT_LOWAT`, Linux; 0 turns it off).
///
/// Without it, the kernel takes as much of a response as its autotuned send
/// buffer holds (up to `tcp_wmem`'s 4 MiB), so a 2 MB page to a client that
/// stopped reading at the TCP level "leaves" the server at once: it is no
/// longer charged to the response budget, the send deadline no longer
/// applies, and 200 such clients held 381 MiB of kernel memory (issue 14).
/// With it, the rest of the page waits in h2, charged and under the
/// deadline. It does not cap bytes in flight (the send buffer still grows
/// with the link's bandwidth × delay), so it does not slow a fast reader;
/// it costs more, smaller writes once the queue is full.
pub const TCP_NOTSENT_LOWAT: u32 = 128 * 1024;

/// A budgeted response must be sent within 30 s of its start, and "sent"
/// means acknowledged by the client's kernel: the connection's unsent and
/// unacknowledged bytes (what `SIOCOUTQ` reports) no longer cover any of it
/// (Linux; see [`crate::kernel_queue`]). Until then it keeps its share of
/// the response budget.
///
/// This ends stalled readers: a client whose flow-control window stays shut,
/// or who stopped reading its socket, holds its response's memory (in h2 or
/// in the kernel's send queue), so when the deadline passes the server
/// closes that client's connection, which frees every response on it. A
/// 5 MB page takes 20 s even at 2 Mbit/s; gzip makes it about 7 kB.
/// Elsewhere than Linux, "sent" means handed to the kernel.
pub const SEND_DEADLINE: Duration = Duration::from_secs(30);

/// How soon, and then how often, the kernel is asked about a socket while a
/// response on it waits for the client to acknowledge it: 20 ms (see
/// [`crate::kernel_queue`]).
///
/// Each question is one `sock_diag` lookup of one socket by its addresses,
/// measured on the 2-core test machine at 2,000 sockets: 6 µs of CPU each
/// (`query_cost_at_2000_sockets`). A healthy client has acknowledged a
/// page by the first or second question, so a ListRoutes call costs one or
/// two; one thread asks, off the workers, and only while some response
/// waits. The price of asking no more often: a response's budget is given
/// back up to 20 ms after its last byte was acknowledged (a call that would
/// fit once draining responses are given back waits for them, see
/// [`crate::call::budget`]).
pub const KERNEL_QUEUE_POLL: Duration = Duration::from_millis(20);

/// The longest wait between two questions about a socket whose peer
/// acknowledges nothing: 1 s. The interval doubles from
/// [`KERNEL_QUEUE_POLL`] while nothing new is acknowledged, so 2,000
/// stalled readers cost about 2,000 questions a second (about 1 % of a
/// core), and a stalled reader is still seen to make progress, or not,
/// well within [`STALLED_HOLDER_AFTER`] and [`SEND_DEADLINE`].
pub const QUIET_SOCKET_POLL: Duration = Duration::from_secs(1);

/// A request body must be complete within 10 s of its headers.
///
/// Every request in this API is one small message. A body that never
/// finishes would hold its partly received bytes forever; instead the call
/// fails with `DEADLINE_EXCEEDED` ("request body not complete within 10 s").
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The longest a call that brought no deadline (no `grpc-timeout`) may
/// run: 30 s. Then its handler is dropped and the client gets
/// `DEADLINE_EXCEEDED` ("... ran past the server's default of 30 s"); a
/// deadline the client sent, longer or shorter, wins. 0 turns it off.
///
/// Why 30 s: the slowest link the clients emulate (`--link`, see
/// `clients/src/link.rs`) is `wan` for rate (20 Mbit/s) and `longhaul` for
/// delay (400 ms round trip). The largest call, ListRoutes with a full
/// 25-route page, is 5 MB: 5 MB × 8 ÷ 20 Mbit/s = 2.0 s, plus about three
/// 400 ms round trips (request, windows) = 3.2 s; GetQuote needs one round
/// trip. 30 s is about 10 times the slowest whole call, and 3 times
/// [`REQUEST_DEADLINE`], so a slow request body still ends with its own,
/// clearer message. Like a client's deadline, it bounds the handler (until
/// the response's headers); sending the page is [`SEND_DEADLINE`]'s. It
/// protects against clients that send no deadline, whose calls would
/// otherwise pile up behind a slow dependency for as long as it is slow.
/// grpc-go has no such bound. Unit: seconds.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// Bytes of all partly received requests, server-wide: 64 MiB.
///
/// The receive cap bounds one message (4 MiB), but not how many arrive at
/// once. Bytes are counted as they arrive and released when the request has
/// been decoded; a request that would go over the budget fails with
/// `RESOURCE_EXHAUSTED`. 64 MiB is 16 requests at the 4 MiB cap; real
/// requests here are under 30 kB.
pub const REQUEST_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// File descriptors kept free when the connection cap is derived from the
/// open-file limit: 64, for the listener, logs, the runtime and anything a
/// future handler opens. At start-up the soft limit is raised to the hard
/// limit, and the cap is that limit minus this headroom.
pub const FD_HEADROOM: u64 = 64;

/// A new connection must send the HTTP/2 preface and its SETTINGS, and
/// acknowledge the server's SETTINGS, within 10 s, or it is closed (without
/// a GOAWAY: the client is not reading). Without this, a connection that
/// sends nothing (or half a preface) holds a file descriptor forever, and
/// one that never reads the socket can keep sending requests for as long
/// as its receive buffer takes the small answers. Every HTTP/2 client
/// acknowledges SETTINGS as soon as it reads them, one round trip after
/// connecting (RFC 9113 §6.5.3 calls a missing ack `SETTINGS_TIMEOUT`).
/// 10 s is generous for any real client, TLS-terminating proxies included.
/// The same deadline covers the wait for the client's first byte, before
/// which the server builds nothing and sends nothing (not even its
/// SETTINGS; see [`crate::connection::accepted::Accepted::serve`]), and, with TLS,
/// the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accept errors such as `EMFILE` (out of file descriptors) back off before
/// the next accept: 5 ms at first, doubling up to 1 s, as grpc-go and Go's
/// net/http do. tonic retries at once, which spins a core at 100 %.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest wait between two failing accepts.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Threads that serve connections: by default one per CPU this process may
/// use, `std::thread::available_parallelism()`, which honours cgroup CPU
/// quotas (a container limited to 2 CPUs gets 2) and CPU affinity. The number
/// and its reason are logged at start-up.
///
/// Each worker is a tokio current-thread runtime, and each connection is
/// served by one worker for its whole life (see [`crate::server::workers`]), so a
/// response never crosses threads and a worker costs about what one thread
/// does per call. tokio's multi-thread runtime, which this replaced, moved work
/// between threads and woke a connection after each response, writing each
/// one in its own syscall. Measured on the 2-core test machine (ghz, GetQuote,
/// 50 calls in flight over 10 connections, 3 rounds, other builds running):
/// 2 workers used 1.01 to 1.14 times the server CPU per call of 1 worker and
/// made 0.48 to 0.52 reads and writes per call (1 worker: 0.47 to 0.48);
/// the multi-thread runtime used 1.08 to 1.29 times, with 1.27. The cost:
/// one HTTP/2 connection uses at most one core, however busy it is, so a
/// client needs at least as many connections as the server has workers.
/// `--worker-threads 1` serves everything on the thread that calls
/// [`crate::run()`], exactly as a single-threaded server; with more, that
/// thread only accepts (and serves health and the drain), so N workers are
/// N + 1 threads: an acceptor that shared worker 0's thread fell behind a
/// reconnect storm (issue 23, see [`crate::server::workers`]).
pub const WORKER_THREADS: Option<usize> = None;

/// The thread count when `available_parallelism()` cannot tell (it fails on
/// some exotic platforms): 1, which is always safe.
pub const WORKER_THREADS_FALLBACK: usize = 1;

/// Bytes of large DATA frames gathered into one write on a connection:
/// 256 KiB (see [`crate::connection::coalesce`]).
///
/// h2 writes every DATA frame in its own system call, at the 16 KiB frame
/// size clients usually allow: about 310 writes, and as many TCP segments,
/// for a 5 MB ListRoutes page. Gathering them into 256 KiB writes takes about
/// 20. Measured on the 2-core test machine, 200 identity ListRoutes calls:
/// 2.9 ms of server CPU per call before, 2.2 ms after, kernel time down by
/// almost half for one extra copy in user space (none for an identity page's
/// carriers, which are kept by reference: see
/// [`crate::connection::shared_memory`]). The buffer exists only while
/// a connection is sending large frames, and it is freed when the burst ends,
/// so idle connections and GetQuote traffic never hold one.
pub const COALESCE_BYTES: usize = 256 * 1024;

/// A carrier at least this long (16 KiB) goes out of an identity ListRoutes
/// page as bytes shared with the catalog, not copied
/// ([`crate::routing::page_body`]). Each shared string is a chunk of its own:
/// one more DATA frame, one more entry in h2's send queue and one small
/// allocation, which costs more than copying a string shorter than a frame
/// (16 KiB, the frame size clients usually allow). The catalog's carriers
/// are about 100 kB, so every one is shared and everything else is copied.
pub const PAGE_SHARED_TEXT_MIN: usize = 16 * 1024;

/// Bytes of a response that h2 may hold per stream, queued but not yet on
/// the wire: 256 KiB (hyper's default is about 400 KiB).
///
/// hyper hands h2 the next chunk of a body while h2 holds less than this
/// for the stream. An identity ListRoutes page comes in chunks of about
/// 100 kB and 40 bytes, one pair per carrier
/// ([`crate::routing::page_body`]), so at 256 KiB h2 holds up to three
/// carriers per stream, and a flush writes them in one `writev`. At 64 KiB
/// it held one, and a full page took one `writev` and one hand-over from
/// hyper per carrier: 2.15–2.85 ms of server CPU per page, against
/// 1.95–2.30 ms at 256 KiB (5 rounds taking turns; 128 KiB, two carriers,
/// was within the 64 KiB build's spread). While a page is sent it holds no
/// new memory: an identity page's chunks are the catalog's own bytes, and
/// any other page is already charged in full to the response budget. After
/// `bigframes`, an idle connection reads 2.5 KiB more (24.1–24.2 KiB, from
/// 21.5–21.7), not tracked down.
///
/// Each chunk h2 holds is one slot in the connection's frame queue. As
/// published, h2 keeps that queue at its busiest size for the connection's
/// life, and at 256 KiB a connection that once had 15 page streams kept
/// 65.8–65.9 KiB when idle, over issue 23's 64 KiB. The vendored h2 gives
/// an emptied queue's slots back (vendor/README.md): 25.6–25.7 KiB, against
/// 49.8–50.0 KiB at 64 KiB unpatched (`bigframes --bigframes-extra-pages
/// 13`, 300 connections, the allocator purging at once; docs/costs.md,
/// "h2's frame queue").
pub const SEND_BUFFER_PER_STREAM: usize = 256 * 1024;

/// Writes smaller than this (8 KiB) go straight to the socket when nothing is
/// gathered, so GetQuote answers and control frames are never held back or
/// copied.
///
/// Also the shortest slice kept by reference rather than copied
/// ([`crate::connection::shared_memory`]): copying a few hundred bytes costs
/// less than a part of its own, and it bounds a burst's list of parts. At
/// most 256 KiB ÷ 8 KiB = 32 are shared, each followed by at most one
/// copied run, so a burst is at most 65 parts (about 2.6 KB of list) and
/// about one `writev` ([`COALESCE_MAX_SLICES`]), however small the frames a
/// client's flow-control window lets through.
pub const COALESCE_MIN_WRITE: usize = 8 * 1024;

/// Most parts of a gathered burst given to one `writev`: 64 (see
/// [`crate::connection::coalesce`]).
///
/// A burst whose frames are kept by reference
/// ([`crate::connection::shared_memory`]) is a list of parts: each frame's
/// copied header, then its payload in the catalog. 256 KiB of 16 KiB frames
/// is 15 of each, so 64 sends a full burst in one call with room for small
/// frames between them. The slices live on the stack, 16 bytes each; Linux
/// takes up to 1,024 (`IOV_MAX`).
pub const COALESCE_MAX_SLICES: usize = 64;

/// Graceful shutdown: after SIGTERM or Ctrl+C the server stops accepting,
/// lets calls in flight finish, and gives up waiting after 10 s.
/// compose.yaml allows 15 s before SIGKILL, so the drain can finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

// ─── Hardening round three (issue 23) ───────────────────────────────────

/// WINDOW_UPDATEs on open streams and on the connection itself that a
/// connection may send beyond what the server's DATA calls for: 1,000 (see
/// [`crate::connection::window_updates`]).
///
/// A WINDOW_UPDATE answers DATA the client has read: a receiver sends one
/// for a stream, and one for the connection, after each few KiB it
/// consumed. So the updates a client may send grow with the DATA it was
/// sent: one per [`DATA_BYTES_PER_WINDOW_UPDATE`] (2 KiB, a stream update
/// and a connection update for every 4 KiB, the smallest refresh any stack
/// sends: Go's `inflowMinRefresh`), [`WINDOW_UPDATES_PER_STREAM`] for each
/// stream the client opens, plus this allowance, a running total as in
/// Envoy's rule. Without it, four connections that ask for full pages with
/// a tiny window and then send WINDOW_UPDATEs in a tight loop on their open
/// streams (each lets the server send a byte, or nothing) had the server
/// take 80 million of them in 15 s on both cores, and another client's
/// GetQuote median rose from 1 ms to 93–151 ms (issue 23). The
/// control-frame budget ([`CONTROL_FRAME_BUDGET`]) does not see them: they
/// are on open streams.
///
/// Past it the connection gets GOAWAY `ENHANCE_YOUR_CALM` with debug data
/// `too_many_window_updates` and is closed, as for the ping floor. A real
/// client sends at most two updates per 16 KiB DATA frame (h2 and Netty one
/// per half window, grpc-go per quarter, Go's net/http2 per 4 KiB read at
/// the most), so a download earns 8 per frame and spends 2 at most; 1,000
/// covers the handshake's updates and a BDP estimator's window raises many
/// times over. `--window-update-budget 0` turns the guard off.
pub const WINDOW_UPDATE_BUDGET: u32 = 1000;

/// DATA payload bytes the server sends for each WINDOW_UPDATE a client may
/// answer with: 2 KiB (see [`WINDOW_UPDATE_BUDGET`]). Bytes, not frames: a
/// client with a 1-byte window makes the server send 1-byte DATA frames,
/// one per update, which earn it nothing. Fixed on purpose: it describes
/// clients, it is not a tuning knob.
pub const DATA_BYTES_PER_WINDOW_UPDATE: u64 = 2 * 1024;

/// WINDOW_UPDATEs each stream a client opens may add: 4. A client that
/// reads many small answers (GetQuote's are about 100 bytes, far less than
/// 2 KiB) may still send a connection update with each new request, as
/// grpc-core does when it writes anyway; 4 is twice a stream and a
/// connection update for each. Fixed on purpose, like
/// [`CONTROL_FRAMES_PER_STREAM`].
pub const WINDOW_UPDATES_PER_STREAM: u64 = 4;

/// How long a connection closed from outside (send deadline, a full
/// response budget's eviction) may take to write its GOAWAY: 1 s.
///
/// The GOAWAY (`ENHANCE_YOUR_CALM`, debug data `send_deadline` or
/// `stalled_holder`) waits for a frame boundary, as every GOAWAY of this
/// server does, and tells the client why its calls ended and which
/// streams were never served. A reader stalled at the HTTP/2 level takes
/// it at once; one stalled at the TCP level takes nothing, so after this
/// the connection is closed without it, as before, and its memory freed.
pub const GOAWAY_WRITE_GRACE: Duration = Duration::from_secs(1);

/// How long a connection that h2 ends (its last GOAWAY sent, graceful or
/// for a client's protocol error, and its write side shut) goes on
/// reading, and dropping, what the client still sends, before the socket is
/// closed: until the client closes, at most 1 s.
///
/// A client's frames can cross the server's last GOAWAY: streams it opened
/// before reading it. A socket closed with bytes unread, or with more on
/// their way, answers with a TCP RST, and a client whose kernel takes the
/// RST first can lose the GOAWAY still unread in its buffer, or fail its
/// next write (`BrokenPipe`): calls that the GOAWAY would have marked as
/// never processed, safe to send again, fail instead (ready-balance's
/// drain test, `after_a_goaway_the_endpoint_is_not_picked`, failed so
/// about 1 run in 40). A client closes one round trip after the GOAWAY and
/// the FIN reach it, so the wait is short; the connection keeps its slot
/// of the cap meanwhile, which bounds one that never closes to this.
/// grpc-go's server waits the same 1 s for its reader before it closes, for
/// the same reason (grpc-go#5358).
pub const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// Bytes a lingering connection ([`CLOSE_LINGER`]) reads and drops before
/// it is closed anyway: 256 KiB. Nothing is acknowledged after the end (no
/// WINDOW_UPDATE), so a client's DATA stops at its flow-control window;
/// this bounds the rest (control frames, which no window limits), and the
/// CPU one client can make the server spend dropping them.
pub const CLOSE_LINGER_MAX_BYTES: usize = 256 * 1024;

/// Connections the kernel may complete and queue before the server accepts
/// them (the listen backlog): by default the kernel's own bound,
/// `net.core.somaxconn` (see [`crate::server::listen`]).
///
/// When the queue is full the kernel drops the next SYN, and that client's
/// connect takes a retransmission: a second or more. With std's 128, a
/// storm of 32 clients reconnecting at once (a load balancer restarting, a
/// fleet redeploying) made 1–11 % of connects take a second or more
/// (issue 23); Go listens with `somaxconn` (4,096 on Linux since 5.4) and
/// its clients saw almost none. The kernel caps any value at `somaxconn`.
/// The memory is the kernel's, per queued connection, only while it waits.
/// A longer queue only buys time (4,096 is 0.2-0.3 s of that storm here):
/// the acceptor must also keep up, which is why it has a thread of its own
/// and takes each connection with one `accept4` ([`crate::server::workers`],
/// [`crate::server::accept`]).
pub const LISTEN_BACKLOG: Option<u32> = None;

/// The backlog when `somaxconn` cannot be read (not Linux, or no `/proc`):
/// 4,096, Linux's default since 5.4.
pub const LISTEN_BACKLOG_FALLBACK: u32 = 4096;

/// Where Linux says its `somaxconn`.
pub const SOMAXCONN_PATH: &str = "/proc/sys/net/core/somaxconn";

// ─── TLS (server/src/connection/tls.rs) ─────────────────────────────────

/// TLS handshakes the server computes at once, over every worker: 16.
/// A connection whose ClientHello is in waits for a slot (inside its
/// handshake timeout); it keeps the slot while rustls answers the
/// ClientHello (the key exchange and the certificate's signature) and
/// until its worker has run its other tasks once.
///
/// A TLS handshake is the most expensive thing a client can make this
/// server do: a new TLS connection cost the server 0.35-0.39 ms of CPU
/// against 0.08-0.10 ms for a plaintext one, and 17-20 µs for a GetQuote on
/// an open connection (docs/tls.md). Handshakes run on the
/// workers, beside the calls of established connections, so without a
/// bound a burst of new connections queues any number of them ahead of
/// those calls. With it, a worker computes at most 16 between two looks at
/// its sockets, so a call on an established connection waits behind at
/// most about 5 ms of handshakes, whatever the flood. Handshake throughput
/// is not lowered: the slots come free as fast as the CPU computes. A
/// client that sends nothing, or stalls after its ClientHello, holds no
/// slot, so stalled clients cannot lock real ones out. grpc-go has no such
/// bound (each connection's handshake runs in a goroutine of its own, with
/// a 120 s timeout). Measured with `abuse tlsflood` (server on one pinned
/// core, flood on the other, 64 and 256 flooders, 13 rounds, load average
/// 1.8-7.9 from other work): grpc-go's probe GetQuote p50 rose to 48 and
/// 162 ms, this server's stayed at 8-11 ms with 1, 16 or 100,000 slots,
/// and the rounds' spread was wider than any difference between those
/// three (docs/tls.md). 16 is kept for the mechanism; 1 showed no gain that
/// stands out of that noise, and since the slots are shared by every
/// worker it would serialize a multi-worker server's handshakes.
pub const TLS_HANDSHAKES_IN_FLIGHT: usize = 16;

/// Whether the server issues TLS session tickets (stateless, encrypted with
/// a key that rustls rotates every 6 hours): yes, as Go's crypto/tls does.
/// A client that kept a ticket resumes: no certificate sent or checked and
/// no signature. In TLS 1.3 that saves no round trip, and measured little
/// server CPU (ring's ECDSA signature is cheap; a resumed handshake still
/// does its key exchange, and is sent new tickets): it is the client that
/// saves, the certificate check (docs/tls.md). Off, every handshake is full.
pub const TLS_SESSION_TICKETS: bool = true;

// ─── Connection lifetime (connection/age.rs), the replica (routing/replica.rs) ───

/// Maximum connection age: off by default, as in grpc-go
/// (`MaxConnectionAge` is infinity unless set).
///
/// When set (`--max-connection-age-secs N`), a connection gets a graceful
/// GOAWAY after N seconds ±10 %, and its client reconnects: behind an L4
/// load balancer that is what spreads a long-lived channel's calls over
/// replicas added after it connected (README, "Behind a load balancer").
/// Off because a server alone, or behind an L7 balancer that spreads calls
/// itself, gains nothing from it and every client pays a reconnect (a TCP
/// and HTTP/2 handshake, a round trip or two) per age. What to set it to
/// depends on how fast replicas come and go in a deployment, not on
/// anything this server can measure; grpc-go users commonly pick minutes
/// (e.g. 30 s to 5 min). Unit: seconds, at least 1.
pub const MAX_CONNECTION_AGE: Option<Duration> = None;

/// After the age's GOAWAY, calls in flight may take this long to finish
/// before the connection is closed under them: unset, as long as they take
/// (grpc-go's default is infinity too). Set it whenever the age is set and
/// calls can be long (a stream that never ends would otherwise keep the
/// connection, and its replica, forever). Unit: seconds; 0 closes the
/// connection as soon as the GOAWAY is out.
pub const MAX_CONNECTION_AGE_GRACE: Option<Duration> = None;

/// Maximum idle time: off by default, as in grpc-go (`MaxConnectionIdle`).
/// When set, a connection that has had no stream open for this long gets a
/// graceful GOAWAY and closes, giving back what an idle connection holds
/// (the per-connection h2 state `docs/hardening.md` lists). Off because
/// the chapter's own lesson keeps idle channels warm on purpose (5 s
/// keepalive); a client that is sent away reconnects on its next call and
/// pays a handshake for it. Unit: seconds, at least 1.
pub const MAX_CONNECTION_IDLE: Option<Duration> = None;

/// Idle time after which a connection that once had [`BURST_STREAMS`]
/// streams open at once gets a graceful GOAWAY: 15 s (0 turns it off).
///
/// h2 keeps its frame queue and its stream store at the size of the
/// connection's busiest moment, for the connection's whole life: measured
/// with the `bigframes` attack and the allocator purging at once
/// (docs/hardening.md), a connection idle after 100 streams at once kept
/// 214 KiB of live memory, one that never had more than 2 kept 25 KiB,
/// about 2 KiB for every stream once open at once. The vendored h2 now
/// gives its frame queue back once empty, and 100 streams leave 64.1 KiB
/// (docs/costs.md, "h2's frame queue"); the rest is h2's stream store,
/// which h2 has no setting to shrink, and at the connection cap that is
/// still over a gigabyte. A GOAWAY gives it all back; the client's next
/// call opens a connection that never had the burst. 15 s: longer than any pause inside a burst of calls, shorter
/// than the 20 s after which issue 23 asks for at most 64 KiB per
/// connection. On by default, unlike [`MAX_CONNECTION_IDLE`], because it
/// touches only connections that once ran [`BURST_STREAMS`] calls at once,
/// never the chapter's one idle channel kept warm by keepalive. Unit:
/// seconds.
pub const MAX_IDLE_AFTER_BURST: Option<Duration> = Some(Duration::from_secs(15));

/// Streams open at once that mark a connection as a burst's: 16. Below
/// it, what h2 keeps is under issue 23's 64 KiB per idle connection, so it
/// is not worth a reconnect. Measured with 15 one-route page streams at
/// once: 25.6–25.7 KiB of live memory per idle connection, since h2 gives
/// an emptied frame queue back (49.3–50.0 KiB before; see
/// [`SEND_BUFFER_PER_STREAM`]).
pub const BURST_STREAMS: u32 = 16;

/// The age is moved by up to ±10 % per connection, as grpc-go's
/// `getJitter`: connections opened together (after a deploy, or after the
/// balancer restarted) do not all reconnect at the same moment. Fixed: it
/// is what gRFC A9 specifies, not a tuning knob.
pub const MAX_CONNECTION_AGE_JITTER: f64 = 0.1;

/// The port the README and compose serve metrics on: 9464, the port
/// OpenTelemetry's Prometheus exporter and grpc-go's metrics example use.
/// `--metrics-listen` itself has no default: metrics are off unless asked
/// for, as in grpc-go, so that several servers on one machine (verify.sh
/// --local, the harness, `bench folklore`) never fight over one port.
pub const METRICS_PORT: u16 = 9464;

/// Connections the metrics listener serves at once: 64. A Prometheus keeps
/// one per server, and a person with `curl` one more. When all are taken,
/// a new connection closes the one that has waited longest for a request
/// (see [`crate::metrics::endpoint`]), so idle sockets cannot keep a scrape
/// out; it is refused only when all are answering. Why 64, not 8: under a
/// flood of idle sockets that reconnect as they are closed, every newcomer
/// closes one waiting connection, so a scrape has as many arrivals as
/// there are slots to have its request read; 64 is 8 times the margin.
/// The cost is bounded: a waiting slot holds at most
/// [`METRICS_MAX_REQUEST_BYTES`] of buffer, and 64 idle sockets added
/// about 1 MiB of RSS in `abuse metricsidle` (docs/hardening.md). The cap
/// keeps a flood on the metrics port from costing the gRPC port anything
/// (its own connection cap and budgets are not touched).
pub const METRICS_MAX_CONNECTIONS: usize = 64;

/// The most a metrics connection buffers of a request: 8 KiB, hyper's
/// smallest read buffer (`max_buf_size`); a longer head gets 431 and the
/// connection is closed. Prometheus's scrape request is about 300 bytes,
/// curl's under 100. hyper's own limit is about 400 KiB, which over
/// [`METRICS_MAX_CONNECTIONS`] slots would let idle sockets pin 25 MiB;
/// at 8 KiB they pin at most 512 KiB. Unit: bytes.
pub const METRICS_MAX_REQUEST_BYTES: usize = 8 * 1024;

/// A metrics request's headers must arrive within this: 2 s, then the
/// connection is closed (hyper's `header_read_timeout`). Prometheus and
/// `curl` send theirs with the connection; 2 s is five 400 ms round trips.
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// At most one warning per 10 s sums the metrics connections closed or
/// refused since the last one, so a flood of sockets cannot flood the log.
pub const METRICS_DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A metrics connection lives at most this long: 30 s, then it is closed,
/// whatever it is doing. A slow reader of a scrape cannot hold a slot for
/// longer; Prometheus opens a new connection for its next scrape, which at
/// its default interval (15 s) is at most every other one.
pub const METRICS_CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Histograms' values wait in a lock-free list until this upkeep moves
/// them into their buckets: every 1 s (and before each scrape). It bounds
/// what the list holds between two scrapes to one second of calls.
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

// ─── Faults (routing/faults.rs): off by default, for lever 6 ──────────────

/// GetQuote's injected wait: none by default (0 ms).
///
/// A slow dependency to learn deadlines and cancellation on (lever 6,
/// `deadline-client`): every GetQuote awaits a sleep of this many
/// milliseconds before it answers, so a client's deadline or cancel drops
/// it. Never set it in production: it is a fault. Unit: milliseconds.
pub const FAULT_DELAY_MS: u64 = 0;

/// The longest delay `--fault-delay-ms` takes: 60,000 ms (60 s). Longer
/// than any lesson needs (the chapter's deadlines are 200 ms to 10 s), and
/// short enough that a typo (an extra zero or three) cannot leave calls
/// hanging for hours behind a drain that gives up after 10 s.
pub const FAULT_DELAY_MAX_MS: u64 = 60_000;

/// Share of GetQuote calls that fail at once with `UNAVAILABLE`: none by
/// default. A replica in trouble to learn retries on (lever 6,
/// `retry-client`): 100 is an outage, 50 a flaky replica. Drawn per call,
/// independently (see [`crate::routing::faults`]). Unit: percent, 0 to 100.
pub const FAULT_UNAVAILABLE_PERCENT: u8 = 0;

/// `routing-server --help` in groups, the same as the folders of
/// `server/src`: the chapter's levers (`routing/`, and hyper's settings in
/// `server/serving.rs`), the connection's rules (`connection/`), the per-call
/// budgets and deadlines (`call/`), connection lifetime (gRFC A9,
/// `connection/age.rs`), TLS (`connection/tls.rs`), the runtime
/// (`server/`), the metrics (`metrics/`), and last the faults a reader
/// turns on to learn lever 6 (`routing/faults.rs`). clap lists the groups in the order of their first flag, so
/// [`Config`]'s fields follow that order (and so does the start-up log's
/// `config=` line).
const LEVERS: &str = "The chapter's levers";
const CONNECTION_RULES: &str = "Connection rules";
const BUDGETS: &str = "Budgets and deadlines";
const LIFETIME: &str = "Connection lifetime (gRFC A9)";
const TLS: &str = "TLS";
const RUNTIME: &str = "Runtime";
const METRICS: &str = "Metrics";
/// In capitals on purpose: a fault must stand out in `--help`.
const FAULTS: &str = "FAULTS";

/// The server's settings: the knobs above, each overridable by a flag or an
/// environment variable so readers can experiment without recompiling.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Largest response message the server encodes, in bytes (send cap).
    #[arg(help_heading = LEVERS, long, env = "ROUTING_MAX_SEND_BYTES", default_value_t = MAX_SEND_MESSAGE_BYTES)]
    pub max_send_bytes: usize,

    /// Largest request message the server decodes, in bytes (receive cap).
    #[arg(help_heading = LEVERS, long, env = "ROUTING_MAX_RECV_BYTES", default_value_t = MAX_RECV_MESSAGE_BYTES)]
    pub max_recv_bytes: usize,

    /// Seconds a connection may sit idle before the server sends a keepalive PING.
    #[arg(help_heading = LEVERS, long, env = "ROUTING_KEEPALIVE_SECS", default_value_t = KEEPALIVE_INTERVAL.as_secs(),
          value_parser = at_least_one_second)]
    pub keepalive_secs: u64,

    /// Seconds to wait for a PING ack before closing the connection as dead.
    #[arg(help_heading = LEVERS, long, env = "ROUTING_KEEPALIVE_TIMEOUT_SECS", default_value_t = KEEPALIVE_TIMEOUT.as_secs(),
          value_parser = at_least_one_second)]
    pub keepalive_timeout_secs: u64,

    /// Never compress responses (gzip requests are still accepted): compare with and without.
    #[arg(help_heading = LEVERS, long, env = "ROUTING_NO_GZIP")]
    pub no_gzip: bool,

    /// What the catalog's padding is made of: `repeated` (`X`s, which gzip
    /// shrinks to 0.14 %) or `random` (seeded printable characters that
    /// barely shrink). Same sizes, ids and prices either way.
    #[arg(help_heading = LEVERS, long, env = "ROUTING_FILLER", value_enum, default_value_t = Filler::Repeated)]
    pub filler: Filler,

    /// Least seconds between two client PINGs; quicker ones are strikes, and the
    /// third strike gets GOAWAY too_many_pings (0 turns the floor off).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_MIN_PING_INTERVAL_SECS", default_value_t = MIN_PING_INTERVAL.as_secs())]
    pub min_ping_interval_secs: u64,

    /// Whether clients may PING with no call in flight (true or false).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_PERMIT_PINGS_WITHOUT_CALLS", default_value_t = PERMIT_PINGS_WITHOUT_CALLS,
          action = clap::ArgAction::Set)]
    pub permit_pings_without_calls: bool,

    /// Control frames that make no progress (WINDOW_UPDATE on a stream that is not
    /// open, SETTINGS, PRIORITY) a connection may send, plus 8 per stream it opens;
    /// past it, GOAWAY too_many_control_frames (0 turns the guard off).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_CONTROL_FRAME_BUDGET", default_value_t = CONTROL_FRAME_BUDGET)]
    pub control_frame_budget: u32,

    /// Streams a client may open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_MAX_CONCURRENT_STREAMS", default_value_t = MAX_CONCURRENT_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,

    /// Streams reset for a client's protocol errors before GOAWAY ENHANCE_YOUR_CALM.
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_MAX_LOCAL_ERROR_RESETS", default_value_t = MAX_LOCAL_ERROR_RESETS)]
    pub max_local_error_resets: usize,

    /// Unsent bytes the kernel may queue per connection (TCP_NOTSENT_LOWAT, Linux; 0: no limit).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_TCP_NOTSENT_LOWAT", default_value_t = TCP_NOTSENT_LOWAT)]
    pub tcp_notsent_lowat: u32,

    /// Seconds a new connection has to send the HTTP/2 preface and SETTINGS and
    /// acknowledge the server's SETTINGS.
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_HANDSHAKE_TIMEOUT_SECS", default_value_t = HANDSHAKE_TIMEOUT.as_secs(),
          value_parser = at_least_one_second)]
    pub handshake_timeout_secs: u64,

    // Hardening round three (issue 23)
    /// WINDOW_UPDATEs on open streams and the connection a connection may send
    /// beyond one per 2 KiB of DATA sent to it and 4 per stream it opens; past
    /// it, GOAWAY too_many_window_updates (0 turns the guard off).
    #[arg(help_heading = CONNECTION_RULES, long, env = "ROUTING_WINDOW_UPDATE_BUDGET", default_value_t = WINDOW_UPDATE_BUDGET)]
    pub window_update_budget: u32,

    /// Bytes of all responses in flight at once; ListRoutes over it gets RESOURCE_EXHAUSTED.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_RESPONSE_BUDGET_BYTES", default_value_t = RESPONSE_BUDGET_BYTES)]
    pub response_budget_bytes: usize,

    /// Seconds a budgeted response may take to be sent before its connection is closed.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_SEND_DEADLINE_SECS", default_value_t = SEND_DEADLINE.as_secs(),
          value_parser = at_least_one_second)]
    pub send_deadline_secs: u64,

    /// Percent of the response budget one connection may hold; past it, its
    /// ListRoutes calls get RESOURCE_EXHAUSTED.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_RESPONSE_SHARE_PERCENT", default_value_t = RESPONSE_SHARE_PERCENT,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub response_share_percent: u8,

    /// Seconds without send progress after which a connection's responses may
    /// be closed to make room when the response budget is full.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_STALLED_HOLDER_SECS", default_value_t = STALLED_HOLDER_AFTER.as_secs(),
          value_parser = at_least_one_second)]
    pub stalled_holder_secs: u64,

    /// Seconds a request body may take to arrive; slower ones get DEADLINE_EXCEEDED.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_REQUEST_DEADLINE_SECS", default_value_t = REQUEST_DEADLINE.as_secs(),
          value_parser = at_least_one_second)]
    pub request_deadline_secs: u64,

    /// Seconds a call that sent no grpc-timeout may run before its handler is
    /// dropped and it ends DEADLINE_EXCEEDED; a client's own deadline wins (0: no bound).
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_DEFAULT_DEADLINE_SECS", default_value_t = DEFAULT_DEADLINE.as_secs())]
    pub default_deadline_secs: u64,

    /// Bytes of all partly received requests at once; over it gets RESOURCE_EXHAUSTED.
    #[arg(help_heading = BUDGETS, long, env = "ROUTING_REQUEST_BUDGET_BYTES", default_value_t = REQUEST_BUDGET_BYTES)]
    pub request_budget_bytes: usize,

    // ─── Connection lifetime (connection/age.rs), the replica (routing/replica.rs) ───
    /// Seconds after which a connection gets a graceful GOAWAY (±10 % jitter), so
    /// its client reconnects and a load balancer picks again [default: never].
    #[arg(help_heading = LIFETIME, long, env = "ROUTING_MAX_CONNECTION_AGE_SECS", value_parser = at_least_one_second)]
    pub max_connection_age_secs: Option<u64>,

    /// Seconds calls in flight may take to finish after the age's GOAWAY before the
    /// connection is closed [default: as long as they take].
    #[arg(help_heading = LIFETIME, long, env = "ROUTING_MAX_CONNECTION_AGE_GRACE_SECS")]
    pub max_connection_age_grace_secs: Option<u64>,

    /// Seconds a connection may have no call open before it gets a graceful GOAWAY
    /// [default: never].
    #[arg(help_heading = LIFETIME, long, env = "ROUTING_MAX_CONNECTION_IDLE_SECS", value_parser = at_least_one_second)]
    pub max_connection_idle_secs: Option<u64>,

    /// Seconds a connection that once had --burst-streams streams open at once may
    /// idle before a graceful GOAWAY gives back what h2 kept of the burst (0: never).
    #[arg(help_heading = LIFETIME, long, env = "ROUTING_MAX_IDLE_AFTER_BURST_SECS",
          default_value_t = MAX_IDLE_AFTER_BURST.map_or(0, |d| d.as_secs()))]
    pub max_idle_after_burst_secs: u64,

    /// Streams open at once that make a connection a burst's (see --max-idle-after-burst-secs).
    #[arg(help_heading = LIFETIME, long, env = "ROUTING_BURST_STREAMS", default_value_t = BURST_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub burst_streams: u32,

    // ─── TLS (server/src/connection/tls.rs) ─────────────────────────────
    /// Serve TLS with this certificate chain (PEM, the server's certificate
    /// first); needs --tls-key. Without both, the server speaks plaintext.
    #[arg(
        help_heading = TLS,
        long,
        env = "ROUTING_TLS_CERT",
        requires = "tls_key",
        value_name = "PATH"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1); needs --tls-cert.
    #[arg(
        help_heading = TLS,
        long,
        env = "ROUTING_TLS_KEY",
        requires = "tls_cert",
        value_name = "PATH"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// TLS handshakes computed at once; more wait for a slot within their handshake timeout.
    #[arg(help_heading = TLS, long, env = "ROUTING_TLS_HANDSHAKES_IN_FLIGHT", default_value_t = TLS_HANDSHAKES_IN_FLIGHT,
          value_parser = at_least_one_handshake)]
    pub tls_handshakes_in_flight: usize,

    /// Whether to issue TLS session tickets, so clients can resume (true or false).
    #[arg(help_heading = TLS, long, env = "ROUTING_TLS_SESSION_TICKETS", default_value_t = TLS_SESSION_TICKETS,
          action = clap::ArgAction::Set)]
    pub tls_session_tickets: bool,

    /// Address to listen on, as host:port (127.0.0.1:9180, 0.0.0.0:9000, localhost:9180).
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_LISTEN", default_value = DEFAULT_LISTEN, value_parser = listen_address)]
    pub listen: std::net::SocketAddr,

    /// Connections served at once; more are closed at once [default: the open-file
    /// limit, raised to its hard limit at start-up, minus 64].
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,

    /// Threads that serve connections, each connection on one thread for its whole
    /// life [default: the CPUs this process may use, cgroup quotas included].
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_WORKER_THREADS", value_parser = at_least_one_thread)]
    pub worker_threads: Option<usize>,

    /// Seconds to let calls in flight finish after SIGTERM or Ctrl+C.
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_DRAIN_SECS", default_value_t = DRAIN_TIMEOUT.as_secs())]
    pub drain_secs: u64,

    /// Connections the kernel may queue before they are accepted (listen backlog)
    /// [default: the kernel's net.core.somaxconn, or 4096 if it cannot be read].
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_LISTEN_BACKLOG", value_parser = clap::value_parser!(u32).range(1..))]
    pub listen_backlog: Option<u32>,

    /// Name of this replica, sent as the `routing-replica` header on every response
    /// (visible ASCII, at most 64 characters) [default: no header].
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_REPLICA", value_parser = replica_name)]
    pub replica: Option<String>,

    /// Name this replica by its host name instead (a container's or a pod's own,
    /// from /proc/sys/kernel/hostname): for the replicas of one scaled service,
    /// which share every setting.
    #[arg(help_heading = RUNTIME, long, env = "ROUTING_REPLICA_HOSTNAME", conflicts_with = "replica",
          default_value_t = false, action = clap::ArgAction::Set)]
    pub replica_hostname: bool,

    /// Serve GET /metrics (Prometheus text format: gRFC A66's call metrics and the
    /// connection metrics) on this host:port, never the gRPC port; e.g. 127.0.0.1:9464
    /// [default: off].
    #[arg(help_heading = METRICS, long, env = "ROUTING_METRICS_LISTEN", value_parser = listen_address)]
    pub metrics_listen: Option<std::net::SocketAddr>,

    // ─── Faults (routing/faults.rs), last: off unless a lesson asks ─────
    /// Milliseconds every GetQuote waits before it answers, as a slow dependency
    /// would; a deadline or a cancel drops the wait (0: no wait; at most 60000).
    #[arg(help_heading = FAULTS, long, env = "ROUTING_FAULT_DELAY_MS", default_value_t = FAULT_DELAY_MS,
          value_parser = clap::value_parser!(u64).range(0..=FAULT_DELAY_MAX_MS))]
    pub fault_delay_ms: u64,

    /// Percent of GetQuote calls that fail at once with UNAVAILABLE, as a replica in
    /// trouble would (0 to 100; 100 is an outage).
    #[arg(help_heading = FAULTS, long, env = "ROUTING_FAULT_UNAVAILABLE_PERCENT", default_value_t = FAULT_UNAVAILABLE_PERCENT,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub fault_unavailable_percent: u8,
}

/// Parses a number of seconds that must be at least 1, with a message that
/// says so (clap's own range error prints the whole `u64` range).
fn at_least_one_second(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1 second".into()),
        Ok(secs) => Ok(secs),
        Err(_) => Err(format!("{text:?} is not a whole number of seconds")),
    }
}

/// Parses the address to listen on: `host:port`, where the host may be a
/// name (`localhost:9180`, as the clients' `--target` takes); a name is
/// resolved once, and the first address it resolves to is used.
pub fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let hint = "expected host:port, e.g. 127.0.0.1:9180, 0.0.0.0:9180 or localhost:9180";
    let text = text.trim();
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let addrs = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?}: {e}; {hint}"))?;
    addrs
        .into_iter()
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address; {hint}"))
}

/// Parses a number of TLS handshake slots, at least 1.
fn at_least_one_handshake(text: &str) -> Result<usize, String> {
    at_least_one(text, "handshake")
}

/// Parses a thread count of at least 1.
fn at_least_one_thread(text: &str) -> Result<usize, String> {
    at_least_one(text, "thread")
}

/// Parses a count of at least one `unit`, with a message that says so.
fn at_least_one(text: &str, unit: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err(format!("must be at least 1 {unit}")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a whole number of {unit}s")),
    }
}

/// Parses a replica name: 1 to 64 visible ASCII characters, so it is a valid
/// header value and short enough to count by.
pub fn replica_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let visible = name.bytes().all(|b| b.is_ascii_graphic());
    if name.is_empty() || name.len() > 64 || !visible {
        return Err(format!(
            "{text:?}: a replica name is 1 to 64 visible ASCII characters, e.g. replica-a"
        ));
    }
    Ok(name.to_owned())
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

impl Config {
    pub fn keepalive_interval(&self) -> Duration {
        secs(self.keepalive_secs)
    }

    pub fn keepalive_timeout(&self) -> Duration {
        secs(self.keepalive_timeout_secs)
    }

    /// `None` when the floor is switched off (`--min-ping-interval-secs 0`).
    pub fn min_ping_interval(&self) -> Option<Duration> {
        (self.min_ping_interval_secs > 0).then(|| secs(self.min_ping_interval_secs))
    }

    /// `None` when the guard is switched off (`--control-frame-budget 0`).
    pub fn control_frame_budget(&self) -> Option<u32> {
        (self.control_frame_budget > 0).then_some(self.control_frame_budget)
    }

    pub fn send_deadline(&self) -> Duration {
        secs(self.send_deadline_secs)
    }

    /// Bytes of the response budget one connection may hold.
    pub fn response_share_bytes(&self) -> usize {
        let percent = u128::from(self.response_share_percent.clamp(1, 100));
        let share = self.response_budget_bytes as u128 * percent / 100;
        usize::try_from(share).unwrap_or(self.response_budget_bytes)
    }

    pub fn stalled_holder_after(&self) -> Duration {
        secs(self.stalled_holder_secs)
    }

    /// `None` when switched off (`--tcp-notsent-lowat 0`).
    pub fn tcp_notsent_lowat(&self) -> Option<u32> {
        (self.tcp_notsent_lowat > 0).then_some(self.tcp_notsent_lowat)
    }

    pub fn request_deadline(&self) -> Duration {
        secs(self.request_deadline_secs)
    }

    /// `None` when switched off (`--default-deadline-secs 0`).
    pub fn default_deadline(&self) -> Option<Duration> {
        (self.default_deadline_secs > 0).then(|| secs(self.default_deadline_secs))
    }

    pub fn handshake_timeout(&self) -> Duration {
        secs(self.handshake_timeout_secs)
    }

    pub fn drain_timeout(&self) -> Duration {
        secs(self.drain_secs)
    }

    /// `None` when the guard is switched off (`--window-update-budget 0`).
    pub fn window_update_budget(&self) -> Option<u32> {
        (self.window_update_budget > 0).then_some(self.window_update_budget)
    }

    /// `None`: connections have no maximum age.
    pub fn max_connection_age(&self) -> Option<Duration> {
        self.max_connection_age_secs.map(secs)
    }

    /// `None`: calls in flight after the age's GOAWAY take as long as they take.
    pub fn max_connection_age_grace(&self) -> Option<Duration> {
        self.max_connection_age_grace_secs.map(secs)
    }

    /// `None`: idle connections are never sent away.
    pub fn max_connection_idle(&self) -> Option<Duration> {
        self.max_connection_idle_secs.map(secs)
    }

    /// `None`: a connection is never sent away for idling after a burst.
    pub fn max_idle_after_burst(&self) -> Option<Duration> {
        (self.max_idle_after_burst_secs > 0).then(|| secs(self.max_idle_after_burst_secs))
    }
}

impl Default for Config {
    /// The chapter's settings, as `routing-server` runs with no flags.
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("DEFAULT_LISTEN is a valid socket address"),
            max_send_bytes: MAX_SEND_MESSAGE_BYTES,
            max_recv_bytes: MAX_RECV_MESSAGE_BYTES,
            keepalive_secs: KEEPALIVE_INTERVAL.as_secs(),
            keepalive_timeout_secs: KEEPALIVE_TIMEOUT.as_secs(),
            min_ping_interval_secs: MIN_PING_INTERVAL.as_secs(),
            permit_pings_without_calls: PERMIT_PINGS_WITHOUT_CALLS,
            control_frame_budget: CONTROL_FRAME_BUDGET,
            max_concurrent_streams: MAX_CONCURRENT_STREAMS,
            max_local_error_resets: MAX_LOCAL_ERROR_RESETS,
            response_budget_bytes: RESPONSE_BUDGET_BYTES,
            send_deadline_secs: SEND_DEADLINE.as_secs(),
            response_share_percent: RESPONSE_SHARE_PERCENT,
            stalled_holder_secs: STALLED_HOLDER_AFTER.as_secs(),
            tcp_notsent_lowat: TCP_NOTSENT_LOWAT,
            request_deadline_secs: REQUEST_DEADLINE.as_secs(),
            default_deadline_secs: DEFAULT_DEADLINE.as_secs(),
            request_budget_bytes: REQUEST_BUDGET_BYTES,
            max_connections: None,
            handshake_timeout_secs: HANDSHAKE_TIMEOUT.as_secs(),
            worker_threads: WORKER_THREADS,
            drain_secs: DRAIN_TIMEOUT.as_secs(),
            no_gzip: false,
            filler: Filler::Repeated,
            // Hardening round three (issue 23)
            window_update_budget: WINDOW_UPDATE_BUDGET,
            listen_backlog: LISTEN_BACKLOG,
            // TLS (connection/tls.rs)
            tls_cert: None,
            tls_key: None,
            tls_handshakes_in_flight: TLS_HANDSHAKES_IN_FLIGHT,
            tls_session_tickets: TLS_SESSION_TICKETS,
            // Connection lifetime (connection/age.rs) and the replica's name (routing/replica.rs)
            max_connection_age_secs: MAX_CONNECTION_AGE.map(|d| d.as_secs()),
            max_connection_age_grace_secs: MAX_CONNECTION_AGE_GRACE.map(|d| d.as_secs()),
            max_connection_idle_secs: MAX_CONNECTION_IDLE.map(|d| d.as_secs()),
            max_idle_after_burst_secs: MAX_IDLE_AFTER_BURST.map_or(0, |d| d.as_secs()),
            burst_streams: BURST_STREAMS,
            replica: None,
            replica_hostname: false,
            // Metrics (metrics/): off unless asked for
            metrics_listen: None,

            // Faults (routing/faults.rs): off
            fault_delay_ms: FAULT_DELAY_MS,
            fault_unavailable_percent: FAULT_UNAVAILABLE_PERCENT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_seconds_is_refused_with_a_plain_message() {
        assert_eq!(
            at_least_one_second("0"),
            Err("must be at least 1 second".into())
        );
        assert_eq!(at_least_one_second("7"), Ok(7));
        assert!(at_least_one_second("-1").is_err_and(|e| e.contains("whole number")));
        assert_eq!(
            at_least_one_thread("0"),
            Err("must be at least 1 thread".into())
        );
        assert_eq!(at_least_one_thread("4"), Ok(4));
    }

    /// A replica name must be a header value worth counting by.
    #[test]
    fn replica_names_are_short_visible_ascii() {
        assert_eq!(replica_name(" replica-a "), Ok("replica-a".into()));
        for bad in ["", "two words", "é", &"x".repeat(65)] {
            let err = replica_name(bad).expect_err(bad);
            assert!(err.contains("1 to 64 visible ASCII"), "{bad}: {err}");
        }
    }

    /// `--listen` takes what `--target` takes: an address, or a host name
    /// with a port; anything else is refused with an example.
    #[test]
    fn listen_takes_host_names_and_explains_bad_input() {
        // Given an address or a name, then it is the socket address to bind.
        assert_eq!(
            listen_address("0.0.0.0:9000"),
            Ok("0.0.0.0:9000".parse().expect("address"))
        );
        let local = listen_address("localhost:9180").expect("localhost resolves");
        assert!(local.ip().is_loopback() && local.port() == 9180, "{local}");
        // Given no port or a port out of range, then the error shows the form.
        for bad in ["localhost", "127.0.0.1", ":9180", "localhost:99999"] {
            let err = listen_address(bad).expect_err(bad);
            assert!(err.contains("e.g. 127.0.0.1:9180"), "{bad}: {err}");
        }
    }
}
