//! What hyper does not say about its HTTP/2 connection: that the server's
//! SETTINGS arrived (the handshake is done, so the process behind the
//! socket is alive and speaking HTTP/2) and that a GOAWAY arrived (stop
//! sending calls here). [`Tapped`] wraps the socket and watches the bytes
//! hyper reads, with the workspace's frame tracker, which skips payloads by
//! arithmetic: nothing is copied.

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use h2_frames::{FrameTracker, flag, kind};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::watch,
};

/// What the server has said so far on one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    /// The server's first SETTINGS (not an ACK) arrived.
    pub settings: bool,
    /// A GOAWAY arrived.
    pub goaway: bool,
    /// The connection has ended (set by its driver, not by the tap).
    pub closed: bool,
}

/// A socket whose inbound frames are watched.
#[derive(Debug)]
pub struct Tapped<IO> {
    io: IO,
    inbound: FrameTracker,
    heard: Arc<watch::Sender<Heard>>,
}

impl<IO> Tapped<IO> {
    /// Wraps `io`; `heard` is told of SETTINGS and GOAWAY as they arrive.
    pub fn new(io: IO, heard: Arc<watch::Sender<Heard>>) -> Self {
        Self {
            io,
            inbound: FrameTracker::server_to_client(),
            heard,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tapped<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        let heard = &this.heard;
        this.inbound.feed(&buf.filled()[before..], |frame| {
            let header = frame.header;
            let settings = header.kind == kind::SETTINGS && !header.has(flag::ACK);
            let goaway = header.kind == kind::GOAWAY;
            if settings || goaway {
                heard.send_if_modified(|now| {
                    let next = Heard {
                        settings: now.settings || settings,
                        goaway: now.goaway || goaway,
                        closed: now.closed,
                    };
                    let changed = *now != next;
                    *now = next;
                    changed
                });
            }
        });
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tapped<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server's SETTINGS, then a GOAWAY, each split across two writes.
    #[tokio::test]
    async fn hears_settings_then_goaway_across_split_reads() {
        let (client, mut server) = tokio::io::duplex(64);
        let heard = Arc::new(watch::Sender::new(Heard::default()));
        let mut tapped = Tapped::new(client, Arc::clone(&heard));
        let settings = h2_frames::encode_frame(kind::SETTINGS, 0, 0, &[]);
        let goaway = h2_frames::encode_frame(kind::GOAWAY, 0, 0, &[0; 8]);
        let mut buf = [0_u8; 64];
        for frame in [settings, goaway] {
            let (a, b) = frame.split_at(4);
            server.write_all(a).await.expect("write");
            let _ = tapped.read(&mut buf).await.expect("read");
            server.write_all(b).await.expect("write");
            let _ = tapped.read(&mut buf).await.expect("read");
        }
        assert_eq!(
            *heard.borrow(),
            Heard {
                settings: true,
                goaway: true,
                closed: false,
            }
        );
    }

    #[tokio::test]
    async fn a_settings_ack_is_not_the_handshake() {
        let (client, mut server) = tokio::io::duplex(64);
        let heard = Arc::new(watch::Sender::new(Heard::default()));
        let mut tapped = Tapped::new(client, Arc::clone(&heard));
        let ack = h2_frames::encode_frame(kind::SETTINGS, flag::ACK, 0, &[]);
        server.write_all(&ack).await.expect("write");
        let mut buf = [0_u8; 64];
        let _ = tapped.read(&mut buf).await.expect("read");
        assert!(!heard.borrow().settings);
    }
}
