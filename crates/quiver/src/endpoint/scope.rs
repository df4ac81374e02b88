//! Posted operations on memory the caller keeps ([`Endpoint::scope`], [`Scope`]), and
//! plain data types sent and received without hand conversion ([`Endpoint::send_typed`],
//! [`Endpoint::recv_into`]: any [`bytemuck::Pod`] slice seen as its bytes).
//!
//! A scope borrows the caller's slices for its whole life, as `std::thread::scope` borrows
//! what its threads use: every operation posted in it is completed or cancelled before
//! `scope` returns, whether its body returned early, panicked or waited for everything.
//! Forgetting a request handle (`mem::forget`) changes nothing: the scope, not the handle,
//! holds the operation. A send is copied when it is posted (the caller's slice is free
//! again at once; the copy is one `memcpy` into a buffer of the endpoint's pool); a
//! receive is posted with a buffer of the pool and copied into the caller's slice when it
//! completes (decision 0090 says why, and what a copy-free path would take).
//!
//! The same operations without the closure, for callers that hold requests by number
//! across calls (the C and Python bindings, decision 0097): [`Endpoint::post_send_from`],
//! [`Endpoint::post_recv_sized`], [`Endpoint::finish_recv_into`],
//! [`Endpoint::cancel_recv_into`], [`Endpoint::finish_send`]. They borrow nothing past a
//! call: the caller names its memory again when a receive completes, and keeps it valid
//! in between by its own contract.

use std::marker::PhantomData;

use bytemuck::Pod;

use super::matching::{Envelope, MatchSpec};
use super::{Connection, Endpoint, RecvRequest, SendRequest};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::requests::{RecvCompletion, RecvState};

/// Posted operations on memory the caller keeps, inside [`Endpoint::scope`]. Lives only
/// during the scope's body; its operations are completed or cancelled when the body ends.
pub struct Scope<'scope, 'env: 'scope> {
    endpoint: &'scope mut Endpoint,
    /// The operations posted in the scope, by handle number (`None`: waited already).
    ops: Vec<Option<Op<'env>>>,
    /// Numbers of `ops` waited already, for the next operations (a handle is consumed by
    /// its wait, so no live handle names a free number).
    free: Vec<usize>,
    /// Makes `'scope` invariant: a handle of one scope cannot be given to another.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// One operation of a scope.
enum Op<'env> {
    Send(SendRequest),
    /// A receive into the caller's bytes `into`, through the endpoint's posted receive.
    Recv(RecvRequest, &'env mut [u8]),
}

