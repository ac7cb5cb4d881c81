//! Write coalescing for bulk responses.
//!
//! h2 writes each DATA frame as its own `writev` and flushes after every
//! one: with a client's usual 16 KiB frame size, a 5 MB ListRoutes page is
//! about 310 system calls and as many TCP segments. grpc-go writes through
//! a 32 KiB buffer, so half as many. [`Coalesce`] gathers full-size frames
//! in a buffer of [`COALESCE_BYTES`] and writes them in one system call.
//!
//! The catch is flushing. h2 flushes after every large frame, so this
//! wrapper treats a flush right after a large write as "more may follow":
//! it keeps the bytes, wakes its task, and only writes them when the task
//! runs again and flushes with nothing new written, or when the buffer is
//! full, or on shutdown. Small writes (GetQuote answers, control frames)
//! pass straight through, so they are never delayed.
//!
//! The buffer's memory is held only while a burst is being gathered: an
//! empty buffer is freed, whichever path emptied it (the flush that ends a
//! burst, a frame too large to gather, shutdown). So an idle connection
//! holds no write buffer, however large its last response was.
//!
//! Gathering means copying, since h2 lends each frame as a borrowed slice.
//! Except for slices of memory the server shares with the connection and
//! never changes ([`crate::connection::shared_memory`], the catalog's
//! carriers that an identity page is sent from): those are kept as
//! references, and the burst goes out as one `writev` of the copied frame
//! headers and the shared payloads, in order. So the kernel's copy into the
//! socket is the only one most of a carrier's bytes get. (A slice under
//! [`COALESCE_MIN_WRITE`] is copied all the same: see that knob.)

use std::{
    collections::VecDeque,
    io,
    ops::Range,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::connection::shared_memory::SharedMemory;
use crate::knobs::{COALESCE_BYTES, COALESCE_MAX_SLICES, COALESCE_MIN_WRITE};

/// An IO whose large writes are gathered into fewer system calls.
#[derive(Debug)]
pub struct Coalesce<T> {
    inner: T,
    /// Memory whose slices are kept by reference, not copied (`None`:
    /// everything gathered is copied).
    shared: Option<Arc<SharedMemory>>,
    /// The burst being gathered; `None` between bursts, so an idle
    /// connection holds this pointer and nothing else.
    burst: Option<Box<Burst>>,
    /// A write arrived since the last deferred flush.
    wrote: bool,
}

/// What a burst gathers, in order, until it is written.
#[derive(Debug, Default)]
struct Burst {
    parts: VecDeque<Part>,
    /// The copied bytes that [`Part::Copied`] ranges point into.
    buf: Vec<u8>,
    /// Bytes gathered and not yet written, copied and shared: at most
    /// [`COALESCE_BYTES`].
    len: usize,
    /// Bytes of the front part already written.
    sent: usize,
}

/// A run of gathered bytes.
#[derive(Debug)]
enum Part {
    /// Copied into the burst's buffer.
    Copied(Range<usize>),
    /// Held by reference ([`SharedMemory::share`]).
    Shared(Bytes),
}

impl Part {
    fn bytes<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match self {
            Self::Copied(range) => &buf[range.clone()],
            Self::Shared(bytes) => bytes,
        }
    }
}

