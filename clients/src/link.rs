//! An emulated network link, so each lever can be shown where it pays: a
//! one-way delay in each direction, a rate cap behind a bounded queue, a
//! connection set-up that costs one round trip, and a NAT that forgets idle
//! flows.
//!
//! The model is grpc-go's `benchmark/latency` package (`Network{Kbps,
//! Latency, MTU}` with the presets `LAN`, `WAN` and `Longhaul`): it wraps a
//! connection rather than running a separate proxy, and it delays connection
//! set-up as well as data. grpc-go's `Latency` is one-way ("One-way latency
//! (sending)"), so its `WAN` has a 60 ms round trip.
//!
//! # The physics, direction by direction
//!
//! Bytes that enter the link are cut into packets of at most
//! [`Link::packet_bytes`]. The sender of each direction (a *transmitter*)
//! puts one packet on the wire at a time, at [`Link::rate_bit_s`]: packet
//! `i` is sent by `max(now, end of packet i-1) + size / rate`. It arrives
//! [`Link::one_way_delay`] after that. Packets waiting for the transmitter
//! form a queue of at most [`Link::queue_bytes`]: when it is full, the link
//! stops taking bytes, so the sender's TCP window and HTTP/2 flow control
//! feel the back-pressure, as they would behind a real bottleneck. (A real
//! router would drop the packet and TCP would resend it; here nothing is
//! lost, and the effect on the sender, waiting, is the same.)
//!
//! Every connection of one [`SharedLink`] shares its two transmitters, as
//! flows on one real link share its rate.
//!
//! # What it holds (the bound)
//!
//! Per connection and direction, the bytes that entered the link and have
//! not yet been delivered are at most `queue_bytes + rate × one_way_delay +
//! 2 × packet_bytes` (the queue, the bytes on the wire, one packet being
//! read and one being written), enforced by a semaphore. Without a rate, the
//! bytes on the wire are capped at [`UNRATED_IN_FLIGHT_BYTES`] instead. On
//! top of that, the application side of each connection has an in-memory
//! pipe of [`APP_BUFFER_BYTES`] per direction, like a socket buffer.

use std::{
    fmt, io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use serde::Serialize;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf},
    sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot},
    time::{Instant, sleep, sleep_until},
};

/// Queue in front of each transmitter: 64 KiB, a small router buffer. At
/// 20 Mbit/s it holds 26 ms of traffic, so a small call behind a large
/// response waits at most that long for its turn.
pub const QUEUE_BYTES: usize = 64 * 1024;
/// Largest packet on `lan` and `wan`, and with explicit settings: 1500
/// bytes, an Ethernet MTU (grpc-go's value).
pub const ETHERNET_MTU: usize = 1500;
/// Largest packet on `longhaul`: 9000 bytes, a jumbo frame (grpc-go's value).
pub const JUMBO_MTU: usize = 9000;
/// Without a rate, the bytes on the wire per direction are capped at 16 MiB,
/// the largest HTTP/2 window tonic's adaptive window grows to, so no flow
/// that respects a window ever reaches the cap.
pub const UNRATED_IN_FLIGHT_BYTES: usize = 16 * 1024 * 1024;
/// The in-memory pipe between the application and the link, per direction:
/// 64 KiB, like a socket buffer.
pub const APP_BUFFER_BYTES: usize = 64 * 1024;
/// Packets that arrive together are written in one go, up to 64 KiB.
const COALESCE_BYTES: usize = 64 * 1024;

