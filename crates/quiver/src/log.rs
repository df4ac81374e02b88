//! Logging: `tracing` events only. The library never installs a subscriber by itself: an
//! application that wants quiver's events installs its own (they arrive with the targets
//! below), or calls [`init_logging_from_env`], which installs one writing to stderr,
//! filtered by `QUIVER_LOG`. quiver's own programs (the `quiver` command and its bench
//! ranks, `quiver-bench`, `quiver-testprog`, the examples) call it first thing.
//!
//! `QUIVER_LOG` takes `tracing_subscriber`'s `EnvFilter` syntax: a level (`info`,
//! `debug`), or per-module directives (`quiver::transport::dgram=debug,quiver=info`).
//!
//! What is logged: the transport chosen for each connection and its setup (`info`),
//! accepted peers and closes (`debug`), failures (peer dead, stopped, unreachable, refused,
//! `warn`), and bursts of retransmissions of the datagram protocol (`debug`). Nothing is
//! logged per message. With no subscriber, an event costs one relaxed load of tracing's
//! global maximum level (`LevelFilter::OFF`), and only on those slow paths.

use std::sync::Once;

/// The variable that turns logging on.
pub const LOG_ENV: &str = "QUIVER_LOG";

/// The target of the events about an endpoint's connections (connected, a peer connected,
/// died, stopped, a connection failed, the endpoint closed), whichever transport's code
/// logs them: one filter (`quiver::endpoint=debug`) follows every connection.
pub(crate) const ENDPOINT_LOG: &str = "quiver::endpoint";

/// Installs a `tracing` subscriber that writes to stderr, filtered by `QUIVER_LOG`, when
/// that variable is set and not empty; does nothing otherwise. Creating a
/// [`Context`](crate::Context) never does this: call it at the start of a program that
/// wants `QUIVER_LOG` to work and has no subscriber of its own (an application with its
/// own subscriber gets quiver's events there and need not call this).
///
/// Only the first call of a process acts; later calls do nothing. When another subscriber
/// was installed first, it stays (quiver's events go to it). A malformed filter is reported
/// on stderr and logging stays off.
///
/// ```no_run
/// // First thing in main (then `QUIVER_LOG=info ./my-rank` logs the connections' setup):
/// quiver::init_logging_from_env();
/// let ctx = quiver::Context::from_env()?;
/// # Ok::<(), quiver::Error>(())
/// ```
pub fn init_logging_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(spec) = std::env::var(LOG_ENV) else {
            return;
        };
        if spec.trim().is_empty() {
            return;
        }
        match tracing_subscriber::EnvFilter::try_new(&spec) {
            Ok(filter) => {
                // Another subscriber installed by the application wins: not an error.
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(filter)
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .try_init();
            }
            Err(e) => eprintln!(
                "quiver: {LOG_ENV}={spec:?} is not a valid filter ({e}); logging stays off"
            ),
        }
    });
}
