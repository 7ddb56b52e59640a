// The name and text of each CUresult a driver knows (cuGetErrorName, cuGetErrorString),
// for the exported functions and for what this library logs.
#pragma once

#include <cuda.h>

namespace gpupool::client {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

// nullptr for a code the driver does not know.
const ErrorText* FindError(CUresult code);

}  // namespace gpupool::client
