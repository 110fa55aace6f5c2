// Baselines a restore is measured against, in the same run on the same bytes: what
// memcpy and a plain sequential read() achieve on this machine right now.
#pragma once

#include <cstdint>
#include <string>

namespace prefixd::bench {

// GB/s of one memcpy of `bytes` bytes between two buffers faulted in beforehand (as a restore's
// source, the RAM Tier's payloads, and destination, the KV cache, are).
double MemcpyGBps(uint64_t bytes);

// GB/s of reading every regular file under `dir` once, sequentially, with read() into one
// 1 MiB buffer (what `cat` does; the page cache as the caller left it). `bytes` gets the total.
double PlainReadGBps(const std::string& dir, uint64_t* bytes);

}  // namespace prefixd::bench