/// The settings of a link. Plain data: [`SharedLink::new`] puts one to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Time each packet spends crossing the link, in each direction, after
    /// it has been sent. The round trip is twice this. Zero: no delay.
    pub one_way_delay: Duration,
    /// Bits per second each direction sends at, and so the fastest any
    /// transfer can go (1 Mbit/s is 1,000,000 bit/s). `None`: no limit.
    pub rate_bit_s: Option<u64>,
    /// Bytes that may wait for the transmitter, per direction; when they are
    /// all taken, the link stops taking bytes (back-pressure). Only matters
    /// with a rate.
    pub queue_bytes: usize,
    /// Largest packet, in bytes: bytes are paced and delivered in packets of
    /// at most this size (grpc-go's MTU). Must be at least 1.
    pub packet_bytes: usize,
    /// NAT idle timeout: a flow that carries no byte, in either direction,
    /// for this long is forgotten, and every later byte of it is dropped,
    /// both ways, without closing anything. `None`: flows are never forgotten.
    pub nat_idle: Option<Duration>,
}

impl Link {
    /// No link at all: connections are not wrapped (grpc-go's `Local`).
    pub const LOCAL: Self = Self {
        one_way_delay: Duration::ZERO,
        rate_bit_s: None,
        queue_bytes: QUEUE_BYTES,
        packet_bytes: ETHERNET_MTU,
        nat_idle: None,
    };
    /// A local area network: 100 Mbit/s, 2 ms one way (grpc-go's `LAN`).
    pub const LAN: Self = Self::new(Duration::from_millis(2), 100_000_000, ETHERNET_MTU);
    /// A wide area network: 20 Mbit/s, 30 ms one way, 60 ms round trip
    /// (grpc-go's `WAN`).
    pub const WAN: Self = Self::new(Duration::from_millis(30), 20_000_000, ETHERNET_MTU);
    /// A long, fast link: 1 Gbit/s, 200 ms one way, 400 ms round trip
    /// (grpc-go's `Longhaul`).
    pub const LONGHAUL: Self = Self::new(Duration::from_millis(200), 1_000_000_000, JUMBO_MTU);

    const fn new(one_way_delay: Duration, rate_bit_s: u64, packet_bytes: usize) -> Self {
        Self {
            one_way_delay,
            rate_bit_s: Some(rate_bit_s),
            queue_bytes: QUEUE_BYTES,
            packet_bytes,
            nat_idle: None,
        }
    }

    /// True when there is nothing to emulate: no delay, no rate, no NAT.
    pub fn is_local(&self) -> bool {
        self.one_way_delay.is_zero() && self.rate_bit_s.is_none() && self.nat_idle.is_none()
    }

    /// The round trip: twice the one-way delay.
    pub fn rtt(&self) -> Duration {
        2 * self.one_way_delay
    }

    /// How long the transmitter takes to send `bytes` at the rate (zero
    /// without one): the `bytes ÷ rate` of a transfer.
    pub fn transmission_time(&self, bytes: u64) -> Duration {
        match self.rate_bit_s {
            Some(rate) if rate > 0 => {
                let nanos = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(rate);
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            _ => Duration::ZERO,
        }
    }

    /// The most bytes one direction of one connection holds between entering
    /// the link and being delivered: the queue, the bytes on the wire (rate ×
    /// one-way delay, or [`UNRATED_IN_FLIGHT_BYTES`] without a rate), one
    /// packet being read and one being written.
    pub fn max_held_bytes(&self) -> usize {
        let on_the_wire = match self.rate_bit_s {
            Some(rate) => {
                let bytes = u128::from(rate) * self.one_way_delay.as_nanos() / 8 / 1_000_000_000;
                usize::try_from(bytes).unwrap_or(usize::MAX)
            }
            None if self.one_way_delay.is_zero() => 0,
            None => UNRATED_IN_FLIGHT_BYTES,
        };
        self.queue_bytes
            .saturating_add(on_the_wire)
            .saturating_add(2 * self.packet_bytes.max(1))
    }

    /// How long a full queue takes to drain.
    fn queue_time(&self) -> Duration {
        self.transmission_time(self.queue_bytes as u64)
    }
}

/// The presets, by grpc-go's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// No link: straight to the server, as before.
    #[default]
    Local,
    /// 100 Mbit/s, 2 ms one way (4 ms round trip).
    Lan,
    /// 20 Mbit/s, 30 ms one way (60 ms round trip).
    Wan,
    /// 1 Gbit/s, 200 ms one way (400 ms round trip).
    Longhaul,
}

