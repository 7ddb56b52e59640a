// Live resources: what the journal's requests made that still exists (allocations,
// modules, streams, events), and which device memory launches may have written.
#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

// Keeps live_, ranges_ and written_ in step with one request.
void Failover::Track(const Entry& entry, const Reply* reply) {
  switch (entry.op) {
    case dp::kOpMemAlloc: {
      dp::MemAllocArgs args{};
      dp::MemAllocResult result{};
      if (!ReadStruct(entry.args, &args) || reply == nullptr || !ReadStruct(reply->out, &result)) {
        return;
      }
      if (args.address != result.dptr) {
        Unprotect(
            "its agent could not place memory at the address this process chose "
            "(its GPU or driver lacks the VMM API, or the address is taken there)");
        return;
      }
      live_[{kAllocation, result.dptr}] = Resource{next_seq_++, entry, 0};
      ranges_[result.dptr] = args.size;
      return;
    }
    case dp::kOpMemFree: {
      dp::MemFreeArgs args{};
      if (!ReadStruct(entry.args, &args)) return;
      live_.erase({kAllocation, args.dptr});
      ranges_.erase(args.dptr);
      written_.erase(args.dptr);
      return;
    }
    case dp::kOpModuleLoad: {
      dp::ModuleLoadArgs args{};
      dp::ModuleLoadResult result{};
      if (!ReadStruct(entry.args, &args) || reply == nullptr || !ReadStruct(reply->out, &result)) {
        return;
      }
      if (result.globals_size > 0) {
        if (args.globals_base != 0 && args.globals_base != result.globals_base) {
          Unprotect(
              "its agent cannot place module variables at the addresses "
              "this process "
              "chose");
          return;
        }
        ranges_[result.globals_base] = result.globals_size;
        module_globals_[args.module] = result.globals_base;
      }
      live_[{kModule, args.module}] = Resource{next_seq_++, entry, 0};
      return;
    }
    case dp::kOpModuleUnload: {
      dp::ModuleUnloadArgs args{};
      if (!ReadStruct(entry.args, &args)) return;
      live_.erase({kModule, args.module});
      for (auto it = live_.begin(); it != live_.end();) {
        bool function_of_module = it->first.first == kFunction && it->second.owner == args.module;
        it = function_of_module ? live_.erase(it) : std::next(it);
      }
      if (auto globals = module_globals_.find(args.module); globals != module_globals_.end()) {
        ranges_.erase(globals->second);
        written_.erase(globals->second);
        module_globals_.erase(globals);
      }
      return;
    }
    case dp::kOpGetFunction: {
      dp::GetFunctionArgs args{};
      if (!ReadStruct(entry.args, &args)) return;
      live_[{kFunction, args.function}] = Resource{next_seq_++, entry, args.module};
      return;
    }
    case dp::kOpStreamCreate:
    case dp::kOpStreamDestroy: {
      dp::StreamArgs args{};
      if (!ReadStruct(entry.args, &args)) return;
      if (entry.op == dp::kOpStreamCreate) {
        live_[{kStream, args.stream}] = Resource{next_seq_++, entry, 0};
      } else {
        live_.erase({kStream, args.stream});
      }
      return;
    }
    case dp::kOpEventCreate:
    case dp::kOpEventDestroy: {
      dp::EventArgs args{};
      if (!ReadStruct(entry.args, &args)) return;
      if (entry.op == dp::kOpEventCreate) {
        live_[{kEvent, args.event}] = Resource{next_seq_++, entry, 0};
      } else {
        live_.erase({kEvent, args.event});
      }
      return;
    }
    case dp::kOpMemcpyHtoD: {
      dp::MemcpyHtoDArgs args{};
      if (ReadStruct(entry.args, &args)) MarkWritten(args.dst);
      return;
    }
    case dp::kOpMemcpyDtoD: {
      dp::MemcpyDtoDArgs args{};
      if (ReadStruct(entry.args, &args)) MarkWritten(args.dst);
      return;
    }
    case dp::kOpMemset: {
      dp::MemsetArgs args{};
      if (ReadStruct(entry.args, &args)) MarkWritten(args.dst);
      return;
    }
    case dp::kOpLaunch:
      MarkLaunchWrites(entry);
      return;
    default:
      return;
  }
}

bool Failover::RangeHolding(uint64_t address, uint64_t* start) const {
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return false;
  const auto& [first, size] = *std::prev(after);
  if (address - first >= size) return false;
  *start = first;
  return true;
}

void Failover::MarkWritten(uint64_t address) {
  uint64_t start = 0;
  if (RangeHolding(address, &start)) written_[start] = true;
}

// A kernel may write what its pointer arguments reach, and its module's
// variables. GPUs keep no dirty bits: arguments are the evidence (PhoenixOS's
// approach, without the validation); scope=all covers programs that reach
// memory through pointers stored in device memory.
void Failover::MarkLaunchWrites(const Entry& launch) { MayWrite(launch, &written_); }

void Failover::AddWriteThrough(uint64_t via, uint64_t target) {
  std::lock_guard<std::mutex> lock(mu_);
  write_through_.emplace(via, target);
}

void Failover::MayWrite(const Entry& launch, std::map<uint64_t, bool>* ranges) const {
  dp::LaunchArgs args{};
  if (!ReadStruct(launch.args, &args)) return;
  if (config_.scope_all) {
    for (const auto& [start, size] : ranges_) (*ranges)[start] = true;
    return;
  }
  for (size_t offset = 0; offset + sizeof(uint64_t) <= launch.payload.size(); offset += 8) {
    uint64_t word = 0;
    std::memcpy(&word, launch.payload.data() + offset, sizeof(word));
    uint64_t start = 0;
    if (!RangeHolding(word, &start)) continue;
    (*ranges)[start] = true;
    // A surface's array, written through the descriptor the launch names.
    for (auto [at, end] = write_through_.equal_range(start); at != end; ++at) {
      if (ranges_.count(at->second)) (*ranges)[at->second] = true;
    }
  }
  auto function = live_.find({kFunction, args.function});
  if (function == live_.end()) return;
  if (auto globals = module_globals_.find(function->second.owner); globals != module_globals_.end()) {
    (*ranges)[globals->second] = true;
  }
}

}  // namespace gpupool::client
