// Stable identities for simulated GPUs: the same host name and index always give the same
// UUID and PCI bus id, so a restarted sim agent re-registers the same GPUs with gpupoold
// (whose inventory is keyed by UUID) and two sim hosts never collide.
#pragma once

#include <string>

namespace gpupool::devices {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex, as nvidia-smi prints them),
// derived from a 128-bit FNV-1a hash of host and index. The version nibble says 4 and the
// variant bits say RFC 4122 so tools that parse UUIDs accept it.
std::string DeterministicGpuUuid(const std::string& host, int index);

// "0000:BB:00.0": bus numbers spaced like the GPUs of an 8-GPU server.
std::string SimPciBusId(int index);

// True when `text` has the shape of a GPU UUID ("GPU-" + 8-4-4-4-12 hex digits).
bool LooksLikeGpuUuid(const std::string& text);

}  // namespace gpupool::devices