impl Preset {
    /// The preset's settings.
    pub fn link(self) -> Link {
        match self {
            Self::Local => Link::LOCAL,
            Self::Lan => Link::LAN,
            Self::Wan => Link::WAN,
            Self::Longhaul => Link::LONGHAUL,
        }
    }
}

/// The link flags every client (and `routing-link`) takes: a preset, and
/// explicit settings that override it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LinkArgs {
    /// Emulated link between this process and the server.
    #[arg(long = "link", visible_alias = "preset", value_enum, default_value_t = Preset::Local)]
    pub preset: Preset,
    /// Round-trip time of the link in milliseconds (half of it each way);
    /// overrides the preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub rtt_ms: Option<u64>,
    /// Rate of the link in Mbit/s (1 Mbit/s = 1,000,000 bit/s), each way;
    /// overrides the preset's.
    #[arg(long, value_parser = positive_mbit)]
    pub mbit: Option<f64>,
    /// Queue in front of the rate, in KiB per direction (default 64).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub queue_kib: Option<u64>,
    /// NAT idle timeout: forget a flow after this many seconds without a
    /// byte in either direction, and drop its later bytes (default: never).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub nat_idle_secs: Option<u64>,
}

/// Parses a rate in Mbit/s: above 0, at most 100,000 (100 Gbit/s).
fn positive_mbit(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(mbit) if mbit > 0.0 && mbit <= 100_000.0 => Ok(mbit),
        Ok(_) => Err("must be above 0 and at most 100000 (Mbit/s)".into()),
        Err(_) => Err(format!("{text:?} is not a number of Mbit/s")),
    }
}

impl LinkArgs {
    /// The preset with the explicit settings applied.
    pub fn link(&self) -> Link {
        let mut link = self.preset.link();
        if let Some(rtt_ms) = self.rtt_ms {
            link.one_way_delay = Duration::from_micros(rtt_ms * 1000 / 2);
        }
        if let Some(mbit) = self.mbit {
            link.rate_bit_s = Some((mbit * 1e6).round() as u64);
        }
        if let Some(kib) = self.queue_kib {
            link.queue_bytes = usize::try_from(kib * 1024).unwrap_or(usize::MAX);
        }
        if let Some(secs) = self.nat_idle_secs {
            link.nat_idle = Some(Duration::from_secs(secs));
        }
        link
    }

    /// What a client puts in its JSON line, or `None` when there is no link
    /// (the line then stays as it always was).
    pub fn report(&self) -> Option<LinkReport> {
        let link = self.link();
        if link.is_local() {
            return None;
        }
        Some(LinkReport {
            preset: (self.preset != Preset::Local).then_some(self.preset),
            rtt_ms: link.rtt().as_secs_f64() * 1e3,
            mbit: link.rate_bit_s.map(|rate| rate as f64 / 1e6),
            queue_kib: (link.queue_bytes / 1024) as u64,
            nat_idle_s: link.nat_idle.map(|idle| idle.as_secs()),
        })
    }
}

/// The link as a client reports it: `{"preset":"wan","rtt_ms":60.0,"mbit":20.0,"queue_kib":64}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkReport {
    /// The preset the settings started from; absent for `local` (explicit
    /// settings only). The numbers after it are what the link does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Round trip, in milliseconds.
    pub rtt_ms: f64,
    /// Rate each way, in Mbit/s; null without a limit.
    pub mbit: Option<f64>,
    /// Queue per direction, in KiB.
    pub queue_kib: u64,
    /// NAT idle timeout, in seconds; absent without a NAT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nat_idle_s: Option<u64>,
}

/// A link in use: its settings, and the two transmitters that every
/// connection over it shares. Clones share them too.
#[derive(Debug, Clone)]
pub struct SharedLink {
    link: Link,
    /// Sends what the wrapped side's user writes (client to server).
    up: Arc<Mutex<Transmitter>>,
    /// Sends what arrives from the wrapped connection (server to client).
    down: Arc<Mutex<Transmitter>>,
}

