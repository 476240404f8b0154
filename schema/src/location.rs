//! Where an allocation's memory lives, when the call says so itself: the location and
//! allocation type of the pool it came from (CUDA 13 has host, host-NUMA and managed
//! pools beside device pools), or the location in `cuMemCreate`'s properties. The API
//! alone cannot tell: `cuMemAllocFromPoolAsync` from a host pool takes host memory.

/// `CUmemLocationType` (cuda.h): `CU_MEM_LOCATION_TYPE_HOST` and its NUMA forms.
pub const CU_MEM_LOCATION_TYPE_HOST: u32 = 2;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: u32 = 3;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: u32 = 4;
/// `CUmemAllocationType`: `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13 pools).
pub const CU_MEM_ALLOCATION_TYPE_MANAGED: u32 = 2;

/// The memory an allocation takes, by where it lives. `Device` is the default: every
/// API whose memory the name decides (`cudaMalloc`, `cuMemHostAlloc`) has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// Where the API puts it (for pools and `cuMemCreate`: a device).
    #[default]
    Device,
    /// Host memory, page-locked (`CU_MEM_LOCATION_TYPE_HOST`).
    Host,
    /// Host memory on one NUMA node (`CU_MEM_LOCATION_TYPE_HOST_NUMA`; the event's
    /// `numa` is the node).
    HostNuma,
    /// Host memory on the calling thread's NUMA node (`..._HOST_NUMA_CURRENT`).
    HostNumaCurrent,
    /// A managed (unified memory) pool, whatever its preferred location.
    Managed,
}

impl Location {
    pub const ALL: [Location; 5] = [
        Location::Device,
        Location::Host,
        Location::HostNuma,
        Location::HostNumaCurrent,
        Location::Managed,
    ];

    /// Where memory with the driver's location type and allocation type lives. Any other
    /// location type (device, a device's locality domain) is device memory.
    pub fn from_driver(location_type: u32, allocation_type: u32) -> Location {
        if allocation_type == CU_MEM_ALLOCATION_TYPE_MANAGED {
            return Location::Managed;
        }
        match location_type {
            CU_MEM_LOCATION_TYPE_HOST => Location::Host,
            CU_MEM_LOCATION_TYPE_HOST_NUMA => Location::HostNuma,
            CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Location::HostNumaCurrent,
            _ => Location::Device,
        }
    }

    /// The name in traces (`"loc"`) and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Location::Device => "device",
            Location::Host => "host",
            Location::HostNuma => "host_numa",
            Location::HostNumaCurrent => "host_numa_current",
            Location::Managed => "managed",
        }
    }

    pub fn from_name(name: &str) -> Option<Location> {
        Location::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The location and a NUMA node as one word (the interposer keeps them so): the
    /// location's index in [`Location::ALL`], and the node + 1 above it (0: none).
    pub fn to_word(self, numa: Option<u32>) -> u64 {
        let index = Location::ALL.iter().position(|&l| l == self).unwrap_or(0) as u64;
        index | (numa.map_or(0, |n| n as u64 + 1) << 8)
    }

    pub fn from_word(w: u64) -> (Location, Option<u32>) {
        let loc = Location::ALL
            .get((w & 0xff) as usize)
            .copied()
            .unwrap_or_default();
        let numa = (w >> 8).checked_sub(1).map(|n| n as u32);
        (loc, numa)
    }

    /// Where memory of `kind` that an event placed here lives, when it is not device
    /// memory: pinned host memory (where the event said, else the host) or a managed
    /// pool's; `None` for device memory.
    pub fn off_device(self, kind: crate::api::Kind) -> Option<Location> {
        use crate::api::Kind;
        match kind {
            Kind::Host if self == Location::Device => Some(Location::Host),
            Kind::Host => Some(self),
            Kind::ManagedPool => Some(Location::Managed),
            _ => None,
        }
    }

    /// Host memory of any kind: never device memory.
    pub fn is_host(self) -> bool {
        matches!(
            self,
            Location::Host | Location::HostNuma | Location::HostNumaCurrent
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_values_name_the_location() {
        // CU_MEM_LOCATION_TYPE_DEVICE 1, ..._INVISIBLE 5, ..._DEVICE_LOCALITY_DOMAIN 6.
        for device in [0, 1, 5, 6] {
            assert_eq!(Location::from_driver(device, 1), Location::Device);
        }
        assert_eq!(Location::from_driver(2, 1), Location::Host);
        assert_eq!(Location::from_driver(3, 1), Location::HostNuma);
        assert_eq!(Location::from_driver(4, 1), Location::HostNumaCurrent);
        // A managed pool's location is only its preference (NONE is 0).
        for location in [0, 1, 2, 3] {
            assert_eq!(Location::from_driver(location, 2), Location::Managed);
        }
        for l in Location::ALL {
            assert_eq!(Location::from_name(l.name()), Some(l));
            for numa in [None, Some(0), Some(u32::MAX)] {
                assert_eq!(Location::from_word(l.to_word(numa)), (l, numa));
            }
        }
    }
}
