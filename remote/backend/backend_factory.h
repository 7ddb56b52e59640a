// MakeBackend: the one place that turns a backend name ("sim", "cuda") into a GpuBackend.
#pragma once

#include <memory>
#include <string>

#include "common/config.h"
#include "remote/backend/backend.h"

namespace gpupool::backend {

// `config.host` seeds the sim backend's UUIDs (gethostname() when empty). Errors are one
// line: an unknown name, a bad sim inventory, or why the cuda backend cannot start here.
Result<std::unique_ptr<GpuBackend>> MakeBackend(const std::string& name, const AgentConfig& config);

}  // namespace gpupool::backend