/// One direction's sender: it puts one packet on the wire at a time.
#[derive(Debug)]
struct Transmitter {
    /// When the last packet taken will have been sent.
    busy_until: Instant,
}

impl Transmitter {
    /// Takes a packet of `bytes` now; returns when it will have been sent.
    fn send(&mut self, bytes: usize, now: Instant, link: &Link) -> Instant {
        let start = self.busy_until.max(now);
        self.busy_until = start + link.transmission_time(bytes as u64);
        self.busy_until
    }
}

impl SharedLink {
    /// Puts `link` to use, with idle transmitters.
    pub fn new(link: Link) -> Self {
        let idle = || {
            Arc::new(Mutex::new(Transmitter {
                busy_until: Instant::now(),
            }))
        };
        Self {
            link,
            up: idle(),
            down: idle(),
        }
    }

    /// The settings.
    pub fn link(&self) -> Link {
        self.link
    }

    /// A connection that has just been opened: waits one round trip, what a
    /// TCP handshake costs before the first byte can be sent, then wraps it.
    pub async fn connect<S>(&self, opened: S) -> LinkedStream
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        sleep(self.link.rtt()).await;
        self.wrap(opened)
    }

    /// Routes `inner` through the link, both ways, from now on. `inner` is
    /// the far side (the server); the returned stream is the near side.
    ///
    /// Two tasks, one per direction, run on the current tokio runtime; they
    /// end when the connection closes, or when the returned stream is
    /// dropped. A forgotten flow still passes a close on: the model drops
    /// bytes, not the end of the connection.
    pub fn wrap<S>(&self, inner: S) -> LinkedStream
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (app, ours) = tokio::io::duplex(APP_BUFFER_BYTES);
        let (ours_read, ours_write) = tokio::io::split(ours);
        let (inner_read, inner_write) = tokio::io::split(inner);
        let nat = Arc::new(Mutex::new(Nat::new(self.link.nat_idle)));
        let (dropped, app_gone) = oneshot::channel();
        tokio::spawn(carry(
            ours_read,
            inner_write,
            Direction::new(&self.link, &self.up, &nat),
            None,
        ));
        tokio::spawn(carry(
            inner_read,
            ours_write,
            Direction::new(&self.link, &self.down, &nat),
            Some(app_gone),
        ));
        LinkedStream {
            app,
            _dropped: dropped,
        }
    }
}

/// The NAT entry of one flow (one connection).
#[derive(Debug)]
struct Nat {
    idle_timeout: Option<Duration>,
    last_byte: Instant,
    forgotten: bool,
}

impl Nat {
    fn new(idle_timeout: Option<Duration>) -> Self {
        Self {
            idle_timeout,
            last_byte: Instant::now(),
            forgotten: false,
        }
    }

    /// A packet reaches the NAT at `now`, either way: true if it passes.
    /// Once the flow has been idle for the timeout, it is forgotten for good.
    fn pass(&mut self, now: Instant) -> bool {
        if let Some(timeout) = self.idle_timeout
            && now.duration_since(self.last_byte) >= timeout
            && !self.forgotten
        {
            tracing::debug!(idle = ?now.duration_since(self.last_byte), "NAT forgot an idle flow");
            self.forgotten = true;
        }
        self.last_byte = now;
        !self.forgotten
    }
}

/// What one direction of one connection needs.
struct Direction {
    link: Link,
    transmitter: Arc<Mutex<Transmitter>>,
    nat: Arc<Mutex<Nat>>,
    /// Bytes this direction may hold: [`Link::max_held_bytes`].
    held: Arc<Semaphore>,
}

impl Direction {
    fn new(link: &Link, transmitter: &Arc<Mutex<Transmitter>>, nat: &Arc<Mutex<Nat>>) -> Self {
        Self {
            link: *link,
            transmitter: transmitter.clone(),
            nat: nat.clone(),
            held: Arc::new(Semaphore::new(link.max_held_bytes())),
        }
    }
}

