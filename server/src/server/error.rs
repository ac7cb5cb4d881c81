//! The runtime's one error type, a leaf every part of it returns.

/// Anything that stops the server from starting or serving.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
