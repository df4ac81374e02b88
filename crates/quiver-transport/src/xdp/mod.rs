//! AF_XDP: frames straight between a user-space memory area (UMEM) and the network driver,
//! the kernel's IP and UDP stack skipped. quiver's own XDP program steers its flow to the
//! socket and passes every other frame to the kernel untouched.
//!
//! - `program`: the redirect program as eBPF instructions built in Rust;
//! - `bpf`: the `bpf()` calls (XSKMAP, program load, BPF link attach: the program goes
//!   when the process does);
//! - `ring`: one mapped AF_XDP ring;
//! - `socket`: the AF_XDP socket, its UMEM and rings, batched receive and transmit;
//! - `interface`: the interface's index, MTU, hardware address and queues, and the
//!   kernel's neighbour table.
//!
//! Why raw system calls rather than libbpf, libxdp, aya or xsk-rs: decision record 0062.

pub mod bpf;
pub mod interface;
pub mod program;
mod ring;
pub mod socket;
