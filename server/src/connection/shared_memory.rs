//! Memory the server shares with every connection and never changes (the
//! catalog's carriers), so a connection may send from it without copying.
//!
//! h2 hands its writer borrowed slices (`&[u8]`), so the write buffer
//! ([`crate::connection::coalesce`]) must copy what it gathers: it cannot
//! keep a borrow past the call. But when a slice lies in memory that
//! [`SharedMemory`] holds, the same bytes are already owned elsewhere, and
//! [`SharedMemory::share`] gives them back as [`Bytes`] that point at them:
//! the writer keeps a reference, not a copy.
//!
//! This is sound without `unsafe`: a slice is matched by its address range,
//! the regions are alive (held here) and immutable, so any slice inside one
//! reads exactly the region's bytes, and [`Bytes::slice_ref`] makes the
//! reference.

use bytes::Bytes;

/// Immutable regions of memory, sorted by address.
#[derive(Debug, Default)]
pub struct SharedMemory {
    regions: Vec<Bytes>,
}

impl SharedMemory {
    /// Regions whose slices may be shared. They must not overlap (separate
    /// allocations never do); a slice in two regions would only be copied.
    pub fn new(mut regions: Vec<Bytes>) -> Self {
        regions.retain(|region| !region.is_empty());
        regions.sort_by_key(|region| region.as_ptr() as usize);
        Self { regions }
    }

    /// `slice` as bytes that point at it, if it lies wholly in one region;
    /// `None` otherwise (including an empty slice).
    pub fn share(&self, slice: &[u8]) -> Option<Bytes> {
        if slice.is_empty() {
            return None;
        }
        let start = slice.as_ptr() as usize;
        // The last region that starts at or before the slice.
        let after = self
            .regions
            .partition_point(|region| region.as_ptr() as usize <= start);
        let region = &self.regions[after.checked_sub(1)?];
        let region_end = region.as_ptr() as usize + region.len();
        (start + slice.len() <= region_end).then(|| region.slice_ref(slice))
    }

    /// Bytes the regions span: what the connections share, counted once.
    pub fn len(&self) -> usize {
        self.regions.iter().map(Bytes::len).sum()
    }

    /// No regions: nothing is shared.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> (SharedMemory, Vec<Bytes>) {
        let regions: Vec<Bytes> = (1..=5u8).map(|i| Bytes::from(vec![i; 1000])).collect();
        (SharedMemory::new(regions.clone()), regions)
    }

    /// Given five separate regions, when slices of each are offered (whole,
    /// start, middle, end), then each comes back as bytes pointing at the
    /// same address, equal to the slice: a reference, not a copy.
    #[test]
    fn slices_inside_a_region_are_shared_in_place() {
        let (memory, regions) = memory();
        for region in &regions {
            for range in [0..1000, 0..1, 400..600, 999..1000] {
                let slice = &region[range.clone()];
                let shared = memory.share(slice).expect("inside a region");
                assert_eq!(shared.as_ptr(), slice.as_ptr(), "{range:?}");
                assert_eq!(&shared[..], slice);
            }
        }
        assert_eq!(memory.len(), 5000);
    }

    /// Given the regions, when a slice lies outside them (other memory, or
    /// a copy of a region's bytes), then it is not shared, whatever its
    /// content.
    #[test]
    fn other_memory_is_not_shared() {
        let (memory, regions) = memory();
        let copy = regions[2].to_vec();
        assert_eq!(memory.share(&copy), None, "same bytes, other memory");
        assert_eq!(memory.share(&[1, 2, 3]), None);
        assert_eq!(memory.share(&regions[0][..0]), None, "empty");
        assert_eq!(SharedMemory::default().share(&regions[0]), None);
    }

    /// Given two regions cut from one buffer, side by side, when a slice
    /// spans the boundary between them, then it is not shared: a region
    /// is the unit, and a slice running past one is copied.
    #[test]
    fn a_slice_running_past_its_region_is_not_shared() {
        let whole = Bytes::from(vec![7u8; 2000]);
        let memory = SharedMemory::new(vec![whole.slice(1000..), whole.slice(..1000)]);
        assert_eq!(memory.share(&whole[900..1100]), None, "spans both");
        assert!(memory.share(&whole[900..1000]).is_some(), "first only");
        assert!(memory.share(&whole[1000..1100]).is_some(), "second only");
    }
}
