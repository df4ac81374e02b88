//! Binding this rank's network sockets: the tcp listener and the datagram engine share one
//! address (one port number), bound before the peers' addresses are known when a bootstrap
//! publishes it ([`Binder`], the [`NetworkBinder`] the context hands the bootstrap).

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_proto::handshake::JobKey;

use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::job::NetworkBinder;
use crate::transport::dgram::engine::DgramShared;

/// A rank's network sockets, bound before its peers' addresses are known (a bootstrap binds
/// port 0, publishes the port it got, then builds the context with everyone's addresses).
#[derive(Debug)]
pub(crate) struct NetworkSockets {
    pub(crate) tcp: Option<std::net::TcpListener>,
    pub(crate) dgram: Option<Arc<DgramShared>>,
    /// The address bound (port 0 replaced by the port the kernel chose); None when the
    /// configuration names no network transport or no address was given.
    pub(crate) local: Option<SocketAddr>,
}

/// Attempts at finding a port free for both tcp and the datagram socket.
const PORT_ATTEMPTS: u32 = 32;

/// Binds this rank's tcp listener and datagram socket (whichever `config.transports` names)
/// at `own`. Port 0 picks one port free for both: the kernel chooses it for tcp, and the
/// datagram socket binds the same number (another is tried if that one is taken for udp).
pub(crate) fn bind_network(
    own: Option<SocketAddr>,
    own_links: &[SocketAddr],
    all_links: &[Vec<SocketAddr>],
    config: &Config,
    job_id: u64,
    key: [u8; 32],
) -> Result<NetworkSockets> {
    let networked = config.transports.iter().any(|t| *t != TransportKind::Shm);
    let want_tcp = networked && config.transports.contains(&TransportKind::Tcp);
    let dgram_kind = config.transports.iter().copied().find(|t| t.is_datagram());
    let none = NetworkSockets {
        tcp: None,
        dgram: None,
        local: None,
    };
    let Some(own) = own else { return Ok(none) };
    if !want_tcp && dgram_kind.is_none() {
        return Ok(none);
    }
    let bind_dgram = |at: SocketAddr| -> Result<Option<Arc<DgramShared>>> {
        dgram_kind
            .map(|kind| {
                let local = if own_links.is_empty() {
                    vec![at]
                } else {
                    own_links.to_vec()
                };
                DgramShared::bind(
                    kind,
                    local,
                    all_links.to_vec(),
                    config,
                    job_id,
                    JobKey::from_bytes(key),
                )
                .map(Arc::new)
            })
            .transpose()
    };
    if own.port() != 0 {
        let tcp = want_tcp
            .then(|| super::tcp::listener::bind(own))
            .transpose()?;
        let dgram = bind_dgram(own)?;
        return Ok(NetworkSockets {
            tcp,
            dgram,
            local: Some(own),
        });
    }
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let tcp = super::tcp::listener::bind(own)?;
        let port = tcp
            .local_addr()
            .map_err(|e| Error::io(format!("reading the port bound at {own}"), e))?
            .port();
        let at = SocketAddr::new(own.ip(), port);
        match bind_dgram(at) {
            Ok(dgram) => {
                return Ok(NetworkSockets {
                    tcp: want_tcp.then_some(tcp),
                    dgram,
                    local: Some(at),
                })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Config(format!("no free port at {own}"))))
}

/// The [`NetworkBinder`] a bootstrap binds through: keeps what it bound for the context.
pub(crate) struct Binder<'a> {
    config: &'a Config,
    bound: Option<NetworkSockets>,
}

impl<'a> Binder<'a> {
    /// Nothing bound yet; binds as `config` says.
    pub(crate) fn new(config: &'a Config) -> Binder<'a> {
        Binder {
            config,
            bound: None,
        }
    }

    /// What was bound (None: the bootstrap bound nothing, or unbound it again).
    pub(crate) fn into_bound(self) -> Option<NetworkSockets> {
        self.bound
    }
}

impl NetworkBinder for Binder<'_> {
    fn bind(
        &mut self,
        own: Option<SocketAddr>,
        job_id: u64,
        key: [u8; 32],
    ) -> Result<Option<SocketAddr>> {
        let bound = bind_network(own, &[], &[], self.config, job_id, key)?;
        let local = bound.local;
        self.bound = Some(bound);
        Ok(local)
    }

    fn unbind(&mut self) {
        self.bound = None;
    }
}
