//! The load each endpoint reports to the picker, from tower's own measures:
//! [`PendingRequests`] for A48's least request, [`PeakEwma`] for Linkerd's
//! latency-aware pick, and a constant for a uniform random pick. tower's
//! p2c compares two random ready endpoints by this load; one enum lets the
//! knob choose the measure at run time.

use std::{
    cmp::Ordering,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use hyper::body::Incoming;
use tower::{
    Service,
    load::{
        CompleteOnResponse, Constant, Load, PeakEwma, PendingRequests, peak_ewma::Cost,
        pending_requests::Count,
    },
};

use crate::{BoxError, connect::Body, knobs::Knobs, knobs::Pick, subchannel::Endpoint};

/// An endpoint with the load measure the knobs chose.
#[derive(Debug)]
pub enum Measured {
    LeastRequest(PendingRequests<Endpoint>),
    PeakEwma(PeakEwma<Endpoint>),
    Random(Constant<Endpoint, u8>),
}

impl Measured {
    pub fn new(endpoint: Endpoint, knobs: &Knobs) -> Self {
        match knobs.pick {
            // "Each endpoint has a counter of outstanding requests" - A48.
            Pick::LeastRequest => Self::LeastRequest(PendingRequests::new(
                endpoint,
                CompleteOnResponse::default(),
            )),
            Pick::PeakEwma => Self::PeakEwma(PeakEwma::new(
                endpoint,
                crate::knobs::EWMA_DEFAULT_RTT,
                crate::knobs::EWMA_DECAY.as_nanos() as f64,
                CompleteOnResponse::default(),
            )),
            Pick::Random => Self::Random(Constant::new(endpoint, 0)),
        }
    }
}

/// The load of one endpoint; two are compared only under the same measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    Calls(Count),
    Cost(Cost),
    None,
}

impl PartialOrd for Metric {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match (self, other) {
            (Self::Calls(a), Self::Calls(b)) => a.partial_cmp(b),
            (Self::Cost(a), Self::Cost(b)) => a.partial_cmp(b),
            (Self::None, Self::None) => Some(Ordering::Equal),
            _ => None,
        }
    }
}

impl Load for Measured {
    type Metric = Metric;

    fn load(&self) -> Metric {
        match self {
            Self::LeastRequest(s) => Metric::Calls(s.load()),
            Self::PeakEwma(s) => Metric::Cost(s.load()),
            Self::Random(_) => Metric::None,
        }
    }
}

type Response = http::Response<Incoming>;

impl Service<http::Request<Body>> for Measured {
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Self::LeastRequest(s) => s.poll_ready(cx),
            Self::PeakEwma(s) => s.poll_ready(cx),
            Self::Random(s) => s.poll_ready(cx),
        }
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match self {
            Self::LeastRequest(s) => Box::pin(s.call(request)),
            Self::PeakEwma(s) => Box::pin(s.call(request)),
            Self::Random(s) => Box::pin(s.call(request)),
        }
    }
}
