//! The open-file limit, and the connection cap it allows.

use crate::knobs::FD_HEADROOM;

/// Raises the soft open-file limit to the hard limit, logs both, and returns
/// the connection cap that leaves [`FD_HEADROOM`] descriptors free.
pub fn default_max_connections() -> u64 {
    use rlimit::Resource;
    let (soft, hard) = match Resource::NOFILE.get() {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!("cannot read the open-file limit ({e}); assuming 1024");
            (1024, 1024)
        }
    };
    let raised = if soft < hard {
        match Resource::NOFILE.set(hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(soft, hard, "cannot raise the open-file limit: {e}");
                soft
            }
        }
    } else {
        soft
    };
    let cap = raised.saturating_sub(FD_HEADROOM).max(1);
    tracing::info!(
        soft_before = soft,
        hard,
        soft_now = raised,
        max_connections = cap,
        "open-file limit"
    );
    cap
}
