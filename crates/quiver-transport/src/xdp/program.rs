//! The XDP program quiver loads on an interface, as eBPF instructions built here in Rust
//! (no clang, no libbpf, no object file): frames of quiver's UDP flow (IPv4 without
//! options or fragments, to one address and port) go to the AF_XDP socket of their receive
//! queue through an XSKMAP; every other frame passes to the kernel untouched (`XDP_PASS`),
//! and so does a quiver frame whose queue has no socket (the map lookup's default action).
//!
//! Layer: quiver-transport's xdp module, pure code (no system call): the instructions and
//! their encoding, so that a test can read them. Loading them is `bpf.rs`'s.

use std::net::Ipv4Addr;

/// One eBPF instruction, as the kernel reads it (`struct bpf_insn`, 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Instruction {
    code: u8,
    /// Destination register in the low nibble, source register in the high one.
    registers: u8,
    offset: i16,
    immediate: i32,
}

/// `XDP_PASS`: the frame goes on into the kernel's stack.
pub const XDP_PASS: i32 = 2;
/// `XDP_REDIRECT`: the frame went where a redirect helper sent it.
pub const XDP_REDIRECT: i32 = 4;
/// `BPF_FUNC_redirect_map`.
const HELPER_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the 64-bit immediate is a map's descriptor.
const PSEUDO_MAP_FD: u8 = 1;

/// Bytes of Ethernet, IPv4 (no options) and UDP headers in front of a quiver datagram.
pub const HEADERS_LEN: usize = ETHERNET_LEN + IPV4_LEN + UDP_LEN;
/// Ethernet header bytes (no VLAN tag).
pub const ETHERNET_LEN: usize = 14;
/// IPv4 header bytes without options.
pub const IPV4_LEN: usize = 20;
/// UDP header bytes.
pub const UDP_LEN: usize = 8;

// Offsets in the frame the program reads.
const ETHER_TYPE_AT: i16 = 12;
const IP_VERSION_IHL_AT: i16 = 14;
const IP_FRAGMENT_AT: i16 = 20;
const IP_PROTOCOL_AT: i16 = 23;
const IP_DESTINATION_AT: i16 = 30;
const UDP_DESTINATION_PORT_AT: i16 = 36;
// Offsets in `struct xdp_md`.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;

// Opcodes (class | size or operation | source).
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const AND64_IMM: u8 = 0x57;
const JGT_REG: u8 = 0x2d;
/// 32-bit compare (JMP32 class): a loaded word's high bit must not meet a sign-extended
/// immediate.
const JNE32_IMM: u8 = 0x56;
const LD_IMM64: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

impl Instruction {
    const fn new(code: u8, dst: u8, src: u8, offset: i16, immediate: i32) -> Instruction {
        Instruction {
            code,
            registers: (dst & 0x0f) | (src << 4),
            offset,
            immediate,
        }
    }

    /// The instruction's 8 bytes in the kernel's (little-endian) layout.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[0] = self.code;
        out[1] = self.registers;
        out[2..4].copy_from_slice(&self.offset.to_le_bytes());
        out[4..8].copy_from_slice(&self.immediate.to_le_bytes());
        out
    }
}

