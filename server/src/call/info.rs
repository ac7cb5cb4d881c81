//! What a call learns about its connection: [`ConnectionInfo`], which the
//! connection builds once and tonic puts in every request's extensions.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::AtomicUsize},
};

use tokio::sync::Notify;

use crate::call::budget::Holder;
use crate::call::close::Closer;
use crate::kernel_queue::SentBytes;

/// What a handler learns about its connection (tonic puts this in every
/// request's extensions): the peer, a way to close the connection, and its
/// account with the response budget.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub remote_addr: SocketAddr,
    pub closer: Closer,
    /// What this connection's responses hold of the response budget, held
    /// to its share (see [`crate::call::budget`]).
    pub responses: Arc<Holder>,
    /// Bytes written, and where the kernel lists the socket: when a
    /// response has been acknowledged (see [`crate::kernel_queue`]).
    pub sent: Arc<SentBytes>,
    /// The most streams this connection has had open at once, counted on
    /// the wire: from the client's HEADERS to the server's END_STREAM (or a
    /// RST_STREAM either way). What h2 keeps for the connection's life
    /// grows with it ([`crate::connection::age`]'s idle after a burst). A handler
    /// that finished its body early does not end the stream here: h2 may
    /// still hold its frames.
    pub peak_streams: Arc<AtomicUsize>,
}

impl ConnectionInfo {
    /// The per-connection state a call sees, built once per connection:
    /// `notify` wakes the connection's task when a guard closes it, and the
    /// connection's account with the response budget is opened here, with
    /// the closer the budget evicts it through.
    pub fn new(remote_addr: SocketAddr, notify: Arc<Notify>, sent: Arc<SentBytes>) -> Self {
        let closer = Closer::new(notify);
        Self {
            remote_addr,
            responses: Holder::new(closer.clone()),
            closer,
            sent,
            peak_streams: Arc::new(AtomicUsize::new(0)),
        }
    }
}
