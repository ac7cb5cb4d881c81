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

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::knobs::{COALESCE_BYTES, COALESCE_MIN_WRITE};

/// An IO whose large writes are gathered into fewer system calls.
#[derive(Debug)]
pub struct Coalesce<T> {
    inner: T,
    buf: Vec<u8>,
    /// Bytes of `buf` already written to `inner`.
    sent: usize,
    /// A write arrived since the last deferred flush.
    wrote: bool,
}

impl<T> Coalesce<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            sent: 0,
            wrote: false,
        }
    }
}

impl<T> Coalesce<T> {
    /// Gives the buffer's memory back once nothing is left in it.
    ///
    /// Not called by [`Self::poll_drain`] itself: a drain in the middle of a
    /// burst (the buffer is full and the next frame is waiting) is followed
    /// at once by a refill, and freeing there would mean allocating
    /// [`COALESCE_BYTES`] again for every 256 KiB sent. The burst ends at a
    /// flush, or with a frame too large to gather; both free it here. So the
    /// hot path allocates once per burst, and an idle connection holds
    /// nothing.
    fn release_if_empty(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            self.buf = Vec::new();
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Writes out everything buffered. The buffer keeps its capacity (see
    /// [`Self::release_if_empty`]).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
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
        if this.buf.is_empty() && len < COALESCE_MIN_WRITE {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        if this.buf.len() + len > COALESCE_BYTES {
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
        if this.buf.capacity() == 0 {
            this.buf.reserve_exact(COALESCE_BYTES);
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        this.wrote = true;
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.buf.is_empty() {
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
        limit: Option<usize>,
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
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            self.poll_write(cx, &all)
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

        /// One write call as h2 makes it: a 9-byte frame header and a payload.
        fn write_frame(&mut self, fill: u8, payload: usize) -> usize {
            let head = [fill; 9];
            let body = vec![fill; payload];
            let bufs = [io::IoSlice::new(&head), io::IoSlice::new(&body)];
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

        /// Bytes of write buffer the connection holds.
        fn held(&self) -> usize {
            self.io.buf.capacity()
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
        let gathering = h.io.buf.as_ptr();
        h.write_frame(8, FRAME);
        assert_eq!(
            h.written(),
            [fit * per_frame],
            "the full buffer went out first"
        );
        assert_eq!(
            h.io.buf.as_ptr(),
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
        assert_eq!(h.held(), COALESCE_BYTES, "gathering");

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
}
