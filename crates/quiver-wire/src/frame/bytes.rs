//! Little-endian reads and writes of fixed-size integers at byte offsets.
//!
//! Layer: quiver-wire, the bottom. Callers check lengths first: these index the slice
//! and would panic on a short one.

pub(super) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut array = [0u8; 4];
    array.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(array)
}

pub(super) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(array)
}

pub(super) fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
