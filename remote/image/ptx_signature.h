// Kernel parameter layouts from PTX text: a `.ptx` module has no cubin and so
// no .nv.info records; the `.entry` declarations give each parameter's type,
// alignment and array size, from which the packed layout follows (natural
// alignment, as the driver packs cuLaunchKernel arguments).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "remote/image/fatbin.h"

namespace gpupool::image {

// Layouts of every `.entry` in `ptx`, by name. Fails with InvalidArgument
// naming the kernel whose declaration cannot be read.
Result<std::map<std::string, KernelLayout>> ParsePtxSignatures(std::string_view ptx);

}  // namespace gpupool::image
