//! What stands for the driver under the allocator: `cudaMalloc` and `cudaFree` of whole
//! segments, and for expandable segments the reservation of address space and the mapping
//! of pages into it.

pub trait Device {
    /// A segment of `size` bytes while the allocator holds `reserved`: its address, or
    /// `None` for out of memory.
    fn malloc(&mut self, size: u64, reserved: u64) -> Option<u64>;
    fn free(&mut self, addr: u64, size: u64);
    /// `cuMemAddressReserve` of `size` bytes of address space: its address.
    fn reserve(&mut self, size: u64) -> u64;
    /// `cuMemCreate` + `cuMemMap` of `size` bytes at `addr`; false for out of memory.
    fn map(&mut self, addr: u64, size: u64, reserved: u64) -> bool;
    fn unmap(&mut self, addr: u64, size: u64);
    /// `cuMemAddressFree` of a reservation.
    fn release(&mut self, addr: u64);
    /// What `cudaMemGetInfo` would call free while the allocator holds `reserved`, where
    /// the device knows it (a card of known capacity); `None` where it does not.
    fn free_memory(&self, _reserved: u64) -> Option<u64> {
        None
    }
}
