// Random tokens for credentials gpupool hands out (lease tokens, API sessions).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace gpupool {

// `bytes` bytes from getrandom(2), as 2*bytes lowercase hex digits. Fails (kInternal,
// naming the errno) when the kernel's random source keeps failing, rather than spinning
// or handing out a predictable credential.
Result<std::string> RandomHex(size_t bytes);

}  // namespace gpupool