impl Burst {
    /// Gathers `slice`: by reference if `share` holds it and it is at least
    /// [`COALESCE_MIN_WRITE`] long, else copied.
    fn gather(&mut self, slice: &[u8], share: Option<&SharedMemory>) {
        if slice.is_empty() {
            return;
        }
        self.len += slice.len();
        let share = share.filter(|_| slice.len() >= COALESCE_MIN_WRITE);
        if let Some(shared) = share.and_then(|memory| memory.share(slice)) {
            self.parts.push_back(Part::Shared(shared));
            return;
        }
        // A frame's payload is copied: take the whole buffer at once rather
        // than growing it by doubling. Frame headers alone, when payloads
        // are shared, keep it small.
        if slice.len() >= COALESCE_MIN_WRITE && self.buf.capacity() < COALESCE_BYTES {
            self.buf.reserve_exact(COALESCE_BYTES - self.buf.len());
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(slice);
        match self.parts.back_mut() {
            Some(Part::Copied(range)) if range.end == start => range.end = self.buf.len(),
            _ => self.parts.push_back(Part::Copied(start..self.buf.len())),
        }
    }

    /// Writes out everything gathered to `io`, up to
    /// [`COALESCE_MAX_SLICES`] parts per system call. The buffer keeps its
    /// capacity (see [`Coalesce::release_if_empty`]).
    fn poll_drain<T: AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.parts.is_empty() {
            let mut slices = [io::IoSlice::new(&[]); COALESCE_MAX_SLICES];
            let mut count = 0;
            for (part, slice) in self.parts.iter().zip(slices.iter_mut()) {
                let skip = if count == 0 { self.sent } else { 0 };
                *slice = io::IoSlice::new(&part.bytes(&self.buf)[skip..]);
                count += 1;
            }
            let n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices[..count]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        self.buf.clear();
        Poll::Ready(Ok(()))
    }

    /// Marks `n` more bytes as written.
    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while let Some(front) = self.parts.front() {
            let left = front.bytes(&self.buf).len() - self.sent;
            if n < left {
                self.sent += n;
                return;
            }
            n -= left;
            self.sent = 0;
            self.parts.pop_front();
        }
    }
}

