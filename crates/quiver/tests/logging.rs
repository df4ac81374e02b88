//! The library does not take over the process: creating a context installs no `tracing`
//! subscriber, even with `QUIVER_LOG` set; `init_logging_from_env` installs one when asked.
//! (One test in its own binary: a subscriber, once installed, stays for the process.)

use quiver::{Addr, Context};

#[test]
fn a_context_installs_no_subscriber_and_the_opt_in_function_does() {
    // Set before any thread of this process reads the environment.
    std::env::set_var(quiver::LOG_ENV, "info");
    let ctx = Context::builder()
        .rank(0)
        .size(1)
        .job_id(u64::from(std::process::id()) << 32 | 0x10e)
        .job_key([3; 32])
        .build()
        .expect("a one-rank context");
    let mut ep = ctx.endpoint(0).expect("an endpoint");
    let conn = ep.connect(Addr::new(0, 0)).expect("a connection to itself");
    ep.send(conn, b"hello").expect("send");
    let mut buf = [0u8; 8];
    assert_eq!(ep.recv(&mut buf).expect("recv").0, 5);
    assert!(
        !tracing::dispatcher::has_been_set(),
        "creating a context installed a subscriber"
    );
    quiver::init_logging_from_env();
    assert!(
        tracing::dispatcher::has_been_set(),
        "init_logging_from_env installed none with QUIVER_LOG=info"
    );
}