/// The redirect program for quiver's flow to `address`:`port`, using the XSKMAP whose
/// descriptor is `map_fd`.
///
/// In C it would read:
/// ```text
/// if (data + 42 > data_end) return XDP_PASS;
/// if (eth->type != 0x0800 || ip->version_ihl != 0x45 || ip->frag & 0x3fff
///     || ip->protocol != UDP || ip->daddr != address || udp->dest != port)
///     return XDP_PASS;
/// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
/// ```
pub fn redirect_program(map_fd: i32, address: Ipv4Addr, port: u16) -> Vec<Instruction> {
    use Instruction as I;
    // Values as a little-endian load of the frame's big-endian bytes sees them.
    let ether_type_ipv4 = i32::from(u16::from_le_bytes([0x08, 0x00]));
    let fragment_mask = i32::from(u16::from_le_bytes([0x3f, 0xff]));
    let address_le = u32::from_le_bytes(address.octets()) as i32;
    let port_le = i32::from(u16::from_le_bytes(port.to_be_bytes()));
    // Registers: r1 context, r2 data, r3 data_end, r4 bound, r5 scratch, r6 context kept.
    let mut program = vec![
        I::new(MOV64_REG, 6, 1, 0, 0),
        I::new(LDX_W, 2, 6, MD_DATA, 0),
        I::new(LDX_W, 3, 6, MD_DATA_END, 0),
        I::new(MOV64_REG, 4, 2, 0, 0),
        I::new(ADD64_IMM, 4, 0, 0, HEADERS_LEN as i32),
        I::new(JGT_REG, 4, 3, PASS, 0),
        I::new(LDX_H, 5, 2, ETHER_TYPE_AT, 0),
        I::new(JNE32_IMM, 5, 0, PASS, ether_type_ipv4),
        I::new(LDX_B, 5, 2, IP_VERSION_IHL_AT, 0),
        I::new(JNE32_IMM, 5, 0, PASS, 0x45),
        I::new(LDX_H, 5, 2, IP_FRAGMENT_AT, 0),
        I::new(AND64_IMM, 5, 0, 0, fragment_mask),
        I::new(JNE32_IMM, 5, 0, PASS, 0),
        I::new(LDX_B, 5, 2, IP_PROTOCOL_AT, 0),
        I::new(JNE32_IMM, 5, 0, PASS, libc::IPPROTO_UDP),
        I::new(LDX_W, 5, 2, IP_DESTINATION_AT, 0),
        I::new(JNE32_IMM, 5, 0, PASS, address_le),
        I::new(LDX_H, 5, 2, UDP_DESTINATION_PORT_AT, 0),
        I::new(JNE32_IMM, 5, 0, PASS, port_le),
        I::new(LDX_W, 2, 6, MD_RX_QUEUE_INDEX, 0),
        I::new(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map_fd),
        I::new(0, 0, 0, 0, 0),
        I::new(MOV64_IMM, 3, 0, 0, XDP_PASS),
        I::new(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),
        I::new(EXIT, 0, 0, 0, 0),
    ];
    let pass_at = program.len();
    program.extend([
        I::new(MOV64_IMM, 0, 0, 0, XDP_PASS),
        I::new(EXIT, 0, 0, 0, 0),
    ]);
    // Resolve the jumps to `pass`: an offset counts from the next instruction.
    for (index, instruction) in program.iter_mut().enumerate() {
        if instruction.offset == PASS && matches!(instruction.code, JGT_REG | JNE32_IMM) {
            instruction.offset = (pass_at - index - 1) as i16;
        }
    }
    program
}

/// Placeholder offset of a jump to the program's `return XDP_PASS`, resolved at the end
/// (no real jump here goes this far back).
const PASS: i16 = i16::MIN;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_pass_exit() {
        let program = redirect_program(7, Ipv4Addr::new(10, 77, 0, 2), 7100);
        let pass_at = program.len() - 2;
        let mut jumps = 0;
        for (index, instruction) in program.iter().enumerate() {
            if matches!(instruction.code, JGT_REG | JNE32_IMM) {
                jumps += 1;
                assert_eq!(index + 1 + instruction.offset as usize, pass_at);
            }
        }
        assert_eq!(jumps, 7);
        assert_eq!(program[pass_at].to_bytes(), [0xb7, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(program[pass_at + 1].to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn matches_are_the_frame_bytes_as_loaded() {
        let program = redirect_program(9, Ipv4Addr::new(10, 77, 0, 200), 0x1bbc);
        // The address compare: 10.77.0.200 as a little-endian word, high bit set.
        let address = program
            .iter()
            .find(|i| i.offset != 0 && i.immediate == 0xc8004d0au32 as i32);
        assert!(address.is_some(), "{program:?}");
        // The port compare: bytes 1b bc read little-endian.
        assert!(program.iter().any(|i| i.immediate == 0xbc1b));
        // The map load: pseudo map fd in the source register, fd in the immediate.
        let load = program.iter().position(|i| i.code == LD_IMM64).unwrap();
        assert_eq!(program[load].to_bytes()[1], 0x11);
        assert_eq!(program[load].immediate, 9);
        assert_eq!(program[load + 1].to_bytes(), [0; 8]);
    }
}
