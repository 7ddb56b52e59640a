#include "remote/worker/worker_backend.h"

#include <chrono>
#include <thread>

namespace gpupool::worker {

using device::FaultMode;

std::string WorkerBackend::Reason() const {
  return std::string(state_->reason, strnlen(state_->reason, sizeof(state_->reason)));
}

device::HealthState WorkerBackend::Health(int index) {
  if (index != gpu_.index) return {device::Health::kFailed, "no such GPU"};
  if (state_->failed.load() != 0) return {device::Health::kFailed, Reason()};
  if (failed_here_.load()) return {device::Health::kFailed, "injected: failed after operations"};
  return {};
}

device::Fault WorkerBackend::CurrentFault(int index) {
  device::Fault fault;
  if (index != gpu_.index) return fault;
  fault.mode = static_cast<FaultMode>(state_->fault_mode.load());
  fault.ops = state_->fail_after.load();
  return fault;
}

Status WorkerBackend::BeforeOperation(int index) {
  if (index != gpu_.index) return Status::NotFound("no GPU with index " + std::to_string(index));
  counters_->operations.fetch_add(1);
  // An injected hang: wait until the supervisor clears or changes it (or we stop).
  while (static_cast<FaultMode>(state_->fault_mode.load()) == FaultMode::kHang && !stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (stopping_) return Status::Unavailable("worker stopping");
  if (static_cast<FaultMode>(state_->fault_mode.load()) == FaultMode::kFailAfter && state_->failed.load() == 0 &&
      !failed_here_.load()) {
    const uint32_t generation = state_->generation.load();
    if (generation != fail_after_generation_) {
      fail_after_generation_ = generation;
      fail_after_left_ = state_->fail_after.load();
    }
    if (fail_after_left_.load() == 0) {
      failed_here_ = true;
      if (report_) report_("fail_after");
    } else {
      fail_after_left_.fetch_sub(1);
    }
  }
  device::HealthState health = Health(index);
  if (health.health == device::Health::kFailed) {
    return Status::Unavailable("GPU " + std::to_string(index) + " (" + gpu_.uuid + ") has failed: " + health.reason);
  }
  return Status::OK();
}

void WorkerBackend::ReportFailure(int index, const std::string& reason) {
  if (index != gpu_.index) return;
  if (report_) report_(reason);
}

}  // namespace gpupool::worker
