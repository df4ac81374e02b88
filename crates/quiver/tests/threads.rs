//! The threading model, checked at compile time: an `Endpoint` is `Send` and not `Sync`
//! (one thread drives it at a time, like a socket); a `Context` is `Send` and `Sync`, so
//! threads share it and each opens its own endpoints. The run-time test with threads in
//! two processes is `crates/quiver-cli/tests/threads.rs`.

use quiver::{Addr, Connection, Context, Endpoint, Error, PooledBuf, RecvRequest, SendRequest};

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}

/// Compiles only while `T` is not `Sync`: with a `Sync` type both impls apply and the
/// type parameter of the call below is ambiguous.
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
#[allow(dead_code)]
struct IsSync;
impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}

#[test]
fn auto_traits_of_the_public_types() {
    assert_send::<Endpoint>();
    <Endpoint as AmbiguousIfSync<_>>::check();
    assert_send::<Context>();
    assert_sync::<Context>();
    assert_send::<Connection>();
    assert_sync::<Connection>();
    assert_send::<Addr>();
    assert_send::<Error>();
    assert_sync::<Error>();
    assert_send::<PooledBuf>();
    assert_send::<SendRequest>();
    assert_send::<RecvRequest>();
}