impl<T> Coalesce<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            shared: None,
            burst: None,
            wrote: false,
        }
    }

    /// Slices of `memory` are gathered by reference, not copied, as long as
    /// the inner IO writes vectors (a `writev` of the references).
    #[must_use]
    pub fn sharing(mut self, memory: Option<Arc<SharedMemory>>) -> Self {
        self.shared = memory;
        self
    }

    /// Bytes gathered and not yet written.
    fn gathered(&self) -> usize {
        self.burst.as_ref().map_or(0, |burst| burst.len)
    }

    /// Gives the burst's memory back once nothing is left in it.
    ///
    /// Not called by [`Burst::poll_drain`] itself: a drain in the middle of
    /// a burst (the buffer is full and the next frame is waiting) is
    /// followed at once by a refill, and freeing there would mean
    /// allocating [`COALESCE_BYTES`] again for every 256 KiB sent. The
    /// burst ends at a flush, or with a frame too large to gather; both
    /// free it here. So the hot path allocates once per burst, and an idle
    /// connection holds nothing.
    fn release_if_empty(&mut self) {
        if self.gathered() == 0 {
            self.burst = None;
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Writes out everything gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.burst {
            Some(burst) => burst.poll_drain(&mut self.inner, cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.gathered() == 0 && len < COALESCE_MIN_WRITE {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        if this.gathered() + len > COALESCE_BYTES {
            ready!(this.poll_drain(cx))?;
            if len > COALESCE_BYTES {
                // Too large to gather (a client allowed frames above 256
                // KiB): it goes out as it is, and the drained buffer is not
                // needed for it. Kept, it would live as long as the
                // connection, since no later flush would find it non-empty.
                this.release_if_empty();
                return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
            }
        }
        // References are only worth it if they go out in one `writev`.
        let share = this
            .shared
            .as_deref()
            .filter(|_| this.inner.is_write_vectored());
        let burst = this.burst.get_or_insert_default();
        for b in bufs {
            burst.gather(b, share);
        }
        this.wrote = true;
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.gathered() > 0 {
            if std::mem::take(&mut this.wrote) {
                // More frames are probably coming in this same poll: keep
                // them, and come back for them when the task runs again.
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_drain(cx))?;
        }
        // The burst is over: give the memory back until the next one.
        this.release_if_empty();
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        this.release_if_empty();
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };
    use std::task::{Wake, Waker};

    use super::*;

    /// A socket that records each write call, accepting at most `limit`
    /// bytes per call.
    #[derive(Debug, Default)]
    struct Socket {
        writes: Vec<Vec<u8>>,
        /// For each vectored write, where each slice it was given starts.
        slices: Vec<Vec<*const u8>>,
        limit: Option<usize>,
        /// Writes only the first slice of a vector (as `AsyncWrite`'s
        /// default), and says so.
        not_vectored: bool,
        shut_down: bool,
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let n = this.limit.map_or(buf.len(), |l| l.min(buf.len()));
            this.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        /// Like `writev`: all the slices in one call.
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let bufs = if this.not_vectored { &bufs[..1] } else { bufs };
            this.slices.push(bufs.iter().map(|b| b.as_ptr()).collect());
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            Pin::new(this).poll_write(cx, &all)
        }

        fn is_write_vectored(&self) -> bool {
            !self.not_vectored
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut_down = true;
            Poll::Ready(Ok(()))
        }
    }

    /// Counts wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    struct Harness {
        io: Coalesce<Socket>,
        wakes: Arc<Wakes>,
        waker: Waker,
    }

    impl Harness {
        fn new(limit: Option<usize>) -> Self {
            let wakes = Arc::new(Wakes::default());
            Self {
                io: Coalesce::new(Socket {
                    limit,
                    ..Socket::default()
                }),
                waker: Waker::from(Arc::clone(&wakes)),
                wakes,
            }
        }

        /// A harness whose connection shares `regions`.
        fn sharing(socket: Socket, regions: Vec<Bytes>) -> Self {
            let mut h = Self::new(None);
            h.io = Coalesce::new(socket).sharing(Some(Arc::new(SharedMemory::new(regions))));
            h
        }

        /// One write call as h2 makes it: a 9-byte frame header and a payload.
        fn write_frame(&mut self, fill: u8, payload: usize) -> usize {
            let head = [fill; 9];
            let body = vec![fill; payload];
            self.write_slices(&[&head, &body])
        }

        fn write_slices(&mut self, slices: &[&[u8]]) -> usize {
            let bufs: Vec<io::IoSlice<'_>> = slices.iter().map(|s| io::IoSlice::new(s)).collect();
            let mut cx = Context::from_waker(&self.waker);
            match Pin::new(&mut self.io).poll_write_vectored(&mut cx, &bufs) {
                Poll::Ready(Ok(n)) => n,
                other => panic!("write did not complete: {other:?}"),
            }
        }

        fn flush(&mut self) {
            let mut cx = Context::from_waker(&self.waker);
            let flushed = Pin::new(&mut self.io).poll_flush(&mut cx);
            assert!(matches!(flushed, Poll::Ready(Ok(()))), "{flushed:?}");
        }

        fn written(&self) -> Vec<usize> {
            self.io.inner.writes.iter().map(Vec::len).collect()
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::Relaxed)
        }

        /// Bytes of write buffer the connection holds, the list of parts
        /// included.
        fn held(&self) -> usize {
            self.io.burst.as_ref().map_or(0, |burst| {
                size_of::<Burst>()
                    + burst.buf.capacity()
                    + burst.parts.capacity() * size_of::<Part>()
            })
        }

        /// The burst being gathered.
        fn burst(&self) -> &Burst {
            self.io.burst.as_deref().expect("a burst")
        }

        /// Every byte written, in order.
        fn stream(&self) -> Vec<u8> {
            self.io.inner.writes.concat()
        }
    }

    const FRAME: usize = 16 * 1024;

    #[test]
    fn small_writes_go_straight_out() {
        let mut h = Harness::new(None);
        assert_eq!(h.write_frame(1, 100), 109);
        assert_eq!(h.written(), [109], "written at once, as one call");
        h.flush();
        assert_eq!(h.wakes(), 0, "nothing held, so no second pass");
    }

    /// h2's pattern: write a frame, flush, write the next, flush... The frames
    /// are held, the task is woken, and the flush that follows no new write
    /// sends them all in one call, in order.
    #[test]
    fn large_frames_are_gathered_until_a_flush_with_nothing_new() {
        let mut h = Harness::new(None);
        for fill in 1..=3 {
            assert_eq!(h.write_frame(fill, FRAME), 9 + FRAME);
            h.flush();
        }
        assert!(h.written().is_empty(), "held: {:?}", h.written());
        assert_eq!(h.wakes(), 3, "each deferred flush wakes the task");
        h.flush();
        assert_eq!(h.written(), [3 * (9 + FRAME)]);
        let sent = &h.io.inner.writes[0];
        assert_eq!(sent[0], 1);
        assert_eq!(sent[9 + FRAME], 2);
        assert_eq!(sent[sent.len() - 1], 3);
        assert_eq!(h.held(), 0, "the buffer is freed after the burst");
    }

    #[test]
    fn a_full_buffer_is_written_before_more_is_taken() {
        let mut h = Harness::new(None);
        let per_frame = 9 + FRAME;
        let fit = COALESCE_BYTES / per_frame;
        for _ in 0..fit {
            h.write_frame(7, FRAME);
        }
        assert!(h.written().is_empty());
        let gathering = h.burst().buf.as_ptr();
        h.write_frame(8, FRAME);
        assert_eq!(
            h.written(),
            [fit * per_frame],
            "the full buffer went out first"
        );
        assert_eq!(
            h.burst().buf.as_ptr(),
            gathering,
            "mid-burst, the drained buffer is refilled, not allocated again"
        );
        h.flush();
        h.flush();
        assert_eq!(h.written(), [fit * per_frame, per_frame]);
        assert_eq!(h.held(), 0, "the buffer is freed after the burst");
    }

    /// Issue 14, attack A: a client allows 16 MiB frames and asks for two
    /// pages at once. Given a frame gathered in the buffer, when a frame
    /// larger than the buffer follows, then the gathered frame goes out
    /// first, the large one straight after it, and the buffer they passed
    /// through is freed at once, not kept for the life of the connection.
    #[test]
    fn a_frame_too_large_to_gather_leaves_no_buffer_behind() {
        let mut h = Harness::new(None);
        h.write_frame(1, FRAME);
        assert_eq!(h.burst().buf.capacity(), COALESCE_BYTES, "gathering");

        // When: a frame one byte larger than the buffer.
        let large = COALESCE_BYTES - 8;
        assert_eq!(h.write_frame(2, large), 9 + large);

        // Then: both are written, in order, and no buffer is held.
        assert_eq!(h.written(), [9 + FRAME, 9 + large]);
        assert_eq!(h.io.inner.writes[1][0], 2);
        assert_eq!(h.held(), 0, "freed by the direct write itself");
        h.flush();
        assert_eq!(h.held(), 0);
        assert_eq!(h.written().len(), 2, "nothing was left to write");
    }

    /// Large frames only, each too large to gather: none of them allocates
    /// a buffer at all.
    #[test]
    fn frames_too_large_to_gather_never_allocate() {
        let mut h = Harness::new(None);
        for fill in 1..=3 {
            h.write_frame(fill, 2 * COALESCE_BYTES);
            h.flush();
            assert_eq!(h.held(), 0, "frame {fill}");
        }
        assert_eq!(h.written(), [9 + 2 * COALESCE_BYTES; 3]);
        assert_eq!(h.wakes(), 0, "nothing held, so no second pass");
    }

    #[test]
    fn small_writes_after_large_ones_keep_their_order() {
        let mut h = Harness::new(None);
        h.write_frame(1, FRAME);
        h.write_frame(2, 10); // e.g. the trailers, queued behind the data
        h.flush();
        h.flush();
        assert_eq!(h.written(), [9 + FRAME + 19]);
        assert_eq!(*h.io.inner.writes[0].last().expect("bytes"), 2);
        assert_eq!(h.held(), 0);
    }

    #[test]
    fn shutdown_writes_everything_first() {
        let mut h = Harness::new(None);
        h.write_frame(1, FRAME);
        h.flush();
        let mut cx = Context::from_waker(&h.waker);
        let shut = Pin::new(&mut h.io).poll_shutdown(&mut cx);
        assert!(matches!(shut, Poll::Ready(Ok(()))));
        assert_eq!(h.written(), [9 + FRAME]);
        assert!(h.io.inner.shut_down);
        assert_eq!(h.held(), 0);
    }

    #[test]
    fn short_writes_are_resumed() {
        let mut h = Harness::new(Some(5000));
        h.write_frame(1, FRAME);
        h.flush();
        h.flush();
        assert_eq!(h.written(), [5000, 5000, 5000, 9 + FRAME - 15_000]);
        assert_eq!(h.held(), 0);
    }

    /// Three 16 KiB payloads in memory the connection shares, each written
    /// as h2 writes a frame, after its 9-byte header.
    fn shared_frames(h: &mut Harness, region: &Bytes) -> Vec<u8> {
        let mut expected = Vec::new();
        for (i, payload) in region.chunks(FRAME).enumerate() {
            let head = [i as u8; 9];
            assert_eq!(h.write_slices(&[&head, payload]), 9 + FRAME);
            h.flush();
            expected.extend_from_slice(&head);
            expected.extend_from_slice(payload);
        }
        expected
    }

    fn region() -> Bytes {
        (0..3 * FRAME)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    /// Given payloads that lie in shared memory (an identity page's
    /// carriers), when they are gathered, then only their headers are
    /// copied, and the one `writev` that sends the burst points at the
    /// shared memory itself: header, payload, header, payload..., in order.
    #[test]
    fn payloads_in_shared_memory_are_written_from_it() {
        let region = region();
        let mut h = Harness::sharing(Socket::default(), vec![region.clone()]);
        let expected = shared_frames(&mut h, &region);
        assert!(h.written().is_empty(), "held: {:?}", h.written());
        assert!(
            h.burst().buf.len() == 27,
            "copied: {} bytes",
            h.burst().buf.len()
        );
        assert!(
            h.burst().buf.capacity() < 1024,
            "{}",
            h.burst().buf.capacity()
        );

        h.flush();
        assert_eq!(h.written(), [expected.len()], "one system call");
        assert_eq!(h.stream(), expected);
        let slices = &h.io.inner.slices[0];
        let payloads: Vec<*const u8> = slices.iter().skip(1).step_by(2).copied().collect();
        let in_region: Vec<*const u8> = region.chunks(FRAME).map(<[u8]>::as_ptr).collect();
        assert_eq!(slices.len(), 6);
        assert_eq!(payloads, in_region, "not copied");
        assert_eq!(h.held(), 0, "nothing held after the burst");
    }

    /// Given shared payloads and a socket that takes 5,000 bytes per call,
    /// when the burst goes out, then every short write resumes at the right
    /// byte, inside a part or between a copied and a shared one.
    #[test]
    fn short_writes_resume_across_copied_and_shared_parts() {
        let region = region();
        let socket = Socket {
            limit: Some(5000),
            ..Socket::default()
        };
        let mut h = Harness::sharing(socket, vec![region.clone()]);
        let expected = shared_frames(&mut h, &region);
        h.flush();
        assert_eq!(h.stream(), expected);
        assert!(h.written().iter().all(|&n| n <= 5000));
        assert_eq!(h.held(), 0);
    }

    /// Given shared memory, when frames whose payloads in it are shorter
    /// than [`COALESCE_MIN_WRITE`] are gathered (a client whose window lets
    /// only small frames through), then those are copied: a burst's list of
    /// parts stays one run, not two parts per frame.
    #[test]
    fn short_slices_of_shared_memory_are_copied() {
        let region = region();
        let mut h = Harness::sharing(Socket::default(), vec![region.clone()]);
        let mut expected = Vec::new();
        h.write_frame(9, FRAME); // a burst has begun
        expected.extend_from_slice(&[9; 9 + FRAME]);
        for (i, payload) in region.chunks(COALESCE_MIN_WRITE - 1).enumerate() {
            let head = [i as u8; 9];
            h.write_slices(&[&head, payload]);
            expected.extend_from_slice(&head);
            expected.extend_from_slice(payload);
        }
        assert_eq!(h.burst().parts.len(), 1, "one copied run");
        h.flush();
        h.flush();
        assert_eq!(h.stream(), expected);
    }

    /// Given an IO that writes one slice per call (the default of
    /// `AsyncWrite`), when payloads in shared memory are gathered, then they
    /// are copied as before: references would cost a system call each.
    #[test]
    fn an_io_without_vectored_writes_gets_copies() {
        let region = region();
        let socket = Socket {
            not_vectored: true,
            ..Socket::default()
        };
        let mut h = Harness::sharing(socket, vec![region.clone()]);
        let expected = shared_frames(&mut h, &region);
        assert_eq!(h.burst().buf.len(), expected.len(), "all copied");
        h.flush();
        assert_eq!(h.written(), [expected.len()], "one system call");
        assert_eq!(h.stream(), expected);
    }
}
