//! Per-call guards: what every call passes through on its way in
//! ([`request_guards`]) and what a large response holds on its way out
//! ([`response_hold`]), against the server-wide byte budgets ([`budget`]).
//! A call sees its connection through [`info`] and can close it through
//! [`close`].

pub mod budget;
pub mod close;
pub mod info;
pub mod request_guards;
pub mod response_hold;
