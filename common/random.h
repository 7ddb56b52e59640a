// Random tokens for credentials gpupool hands out (lease tokens, API sessions).
#pragma once

#include <cstddef>
#include <string>

namespace gpupool {

// `bytes` bytes from getrandom(2), as 2*bytes lowercase hex digits.
std::string RandomHex(size_t bytes);

}  // namespace gpupool