/// A packet on its way, with its share of the direction's bound.
struct Packet {
    arrives: Instant,
    bytes: Vec<u8>,
    held: OwnedSemaphorePermit,
}

/// Carries one direction: reads packets from `from` into the link, and
/// delivers each to `to` when it arrives. Ends when `from` closes (after the
/// packets on their way are delivered and `to` is shut down), when `to`
/// fails, or when `app_gone` fires (the near side was dropped).
async fn carry<R, W>(from: R, to: W, direction: Direction, app_gone: Option<oneshot::Receiver<()>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (packets, arriving) = mpsc::unbounded_channel();
    let sending = send(from, packets, &direction);
    let delivering = deliver(arriving, to);
    match app_gone {
        Some(app_gone) => {
            tokio::select! {
                _ = app_gone => {}
                _ = async { tokio::join!(sending, delivering) } => {}
            }
        }
        None => {
            tokio::join!(sending, delivering);
        }
    }
}

/// The sending half of a direction: queue, NAT and transmitter.
async fn send<R: AsyncRead + Unpin>(
    mut from: R,
    packets: mpsc::UnboundedSender<Packet>,
    direction: &Direction,
) {
    let link = &direction.link;
    let mut buf = vec![0u8; link.packet_bytes.max(1)];
    loop {
        // The queue: take the next packet only once the queue has room.
        if link.rate_bit_s.is_some() {
            let busy_until = lock(&direction.transmitter).busy_until;
            if let Some(room_at) = busy_until.checked_sub(link.queue_time())
                && room_at > Instant::now()
            {
                sleep_until(room_at).await;
            }
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return, // dropping `packets` lets delivery finish
            Ok(n) => n,
        };
        if !lock(&direction.nat).pass(Instant::now()) {
            continue; // a forgotten flow: dropped, and nothing is closed
        }
        let Ok(held) = direction.held.clone().acquire_many_owned(n as u32).await else {
            return;
        };
        let sent = lock(&direction.transmitter).send(n, Instant::now(), link);
        let packet = Packet {
            arrives: sent + link.one_way_delay,
            bytes: buf[..n].to_vec(),
            held,
        };
        if packets.send(packet).is_err() {
            return; // delivery has stopped: the other end is gone
        }
    }
}

/// The receiving half of a direction: writes each packet when it arrives,
/// and those that arrive together in one go.
async fn deliver<W: AsyncWrite + Unpin>(mut arriving: mpsc::UnboundedReceiver<Packet>, mut to: W) {
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(packet) => packet,
            None => match arriving.recv().await {
                Some(packet) => packet,
                None => break,
            },
        };
        if first.arrives > Instant::now() {
            sleep_until(first.arrives).await;
        }
        let now = Instant::now();
        let (mut bytes, mut held) = (first.bytes, first.held);
        while bytes.len() < COALESCE_BYTES {
            match arriving.try_recv() {
                Ok(packet) if packet.arrives <= now => {
                    bytes.extend_from_slice(&packet.bytes);
                    held.merge(packet.held);
                }
                Ok(later) => {
                    next = Some(later);
                    break;
                }
                Err(_) => break,
            }
        }
        if to.write_all(&bytes).await.is_err() {
            return;
        }
        drop(held);
    }
    // The far end closed: pass the close on, after the last packet.
    let _ = to.shutdown().await;
}

/// The state behind these locks stays consistent at every await-free step,
/// so a panicked holder leaves nothing half-done.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The near side of a connection through a link: read and write it like
/// the connection itself. Dropping it closes the connection (after the
/// bytes on their way have arrived).
pub struct LinkedStream {
    app: DuplexStream,
    /// Dropped with the stream: tells the tasks that nobody reads any more.
    _dropped: oneshot::Sender<()>,
}

impl fmt::Debug for LinkedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkedStream").finish_non_exhaustive()
    }
}

impl AsyncRead for LinkedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.app).poll_read(cx, buf)
    }
}