/// A send posted in a [`Scope`]; complete it with [`Scope::wait_send`] (or let the scope's
/// end complete it).
#[derive(Debug)]
#[must_use = "a scoped send completes at the end of its scope at the latest; wait_send reports its outcome"]
pub struct ScopedSend<'scope> {
    index: usize,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A receive posted in a [`Scope`]; complete it with [`Scope::wait_recv`] (the scope's end
/// cancels it if its message has not begun to arrive).
#[derive(Debug)]
#[must_use = "a scoped receive not waited for is cancelled at the end of its scope"]
pub struct ScopedRecv<'scope> {
    index: usize,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl Endpoint {
    /// Runs `body` with a [`Scope`] in which sends and receives can be posted on slices
    /// the caller keeps (parts of larger arrays, typed data: any [`bytemuck::Pod`] type),
    /// and returns what `body` returns. Before `scope` returns (or unwinds, if `body`
    /// panics), every operation posted in the scope is finished: sends are completed
    /// (waited for, within the endpoint's timeout), receives not waited for are cancelled
    /// (their message, if it has not begun to arrive, stays for a later receive; one that
    /// has begun completes into its slice). The endpoint stays usable through
    /// [`Scope::endpoint`] inside the body.
    ///
    /// ```no_run
    /// # fn main() -> quiver::Result<()> {
    /// let ctx = quiver::Context::from_env()?;
    /// let mut ep = ctx.endpoint(0)?;
    /// let conn = ep.connect(quiver::Addr::new(1, 0))?;
    /// let field = vec![1.5f64; 1024];
    /// let mut halo = vec![0.0f64; 1024];
    /// ep.scope(|s| -> quiver::Result<()> {
    ///     let sent = s.post_send(conn, &field[0..64])?; // the first 64 values
    ///     let got = s.post_recv(&mut halo[960..])?;      // into the last 64
    ///     s.wait_send(sent)?;
    ///     let envelope = s.wait_recv(got)?;
    ///     assert_eq!(envelope.len, 64 * 8);              // bytes
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// The borrow checker keeps the rest sound: a slice posted for a receive cannot be
    /// touched until the scope ends, and a request cannot leave its scope.
    ///
    /// ```compile_fail
    /// # fn f(ep: &mut quiver::Endpoint) {
    /// let mut buf = [0u8; 8];
    /// ep.scope(|s| {
    ///     let got = s.post_recv(&mut buf[..]).unwrap();
    ///     buf[0] = 1; // refused: the scope holds `buf` until it ends
    ///     let _ = s.wait_recv(got);
    /// });
    /// # }
    /// ```
    ///
    /// ```compile_fail
    /// # fn f(ep: &mut quiver::Endpoint, buf: &mut [u8]) {
    /// let escaped = ep.scope(|s| s.post_recv(buf).unwrap()); // refused: it names the scope
    /// # }
    /// ```
    pub fn scope<'env, T>(
        &mut self,
        body: impl for<'scope> FnOnce(&mut Scope<'scope, 'env>) -> T,
    ) -> T {
        let mut scope = Scope {
            endpoint: self,
            ops: Vec::new(),
            free: Vec::new(),
            _scope: PhantomData,
        };
        // The scope's drop finishes its operations, on return and on unwinding alike.
        body(&mut scope)
    }

    /// Sends the values of `data` as one message of their bytes (no conversion, no
    /// copy: [`bytemuck::Pod`] types such as `u32`, `f64` or `#[repr(C)]` structs of
    /// them), blocking as [`Endpoint::send`] does. The receiver gets the bytes in this
    /// machine's layout.
    ///
    /// # Errors
    /// As [`Endpoint::send`].
    pub fn send_typed<T: Pod>(&mut self, conn: Connection, data: &[T]) -> Result<()> {
        self.send(conn, bytemuck::cast_slice(data))
    }

    /// Receives the next message into `buf` seen as bytes, blocking as [`Endpoint::recv`]
    /// does; returns the message's length **in bytes** and its sender (a length that is
    /// not a whole number of `T` is the sender's business: the bytes are there).
    ///
    /// # Errors
    /// As [`Endpoint::recv`]; [`Error::BufferTooSmall`] counts bytes.
    pub fn recv_into<T: Pod>(&mut self, buf: &mut [T]) -> Result<(usize, Addr)> {
        self.recv(bytemuck::cast_slice_mut(buf))
    }

    /// Posts a send of `data` with `tag` (`None`: untagged, as [`Endpoint::post_send`])
    /// on `conn`, copying the bytes into a buffer of the endpoint's pool now, as
    /// [`Scope::post_send`] does: `data` is not read after this call. Complete it with
    /// [`Endpoint::finish_send`] (which gives the buffer back to the pool), or
    /// [`Endpoint::wait_send`]/[`Endpoint::test_send`].
    ///
    /// # Errors
    /// As [`Endpoint::post_send`].
    pub fn post_send_from(
        &mut self,
        conn: Connection,
        tag: Option<u64>,
        data: &[u8],
    ) -> Result<SendRequest> {
        let mut copy = self.requests.pool.take(data.len());
        copy.copy_from_slice(data);
        match tag {
            None => self.post_send(conn, copy),
            Some(tag) => self.post_send_tagged(conn, tag, copy),
        }
    }

    /// Posts a receive of up to `capacity` bytes for the next message (`spec` `None`) or
    /// the earliest `spec` matches, into a buffer of the endpoint's pool, as
    /// [`Scope::post_recv`] does. Complete it with [`Endpoint::finish_recv_into`] (which
    /// copies the message into the caller's bytes) or end it with
    /// [`Endpoint::cancel_recv_into`]; [`Endpoint::test_recv`] and
    /// [`Endpoint::wait_recv_ready`] tell when it has completed.
    ///
    /// # Errors
    /// As [`Endpoint::post_recv`].
    pub fn post_recv_sized(
        &mut self,
        spec: Option<MatchSpec>,
        capacity: usize,
    ) -> Result<RecvRequest> {
        let inner = self.requests.pool.take(capacity);
        match spec {
            None => self.post_recv(inner),
            Some(spec) => self.post_recv_matching(spec, inner),
        }
    }

    /// Waits for a send posted with [`Endpoint::post_send_from`] and gives its buffer
    /// back to the pool.
    ///
    /// # Errors
    /// As [`Endpoint::wait_send`] (its request is ended either way).
    pub fn finish_send(&mut self, req: SendRequest) -> Result<()> {
        let buf = self.wait_send(req)?;
        self.requests.pool.give(buf);
        Ok(())
    }

    /// Waits for a receive posted with [`Endpoint::post_recv_sized`] and copies its
    /// message to the start of `into` (as long as the capacity posted; a shorter `into`
    /// takes what fits); gives the buffer back to the pool. Returns the sender, tag and
    /// length in bytes. To wait without ending the request (a wait that may time out),
    /// call [`Endpoint::wait_recv_ready`] first.
    ///
    /// # Errors
    /// As [`Endpoint::wait_recv`] (its request is ended either way;
    /// [`Error::BufferTooSmall`]: the message stays queued).
    pub fn finish_recv_into(&mut self, req: RecvRequest, into: &mut [u8]) -> Result<Envelope> {
        let completion = self.wait_recv(req)?;
        Ok(self.deliver(completion, into))
    }

    /// Cancels a receive posted with [`Endpoint::post_recv_sized`]: `None` when it was
    /// withdrawn before its message began (the message, if any, stays for a later
    /// receive; `into` is not written), else its envelope, its message copied into `into`
    /// (it had completed, or its message had begun and is finished now). As the end of a
    /// [`Scope`] cancels a receive.
    ///
    /// # Errors
    /// The receive's own error when it had completed with one; [`Error::InvalidArgument`]
    /// for a request of another endpoint.
    pub fn cancel_recv_into(
        &mut self,
        req: RecvRequest,
        into: &mut [u8],
    ) -> Result<Option<Envelope>> {
        Ok(self
            .cancel_recv(req)?
            .map(|completion| self.deliver(completion, into)))
    }

    /// Cancels posted receive `req`: `None` when it was withdrawn before its message
    /// began (the message, if any, stays for a later receive), else its outcome
    /// (completed already, or finished now with the message that had begun).
    fn cancel_recv(&mut self, req: RecvRequest) -> Result<Option<RecvCompletion>> {
        self.progress()?;
        if matches!(self.requests.recvs.get_mut(req.key), Some(RecvState::Bound))
            && self.dgram.holds_recvs()
        {
            // Handed to the datagram engine ahead of its message: taken back if it has
            // not begun.
            self.dgram.withdraw_recvs(&mut self.requests, &self.local);
        }
        match self.requests.recvs.get_mut(req.key) {
            Some(RecvState::Pending(_)) => {
                self.requests.posted_recvs.retain(|&key| key != req.key);
                self.matcher.cancel(&req.key);
                if let Some(RecvState::Pending(buf)) = self.requests.recvs.remove(req.key) {
                    self.requests.pool.give(buf);
                }
                Ok(None)
            }
            Some(_) => self.wait_recv(req).map(Some),
            None => Err(Error::InvalidArgument("unknown receive request".into())),
        }
    }

    /// Copies a completed pool-buffer receive into the caller's bytes; its envelope.
    fn deliver(&mut self, completion: RecvCompletion, into: &mut [u8]) -> Envelope {
        let RecvCompletion { buf, len, src, tag } = completion;
        // The inner buffer was as long as the capacity posted, and a message fits its
        // buffer; a shorter `into` takes what fits.
        let len = len.min(into.len()).min(buf.len());
        into[..len].copy_from_slice(&buf[..len]);
        self.requests.pool.give(buf);
        Envelope {
            source: src,
            tag,
            len: len as u64,
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Posts a send of `data` (any [`bytemuck::Pod`] slice, sent as its bytes) on `conn`.
    /// The bytes are copied into a buffer of the endpoint's pool now: `data` is not read
    /// after this call.
    ///
    /// # Errors
    /// As [`Endpoint::post_send`].
    pub fn post_send<T: Pod>(
        &mut self,
        conn: Connection,
        data: &'env [T],
    ) -> Result<ScopedSend<'scope>> {
        let request = self
            .endpoint
            .post_send_from(conn, None, bytemuck::cast_slice(data))?;
        Ok(ScopedSend {
            index: self.push(Op::Send(request)),
            _scope: PhantomData,
        })
    }

    /// Posts a receive of the next message (from any peer, not claimed by an earlier
    /// posted receive) into `buf` (any [`bytemuck::Pod`] slice, filled as bytes from its
    /// start). `buf` is written when the receive completes, inside [`Scope::wait_recv`]
    /// or at the scope's end.
    ///
    /// # Errors
    /// As [`Endpoint::post_recv`].
    pub fn post_recv<T: Pod>(&mut self, buf: &'env mut [T]) -> Result<ScopedRecv<'scope>> {
        self.post_recv_for(None, bytemuck::cast_slice_mut(buf))
    }

    /// [`Scope::post_recv`] of the earliest message `spec` matches
    /// ([`Endpoint::post_recv_matching`]).
    ///
    /// # Errors
    /// As [`Endpoint::post_recv_matching`].
    pub fn post_recv_matching<T: Pod>(
        &mut self,
        spec: MatchSpec,
        buf: &'env mut [T],
    ) -> Result<ScopedRecv<'scope>> {
        self.post_recv_for(Some(spec), bytemuck::cast_slice_mut(buf))
    }

    /// A plain (`None`) or matching posted receive into the caller's bytes `into`.
    fn post_recv_for(
        &mut self,
        spec: Option<MatchSpec>,
        into: &'env mut [u8],
    ) -> Result<ScopedRecv<'scope>> {
        let request = self.endpoint.post_recv_sized(spec, into.len())?;
        Ok(ScopedRecv {
            index: self.push(Op::Recv(request, into)),
            _scope: PhantomData,
        })
    }

    /// Whether a scoped send has completed (advancing progress first).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a send waited for already.
    pub fn test_send(&mut self, send: &ScopedSend<'scope>) -> Result<bool> {
        match self.ops.get(send.index) {
            Some(Some(Op::Send(request))) => self.endpoint.test_send(request),
            _ => Err(waited_already()),
        }
    }

    /// Whether a scoped receive has completed (advancing progress first).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a receive waited for already.
    pub fn test_recv(&mut self, recv: &ScopedRecv<'scope>) -> Result<bool> {
        match self.ops.get(recv.index) {
            Some(Some(Op::Recv(request, _))) => self.endpoint.test_recv(request),
            _ => Err(waited_already()),
        }
    }

    /// Waits for a scoped send to complete.
    ///
    /// # Errors
    /// As [`Endpoint::wait_send`].
    pub fn wait_send(&mut self, send: ScopedSend<'scope>) -> Result<()> {
        match self.take(send.index) {
            Some(Op::Send(request)) => self.endpoint.finish_send(request),
            _ => Err(waited_already()),
        }
    }

    /// Waits for a scoped receive to complete; its message is then at the start of the
    /// slice it was posted with. Returns the sender, the tag and the length in bytes.
    ///
    /// # Errors
    /// As [`Endpoint::wait_recv`] ([`Error::BufferTooSmall`]: the message stays queued).
    pub fn wait_recv(&mut self, recv: ScopedRecv<'scope>) -> Result<Envelope> {
        match self.take(recv.index) {
            Some(Op::Recv(request, into)) => {
                if let Err(e) = self.endpoint.wait_recv_ready(&request) {
                    // Still posted (a timeout): the scope's end cancels it, so no later
                    // message is swallowed by a receive nobody holds.
                    self.restore(recv.index, Op::Recv(request, into));
                    return Err(e);
                }
                self.endpoint.finish_recv_into(request, into)
            }
            _ => Err(waited_already()),
        }
    }

    /// The endpoint, for any other call inside the scope (blocking sends and receives,
    /// `connect`, `progress`...).
    pub fn endpoint(&mut self) -> &mut Endpoint {
        self.endpoint
    }

    fn push(&mut self, op: Op<'env>) -> usize {
        match self.free.pop() {
            Some(index) => {
                self.ops[index] = Some(op);
                index
            }
            None => {
                self.ops.push(Some(op));
                self.ops.len() - 1
            }
        }
    }

    /// Puts operation `index`, taken by a wait that failed, back for the scope's end.
    fn restore(&mut self, index: usize, op: Op<'env>) {
        self.free.retain(|&free| free != index);
        self.ops[index] = Some(op);
    }

    /// Takes operation `index` out of the table (its handle is being waited for).
    fn take(&mut self, index: usize) -> Option<Op<'env>> {
        let op = self.ops.get_mut(index).and_then(Option::take);
        if op.is_some() {
            self.free.push(index);
        }
        op
    }
}

impl Drop for Scope<'_, '_> {
    /// The scope's end: sends completed, receives cancelled or completed into their
    /// slices, in posting order. Their errors have no caller left to take them.
    fn drop(&mut self) {
        for op in std::mem::take(&mut self.ops).into_iter().flatten() {
            match op {
                Op::Send(request) => {
                    let _ = self.endpoint.finish_send(request);
                }
                Op::Recv(request, into) => {
                    let _ = self.endpoint.cancel_recv_into(request, into);
                }
            }
        }
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("endpoint", &self.endpoint.addr)
            .field("operations", &self.ops.iter().flatten().count())
            .finish()
    }
}

fn waited_already() -> Error {
    Error::InvalidArgument("this scoped operation was waited for already".into())
}
