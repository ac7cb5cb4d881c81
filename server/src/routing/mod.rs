//! The chapter's service.

pub mod catalog;
pub mod page_codec;
pub mod quote;
pub mod service;