impl AsyncWrite for LinkedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.app).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.app).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.app).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::duplex;

    use super::*;

    /// 8 Mbit/s is 1,000,000 bytes per second: easy arithmetic.
    const MEGABYTE_PER_S: u64 = 8_000_000;
    /// The paused clock's timers fire on whole milliseconds, so each delivery
    /// can be up to 1 ms late; the expected times allow that much per hop.
    const TICK: Duration = Duration::from_millis(1);

    fn link(one_way_ms: u64, rate_bit_s: Option<u64>) -> Link {
        Link {
            one_way_delay: Duration::from_millis(one_way_ms),
            rate_bit_s,
            ..Link::LOCAL
        }
    }

    /// A near stream through `link`, and the far end to play the server with.
    fn wrapped(link: &SharedLink) -> (LinkedStream, DuplexStream) {
        let (near, far) = duplex(APP_BUFFER_BYTES);
        (link.wrap(near), far)
    }

    /// Sends `message` one way and reads it at the other end.
    async fn one_way(
        from: &mut (impl AsyncWrite + Unpin),
        to: &mut (impl AsyncRead + Unpin),
        message: &[u8],
    ) {
        from.write_all(message).await.expect("write");
        let mut got = vec![0; message.len()];
        to.read_exact(&mut got).await.expect("read");
        assert_eq!(got, message);
    }

    /// A round trip: a request to the far end and its answer back.
    async fn round_trip(near: &mut LinkedStream, far: &mut DuplexStream) {
        one_way(near, far, b"ping").await;
        one_way(far, near, b"pong").await;
    }

    fn assert_between(elapsed: Duration, expected: Duration, slack: Duration) {
        assert!(
            elapsed >= expected && elapsed <= expected + slack,
            "took {elapsed:?}, expected {expected:?} (+ up to {slack:?})"
        );
    }

    /// The presets carry grpc-go's numbers, with its one-way latency: a
    /// `wan` round trip is 60 ms.
    #[test]
    fn presets_are_grpc_gos() {
        assert!(Link::LOCAL.is_local());
        assert_eq!(Link::LAN.rtt(), Duration::from_millis(4));
        assert_eq!(Link::LAN.rate_bit_s, Some(100_000_000));
        assert_eq!(Link::WAN.rtt(), Duration::from_millis(60));
        assert_eq!(Link::WAN.rate_bit_s, Some(20_000_000));
        assert_eq!(Link::LONGHAUL.rtt(), Duration::from_millis(400));
        assert_eq!(Link::LONGHAUL.rate_bit_s, Some(1_000_000_000));
        // The chapter's 5.0 MB catalog takes 2 s at 20 Mbit/s.
        assert_eq!(
            Link::WAN.transmission_time(5_000_000),
            Duration::from_secs(2)
        );
    }

    /// Explicit flags override the preset, and the report gives the numbers
    /// in effect after the preset's name; without a link, there is nothing
    /// to report.
    #[test]
    fn flags_override_the_preset_and_the_report_says_so() {
        let wan = LinkArgs {
            preset: Preset::Wan,
            ..LinkArgs::default()
        };
        let report = wan.report().expect("a link");
        assert_eq!(report.preset, Some(Preset::Wan));
        assert_eq!((report.rtt_ms, report.mbit), (60.0, Some(20.0)));
        assert_eq!(
            serde_json::to_string(&report).expect("json"),
            r#"{"preset":"wan","rtt_ms":60.0,"mbit":20.0,"queue_kib":64}"#
        );

        let natted = LinkArgs {
            nat_idle_secs: Some(6),
            mbit: Some(1.5),
            ..wan
        };
        let link = natted.link();
        assert_eq!(link.rate_bit_s, Some(1_500_000));
        assert_eq!(link.nat_idle, Some(Duration::from_secs(6)));
        let report = natted.report().expect("a link");
        assert_eq!((report.preset, report.mbit), (Some(Preset::Wan), Some(1.5)));
        assert_eq!(report.nat_idle_s, Some(6));

        let explicit = LinkArgs {
            rtt_ms: Some(100),
            ..LinkArgs::default()
        };
        let report = explicit.report().expect("a link");
        assert_eq!(
            (report.preset, report.rtt_ms, report.mbit),
            (None, 100.0, None)
        );
        assert_eq!(LinkArgs::default().report(), None);
    }

    /// Given 8 Mbit/s and no delay, when 1,000,000 bytes cross the link,
    /// then the transfer takes size ÷ rate = 1 s, give or take one packet.
    #[tokio::test(start_paused = true)]
    async fn a_paced_transfer_takes_size_over_rate() {
        let link = SharedLink::new(link(0, Some(MEGABYTE_PER_S)));
        let (mut near, mut far) = wrapped(&link);
        let payload = vec![7u8; 1_000_000];
        let started = Instant::now();

        let (_, received) = tokio::join!(near.write_all(&payload), async {
            let mut got = vec![0; payload.len()];
            far.read_exact(&mut got).await.map(|_| got)
        });

        assert_eq!(received.expect("all bytes arrive"), payload);
        let one_packet = link.link().transmission_time(ETHERNET_MTU as u64);
        assert_between(started.elapsed(), Duration::from_secs(1), one_packet + TICK);
    }

    /// Given two connections over one link, when each sends 500,000 bytes at
    /// once, then they share the rate: both finish after 1,000,000 ÷ rate.
    #[tokio::test(start_paused = true)]
    async fn connections_share_the_rate() {
        let link = SharedLink::new(link(0, Some(MEGABYTE_PER_S)));
        let started = Instant::now();

        let transfer = || {
            let (mut near, mut far) = wrapped(&link);
            async move {
                let payload = vec![1u8; 500_000];
                let mut got = vec![0; payload.len()];
                let (sent, read) = tokio::join!(near.write_all(&payload), far.read_exact(&mut got));
                sent.and(read.map(drop)).map(|()| Instant::now())
            }
        };
        let (first, second) = tokio::join!(transfer(), transfer());

        let last = first.expect("first").max(second.expect("second"));
        let one_packet = link.link().transmission_time(ETHERNET_MTU as u64);
        assert_between(last - started, Duration::from_secs(1), one_packet + TICK);
    }

    /// Given a 25 ms one-way delay and no rate limit, when four small
    /// messages go back and forth, then each round trip costs 2 × 25 ms.
    #[tokio::test(start_paused = true)]
    async fn latency_adds_up_per_round_trip() {
        let link = SharedLink::new(link(25, None));
        let (mut near, mut far) = wrapped(&link);
        let started = Instant::now();

        for _ in 0..4 {
            round_trip(&mut near, &mut far).await;
        }

        let rtt = link.link().rtt();
        assert_eq!(rtt, Duration::from_millis(50));
        assert_between(started.elapsed(), 4 * rtt, 8 * TICK);
    }

    /// Given a 30 ms one-way delay, when a connection is opened through the
    /// link and makes one round trip, then the set-up cost one round trip
    /// and the whole took two.
    #[tokio::test(start_paused = true)]
    async fn set_up_costs_one_round_trip() {
        let link = SharedLink::new(link(30, None));
        let (near, mut far) = duplex(APP_BUFFER_BYTES);
        let started = Instant::now();

        let mut near = link.connect(near).await;
        let set_up = started.elapsed();
        round_trip(&mut near, &mut far).await;

        assert_between(set_up, Duration::from_millis(60), TICK);
        assert_between(started.elapsed(), Duration::from_millis(120), 3 * TICK);
    }

    /// Given a NAT that forgets flows idle for 6 s: a flow with a round trip
    /// every 5 s survives 15 s; after 7 s without a byte it is forgotten.
    /// Then bytes are dropped both ways and nothing is closed: writes still
    /// succeed, and reads neither end nor return anything.
    #[tokio::test(start_paused = true)]
    async fn the_nat_forgets_an_idle_flow_and_keeps_a_busy_one() {
        let natted = Link {
            nat_idle: Some(Duration::from_secs(6)),
            ..link(10, None)
        };
        let link = SharedLink::new(natted);
        let (mut near, mut far) = wrapped(&link);
        let quiet = Duration::from_secs(30);

        // Given traffic every 5 s, when 15 s pass, then the flow is kept.
        for _ in 0..3 {
            round_trip(&mut near, &mut far).await;
            sleep(Duration::from_secs(5)).await;
        }
        round_trip(&mut near, &mut far).await;

        // When the flow is idle for 7 s, then the next bytes go nowhere.
        sleep(Duration::from_secs(7)).await;
        near.write_all(b"hello?").await.expect("the write succeeds");
        let mut byte = [0u8; 1];
        let heard = tokio::time::timeout(quiet, far.read(&mut byte)).await;
        assert!(heard.is_err(), "the far end heard {heard:?}");

        // And the other way too, and the near end is not closed either.
        far.write_all(b"anyone?").await.expect("the write succeeds");
        let heard = tokio::time::timeout(quiet, near.read(&mut byte)).await;
        assert!(heard.is_err(), "the near end heard {heard:?}");
    }

    /// Given a far end that never reads, when the near end writes as much as
    /// it can, then it is stopped after a bounded number of bytes: the pipe
    /// to the link, what the link may hold, one packet in hand, and the far
    /// end's own buffer. Nothing is buffered without bound.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_reader_stops_the_writer_after_a_bounded_amount() {
        let settings = Link {
            queue_bytes: 16 * 1024,
            ..link(10, Some(MEGABYTE_PER_S))
        };
        let link = SharedLink::new(settings);
        let far_buffer = 4096;
        let (near, _far) = duplex(far_buffer);
        let mut near = link.wrap(near);

        let mut accepted = 0usize;
        let chunk = [0u8; 1024];
        let stalled = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                near.write_all(&chunk).await.expect("write");
                accepted += chunk.len();
            }
        })
        .await;

        assert!(stalled.is_err(), "the writer was stopped");
        let bound =
            APP_BUFFER_BYTES + settings.max_held_bytes() + settings.packet_bytes + far_buffer;
        assert!(
            accepted <= bound,
            "{accepted} bytes accepted, bound {bound}"
        );
        assert!(accepted > far_buffer, "bytes flowed first: {accepted}");
    }

    /// Given a real TCP connection on loopback through a 20 Mbit/s link with
    /// 15 ms each way, when 1,000,000 bytes go out and the far end answers
    /// one byte once it has them all, then the whole takes the physics:
    /// set-up (30 ms) + 1,000,000 × 8 ÷ 20 Mbit/s (400 ms) + the last
    /// packet's and the answer's trips (15 + 15 ms) = 460 ms. This runs on
    /// the real clock: it cannot be faster than that, and a busy machine
    /// only makes it slower, so the tolerance is one-sided and generous:
    /// at most 50% plus 500 ms above the physics.
    #[tokio::test]
    async fn a_real_transfer_matches_the_physics() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let size = 1_000_000usize;
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut got = vec![0; size];
            socket.read_exact(&mut got).await.expect("all bytes");
            socket.write_all(b"!").await.expect("answer");
        });
        let settings = link(15, Some(20_000_000));
        let link = SharedLink::new(settings);
        let started = std::time::Instant::now();

        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut near = link.connect(tcp).await;
        near.write_all(&vec![3u8; size]).await.expect("write");
        let mut answer = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(10), near.read_exact(&mut answer))
            .await
            .expect("the answer arrives in time")
            .expect("read");

        let elapsed = started.elapsed();
        let physics = 2 * settings.rtt() + settings.transmission_time(size as u64);
        assert_eq!(physics, Duration::from_millis(460));
        assert!(
            elapsed >= physics && elapsed <= physics * 3 / 2 + Duration::from_millis(500),
            "took {elapsed:?}, physics says {physics:?}"
        );
    }
}
