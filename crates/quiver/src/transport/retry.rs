//! Retrying a connection attempt until a deadline: every transport's `connect` waits this
//! way for a peer that is not listening yet or whose endpoint is not open yet.

use std::time::{Duration, Instant};

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::local::LocalRank;

/// The outcome of one connection attempt that did not succeed.
pub(crate) enum Attempt {
    /// The peer is not there yet (not listening, endpoint not open): try again.
    Retry(String),
    /// No answer at the peer's address over this transport (e.g. a tcp connect timed out):
    /// try again; at the deadline this is [`Error::Unreachable`].
    Silent(&'static str, String),
    /// A final error.
    Fail(Error),
}

/// Repeats `attempt` with a backoff of 1..50 ms while it says `Retry`, until `deadline`;
/// then fails with `Refused`, naming the last reason and `suffix`. The backoff is the
/// rank's wait like any other: `local`'s meanwhile runs during it (`LocalRank::pause`).
///
/// # Errors
/// The attempt's final error, or at the deadline [`Error::Refused`] (the peer answered
/// and said no) or [`Error::Unreachable`] (it never answered).
pub(crate) fn retry_until<T>(
    local: &LocalRank,
    dst: Addr,
    deadline: Instant,
    suffix: &str,
    mut attempt: impl FnMut() -> std::result::Result<T, Attempt>,
) -> Result<T> {
    let mut backoff = Duration::from_millis(1);
    loop {
        let (silent, why) = match attempt() {
            Ok(x) => return Ok(x),
            Err(Attempt::Retry(why)) => (None, why),
            Err(Attempt::Silent(transport, why)) => (Some(transport), why),
            Err(Attempt::Fail(e)) => return Err(e),
        };
        let now = Instant::now();
        if now >= deadline {
            tracing::warn!(peer = %dst, reason = %why, "connection attempts gave up");
            return Err(match silent {
                Some(transport) => Error::Unreachable {
                    peer: dst,
                    transport,
                    detail: format!("{why} ({suffix})"),
                },
                None => Error::Refused {
                    peer: dst,
                    reason: format!("{why} ({suffix})"),
                },
            });
        }
        local.pause(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_millis(50));
    }
}
