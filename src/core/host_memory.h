// How much memory this process may still take on this machine: what a device that lives in host
// memory (the CPU, a worker) reports free, so that a plan refuses before it allocates.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

// MemAvailable of /proc/meminfo (what the kernel can give without swapping: free memory and
// the page cache it can drop), lowered to the room left under this process's cgroup memory
// limits (v2 memory.max - memory.current on its cgroup and every ancestor, or v1's
// limit_in_bytes - usage_in_bytes). 0 when nothing can be read.
uint64_t host_memory_available();

// The parsers behind it, on the files' text. MemAvailable in bytes, if the text has it.
std::optional<uint64_t> meminfo_available(std::string_view meminfo);
// limit - usage, from a cgroup's limit file ("max" or a byte count) and its usage file; nullopt
// when there is no limit ("max", or v1's "no limit" value past 2^62) or the text is not a number.
std::optional<uint64_t> cgroup_room(std::string_view limit, std::string_view usage);

}  // namespace strata
