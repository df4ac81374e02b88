//! The xdp transport: quiver's reliable datagram protocol over AF_XDP sockets, the
//! kernel's IP/UDP stack skipped. It is a kind of link socket of the datagram engine
//! (`transport::dgram`): the same protocol core, router, job-key handshake, striping over
//! several links and waiting as udp; what differs is below the engine's send and receive
//! calls, in this folder:
//! - `frame`: the Ethernet + IPv4 + UDP headers around a datagram (why UDP/IP: its doc);
//! - `link`: one own link: the AF_XDP socket, quiver's XDP program on the interface, the
//!   neighbours' hardware addresses.
//!
//! The system calls (AF_XDP rings, `bpf()`) are `quiver_transport::xdp`'s. Decision record
//! 0062 says why raw system calls and a program built in Rust.

mod frame;
pub(crate) mod link;
