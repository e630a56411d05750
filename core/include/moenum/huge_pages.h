// Large buffers on transparent huge pages. A fresh allocation of tens of MB is mmapped, and its first
// touch faults in (and zeroes) one 4 KB page at a time: on the developer machine (THP "madvise") that
// costs 0.20 s per 235 MB buffer, more than MXFP8-quantizing into it; advised for 2 MB pages, 0.025 s.
// The oracles, the stage checks and the GPU backends' downloads allocate gigabytes of such buffers at
// production shapes. A hint only: where the kernel's THP setting is "never" it changes nothing, and
// it never changes a value.
#pragma once
#include <cstddef>

namespace moenum {

// Below this glibc serves allocations from its heaps, whose pages are reused: nothing to gain.
inline constexpr size_t kHugePageAdviseMin = size_t{32} << 20;

// Advise the 2 MB-aligned interior of [data, data + bytes) for huge pages, before its first touch.
void advise_huge_pages(void* data, size_t bytes);

}  // namespace moenum
