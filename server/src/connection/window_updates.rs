//! The window-update budget: how many WINDOW_UPDATEs on open streams and
//! on the connection itself a client may send, measured against the DATA
//! the server sent it ([`crate::knobs::WINDOW_UPDATE_BUDGET`]).
//!
//! [`crate::connection::frame_rules`] counts every such frame a client sends and every
//! DATA frame the server writes, and sends GOAWAY `ENHANCE_YOUR_CALM`
//! `too_many_window_updates` to the connection whose updates outnumber
//! what it was allowed. Frames on streams that are not open are the
//! control-frame budget's ([`crate::connection::control_frames::ControlFrameBudget`]).
//!
//! # The rule
//!
//! A connection may have sent at most
//!
//! ```text
//! budget + 4 × streams opened + DATA payload bytes sent ÷ 2 KiB
//! ```
//!
//! WINDOW_UPDATEs on open streams and on stream 0, a running total, as
//! Envoy's (`1 + 2 × (streams opened + 10 × DATA frames sent)`, in
//! `protocol_constraints.cc`). A WINDOW_UPDATE answers DATA the client has
//! read, so a client that reads what it is sent never needs more: every
//! stack sends at most a stream update and a connection update per 4 KiB it
//! consumes (Go's net/http2, the most eager, refreshes at 4 KiB; grpc-go at
//! a quarter of the window, h2 and Netty at half of it). Bytes, not
//! Envoy's frames: a client that grants a byte at a time makes the server
//! send a 1-byte DATA frame for each update, and frames would pay for the
//! flood that makes them. Unlike the control-frame budget, the allowance
//! can be saved up, because it is earned only by DATA really sent: however
//! a client spends it, the server parses at most one update per 2 KiB it
//! sent, plus the budget.

use crate::connection::verdict::ControlVerdict;
use crate::knobs::{DATA_BYTES_PER_WINDOW_UPDATE, WINDOW_UPDATES_PER_STREAM};

/// One connection's account of window updates (see the module's rule).
#[derive(Debug, Clone)]
pub struct WindowUpdateBudget {
    budget: u64,
    /// WINDOW_UPDATEs on open streams and stream 0 received so far.
    received: u64,
    streams_opened: u64,
    /// DATA payload bytes the server has written so far.
    data_bytes_sent: u64,
}

impl WindowUpdateBudget {
    pub fn new(budget: u32) -> Self {
        Self {
            budget: u64::from(budget),
            received: 0,
            streams_opened: 0,
            data_bytes_sent: 0,
        }
    }

    /// The client opened a stream.
    pub fn on_stream_opened(&mut self) {
        self.streams_opened += 1;
    }

    /// The server wrote a DATA frame with `payload_len` bytes of payload.
    pub fn on_data_sent(&mut self, payload_len: u32) {
        self.data_bytes_sent += u64::from(payload_len);
    }

    /// How many updates the connection may have sent by now.
    fn allowed(&self) -> u64 {
        self.budget
            + WINDOW_UPDATES_PER_STREAM * self.streams_opened
            + self.data_bytes_sent / DATA_BYTES_PER_WINDOW_UPDATE
    }

    /// A WINDOW_UPDATE on an open stream or on the connection arrived.
    pub fn on_window_update(&mut self) -> ControlVerdict {
        self.received += 1;
        if self.received > self.allowed() {
            ControlVerdict::TooMany
        } else {
            ControlVerdict::Fine
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a budget of 10 and no DATA sent, ten updates are fine and the
    /// eleventh is one too many, and stays so.
    #[test]
    fn updates_with_no_data_run_out_after_the_budget() {
        let mut budget = WindowUpdateBudget::new(10);
        for i in 0..10 {
            assert_eq!(budget.on_window_update(), ControlVerdict::Fine, "{i}");
        }
        assert_eq!(budget.on_window_update(), ControlVerdict::TooMany);
        assert_eq!(budget.on_window_update(), ControlVerdict::TooMany);
    }

    /// The most eager reader there is, Go's net/http2 reading 4 KiB at a
    /// time: a stream and a connection update per 4 KiB of every 16 KiB
    /// frame, eight per frame, over 10 GB. It never runs out, even with a
    /// budget of 0: the DATA pays for every update.
    #[test]
    fn a_reader_that_updates_every_4_kib_never_runs_out() {
        let mut budget = WindowUpdateBudget::new(0);
        for frame in 0..600_000 {
            budget.on_data_sent(16 * 1024);
            for _ in 0..8 {
                assert_eq!(
                    budget.on_window_update(),
                    ControlVerdict::Fine,
                    "frame {frame}"
                );
            }
        }
    }

    /// A client that grants a byte at a time and floods: each update lets
    /// the server send a 1-byte DATA frame, which earns nothing, so the
    /// flood gets the budget and no more.
    #[test]
    fn one_byte_frames_do_not_pay_for_the_updates_that_make_them() {
        let mut budget = WindowUpdateBudget::new(1000);
        let fine = (0..100_000)
            .take_while(|_| {
                budget.on_data_sent(1);
                budget.on_window_update() == ControlVerdict::Fine
            })
            .count();
        // 1,000 from the budget, and one more per 2 KiB of 1-byte frames.
        assert_eq!(fine, 1000);
    }

    /// Streams earn a few each: a client that opens a stream for every
    /// small answer and sends two updates with each request is fine.
    #[test]
    fn streams_pay_for_updates_sent_with_requests() {
        let mut budget = WindowUpdateBudget::new(0);
        for stream in 0..100_000 {
            budget.on_stream_opened();
            budget.on_data_sent(100);
            for _ in 0..2 {
                assert_eq!(
                    budget.on_window_update(),
                    ControlVerdict::Fine,
                    "stream {stream}"
                );
            }
        }
    }
}
