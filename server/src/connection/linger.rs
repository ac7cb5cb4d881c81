//! [`Linger`]: a connection's last act once its write side is shut (its
//! last GOAWAY sent): read, and drop, what the client still sends, until
//! the client closes, so that the socket is not closed with bytes unread.
//! Such a close answers with a TCP RST, which can cost the client the
//! GOAWAY still unread in its buffer, and so the calls the GOAWAY would
//! have let it send again ([`crate::knobs::CLOSE_LINGER`] says how that
//! showed). Bounded in time ([`CLOSE_LINGER`]) and bytes
//! ([`CLOSE_LINGER_MAX_BYTES`]); [`crate::connection::watched`] runs it
//! from `poll_shutdown`, so hyper's connection ends only after it.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, ReadBuf},
    time::Sleep,
};

use crate::knobs::{CLOSE_LINGER, CLOSE_LINGER_MAX_BYTES};

/// What is dropped at a time.
const CHUNK: usize = 8 * 1024;

/// The linger of one connection: its deadline and the bytes it may still drop.
#[derive(Debug)]
pub(crate) struct Linger {
    until: Pin<Box<Sleep>>,
    left: usize,
}

impl Default for Linger {
    fn default() -> Self {
        Self::within(CLOSE_LINGER, CLOSE_LINGER_MAX_BYTES)
    }
}

impl Linger {
    /// A linger that ends after `limit`, or after `bytes` read.
    pub(crate) fn within(limit: Duration, bytes: usize) -> Self {
        Self {
            until: Box::pin(tokio::time::sleep(limit)),
            left: bytes,
        }
    }

    /// Reads `stream` and drops what it reads; ready once the client has
    /// closed (end of stream), the read failed (the client reset), or a
    /// bound is reached. Never an error: the connection is over either way.
    pub(crate) fn poll_done<R: AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let mut chunk = [0u8; CHUNK];
        while self.left > 0 {
            let mut buf = ReadBuf::new(&mut chunk[..CHUNK.min(self.left)]);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => self.left -= buf.filled().len(),
                Poll::Ready(Err(e)) => {
                    tracing::debug!("linger ended by a read error: {e}");
                    return Poll::Ready(());
                }
                Poll::Pending => return self.until.as_mut().poll(cx),
            }
        }
        tracing::debug!("linger ended at its byte bound ({CLOSE_LINGER_MAX_BYTES} B by default)");
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use tokio::{
        io::AsyncWriteExt,
        net::{TcpListener, TcpStream},
    };

    use super::*;

    /// A connected pair on loopback: (the server's side, the client's).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"));
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.expect("accept").0, client.expect("connect"))
    }

    /// Runs `linger` on `server` to its end; `what` is why it must end
    /// within 30 s.
    async fn run(linger: &mut Linger, server: &mut TcpStream, what: &str) {
        tokio::time::timeout(
            Duration::from_secs(30),
            poll_fn(|cx| linger.poll_done(server, cx)),
        )
        .await
        .expect(what);
    }

    /// Given a client that sends 100 bytes and closes, the linger ends at
    /// the client's close, having dropped the 100 bytes, long before its
    /// time bound.
    #[tokio::test]
    async fn ends_when_the_client_closes() {
        let (mut server, mut client) = pair().await;
        client.write_all(&[7u8; 100]).await.expect("write");
        client.shutdown().await.expect("FIN");
        let mut linger = Linger::within(Duration::from_secs(60), 1024);
        run(
            &mut linger,
            &mut server,
            "ends at the client's close, not at its 60 s bound",
        )
        .await;
        assert_eq!(linger.left, 1024 - 100);
    }

    /// Given a client that keeps sending and never closes, the linger ends
    /// once it has dropped its byte bound.
    #[tokio::test]
    async fn ends_at_its_byte_bound() {
        let (mut server, mut client) = pair().await;
        client.write_all(&[7u8; 64 * 1024]).await.expect("write");
        let mut linger = Linger::within(Duration::from_secs(60), 20_000);
        run(
            &mut linger,
            &mut server,
            "ends at 20,000 bytes, not at its 60 s bound",
        )
        .await;
        assert_eq!(linger.left, 0);
    }

    /// Given a client that sends nothing and never closes, the linger ends
    /// at its time bound, and not before.
    #[tokio::test]
    async fn ends_at_its_time_bound() {
        let (mut server, _client) = pair().await;
        let started = tokio::time::Instant::now();
        let mut linger = Linger::within(Duration::from_millis(200), 1024);
        run(&mut linger, &mut server, "ends at its 200 ms bound").await;
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(linger.left, 1024);
    }
}
