//! Logging: `tracing` events, off unless `QUIVER_LOG` is set.
//!
//! `QUIVER_LOG` takes `tracing_subscriber`'s `EnvFilter` syntax: a level (`info`,
//! `debug`), or per-module directives (`quiver::transport::dgram=debug,quiver=info`). When it is set,
//! the first context of the process installs a subscriber that writes to stderr, with
//! `try_init`: an application that installed its own subscriber first keeps it (quiver's
//! events then go to that subscriber, filtered by it).
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

/// Installs the stderr subscriber if `QUIVER_LOG` is set (once per process; later calls do
/// nothing). A malformed filter is reported on stderr and logging stays off.
pub(crate) fn init_from_env() {
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
