#include "remote/client/failover/failover.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "remote/client/failover/failover_report.h"
#include "remote/client/core/log.h"

namespace gpupool::client {

namespace dp = dataplane;
using transport::ClientConnection;
using transport::Reply;
using transport::Request;

namespace {

// Uploads of at least this many bytes have their journal copy made while the
// bytes are in flight (Deliver), in slices of kOverlapSlice between progress of
// the send.
constexpr size_t kOverlappedPayload = size_t{64} << 10;
constexpr size_t kOverlapSlice = size_t{256} << 10;
// The op of a log entry a later upload made unnecessary (Failover::Append):
// neither replayed nor applied.
constexpr uint32_t kDroppedEntry = 0;

// Copies host bytes into the journal. Not glibc's memcpy: below the L2 size it uses
// `rep movsb`, which on AMD Zen (the dev VM's AMD EPYC; many GPU hosts) ran the
// journal copy of an upload at 1.5-2 GB/s instead of 9 while the agent pulled the same
// bytes (scripts/bench/remote, shm, 1-16 MiB cudaMemcpy H2D: 1.6 GB/s against 9.2 with
// this loop). Plain vector loads and stores have no such slow path.
void CopyBytes(char* to, const char* from, size_t size) {
#if defined(__x86_64__)
  size_t done = 0;
  for (; done + 64 <= size; done += 64) {
    const auto* in = reinterpret_cast<const __m128i*>(from + done);
    auto* out = reinterpret_cast<__m128i*>(to + done);
    const __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1), c = _mm_loadu_si128(in + 2),
                  d = _mm_loadu_si128(in + 3);
    _mm_storeu_si128(out, a);
    _mm_storeu_si128(out + 1, b);
    _mm_storeu_si128(out + 2, c);
    _mm_storeu_si128(out + 3, d);
  }
  if (done < size) std::memcpy(to + done, from + done, size - done);
#else
  if (size > 0) std::memcpy(to, from, size);
#endif
}

// Appends `size` bytes at `from` to `bytes`.
void AppendBytes(JournalBytes* bytes, const char* from, size_t size) {
  const size_t at = bytes->size();
  bytes->resize(at + size);
  CopyBytes(bytes->data() + at, from, size);
}

template <typename Bytes, typename T>
bool ReadStruct(const Bytes& bytes, T* out) {
  if (bytes.size() != sizeof(T)) return false;
  std::memcpy(out, bytes.data(), sizeof(T));
  return true;
}

// Requests that leave the device as it was (queries, reads, waits).
bool ChangesState(uint32_t op) {
  switch (op) {
    case dp::kOpHello:
    case dp::kOpMemGetInfo:
    case dp::kOpMemcpyDtoH:
    case dp::kOpStreamSynchronize:
    case dp::kOpStreamQuery:
    case dp::kOpEventSynchronize:
    case dp::kOpEventQuery:
    case dp::kOpEventElapsed:
    case dp::kOpContextSynchronize:
    case dp::kOpModuleGetGlobal:
    case dp::kOpRecovered:
      return false;
    default:
      return true;
  }
}

// Replies that carry the device printf text of the requests before them.
void ShowOutput(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

bool ParseSeconds(const char* text, std::chrono::milliseconds* out) {
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0) || seconds > 86400 * 365) return false;
  *out = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  return true;
}

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string Size(uint64_t bytes) {
  char text[32];
  if (bytes < (uint64_t{1} << 20)) {
    std::snprintf(text, sizeof(text), "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else if (bytes < (uint64_t{1} << 30)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", MiB(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  }
  return text;
}

}  // namespace

bool ParseByteSize(const std::string& text, uint64_t* bytes) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  std::string suffix(end);
  int shift = 0;
  if (suffix == "" || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return false;
  }
  if (value > (~0ull >> shift)) return false;
  *bytes = static_cast<uint64_t>(value) << shift;
  return true;
}

FailoverConfig FailoverConfig::FromEnvironment(std::vector<std::string>* errors) {
  FailoverConfig config;
  if (const char* mode = std::getenv("GPUPOOL_FAILOVER"); mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "off") == 0) {
      config.mode = Mode::kOff;
    } else if (std::strcmp(mode, "migrate") == 0) {
      config.mode = Mode::kMigrate;
    } else if (std::strcmp(mode, "replay") == 0) {
      config.mode = Mode::kReplay;
    } else {
      errors->push_back(std::string("GPUPOOL_FAILOVER='") + mode +
                        "' is not one of off, migrate, replay; using replay");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_INTERVAL"); v != nullptr && *v != '\0') {
    if (!ParseSeconds(v, &config.checkpoint_interval)) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_INTERVAL='") + v +
                        "' is not a number of seconds; using 1");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_MEM"); v != nullptr && *v != '\0') {
    if (!ParseByteSize(v, &config.checkpoint_mem)) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_MEM='") + v +
                        "' is not a size (e.g. 512M, 8G); using 4G");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_RECOVERY_DEADLINE"); v != nullptr && *v != '\0') {
    if (!ParseSeconds(v, &config.recovery_deadline)) {
      errors->push_back(std::string("GPUPOOL_RECOVERY_DEADLINE='") + v +
                        "' is not a number of seconds; using 300");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_SCOPE"); v != nullptr && *v != '\0') {
    if (std::strcmp(v, "all") == 0) {
      config.scope_all = true;
    } else if (std::strcmp(v, "arguments") != 0) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_SCOPE='") + v +
                        "' is not one of arguments, all; using arguments");
    }
  }
  return config;
}

bool ReadLeaseFileSlot(const std::string& path, int slot, GpuLocation* location) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json lease = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return LeaseSlot(lease, slot, location);
}

Failover::Failover(FailoverConfig config, int device, int slot, std::string lease_file,
                   OpenSession open_session)
    : config_(config),
      device_(device),
      slot_(slot),
      lease_file_(std::move(lease_file)),
      open_session_(std::move(open_session)) {
  protecting_ = config_.mode != FailoverConfig::Mode::kOff;
}

void Failover::Unprotect(const std::string& why) {
  if (!protecting_) return;
  protecting_ = false;
  live_.clear();
  base_.clear();
  ranges_.clear();
  module_globals_.clear();
  saved_.clear();
  written_.clear();
  log_.clear();
  held_.clear();
  any_held_.store(false, std::memory_order_relaxed);
  last_upload_.clear();
  spare_.clear();
  spare_bytes_ = 0;
  started_.clear();
  log_bytes_ = 0;
  checkpoint_bytes_ = 0;
  if (!unprotected_logged_) {
    unprotected_logged_ = true;
    LogError(
        "GPU %d: this process is not protected against a failure of its "
        "GPU: %s",
        device_, why.c_str());
  }
}

int32_t Failover::Deliver(Channel* channel, Delivery how, const Request& request, Reply* reply,
                          Status* transport_error, bool* moved) {
  std::lock_guard<std::mutex> wire(mu_);
  *moved = false;
  WatchLease(channel);
  // Any two-way request may tell the program that its asynchronous copies are done (a
  // synchronisation, a query, an event), after which it may change their sources.
  if (how != Delivery::kPost && !held_.empty()) CaptureHeld();
  // An asynchronous upload from page-locked memory is logged by reference (Sent); another
  // large upload has its journal copy made while its bytes are in flight, not before.
  const bool held = how == Delivery::kPost && request.payload_held_until_sync &&
                    request.op == dp::kOpMemcpyHtoD;
  const bool overlapped = how == Delivery::kPost && protecting_ && !held &&
                          request.payload_len >= kOverlappedPayload && ChangesState(request.op);
  // Made only for an overlapped upload: an Entry (also an empty std::optional<Entry>) costs
  // its zeroing on every call.
  std::unique_ptr<Entry> upload;
  sending_seq_ = protecting_ ? channel->connection->next_sequence() : 0;
  if (overlapped) {
    upload = std::make_unique<Entry>(StartOverlappedEntry(request));
  } else if (how != Delivery::kCall) {
    Sent(request, how == Delivery::kStart);
  }
  // A replacement that fails too is replaced in turn, a few times at most.
  for (int attempt = 0;; ++attempt) {
    int32_t status = dp::kCuSuccess;
    Status sent;
    if (overlapped && attempt == 0) {
      const char* source = static_cast<const char*>(request.payload);
      size_t copied = 0;
      sent = channel->connection->PostOverlapped(request, [&]() {
        size_t take = std::min(kOverlapSlice, request.payload_len - copied);
        AppendBytes(&upload->payload, source + copied, take);
        copied += take;
        return copied < request.payload_len;
      });
      LogSent(std::move(*upload));  // before a recovery, which replays the log
    } else {
      sent = how == Delivery::kCall   ? channel->connection->Call(request, reply)
             : how == Delivery::kPost ? channel->connection->Post(request)
                                      : channel->connection->Start(request);
    }
    if (!sent.ok()) {
      status = dp::kCuDeviceUnavailable;
    } else if (how == Delivery::kCall) {
      status = reply->async_status != 0 ? reply->async_status : reply->status;
    }
    // A request that lost the connection again right after a recovery sent it anew ended
    // a second session's process: its own input is the cause (a tenant fault), and no
    // third GPU is tried with it.
    const bool ended_twice = attempt > 0 && !sent.ok();
    if (ended_twice) {
      LogError("GPU %d: request %u ended the new session on %s too: the program's own work "
               "ends the sessions that run it; not recovering again",
               device_, request.op, channel->location.uuid.c_str());
    }
    if (status != dp::kCuSuccess && attempt < 4 && !ended_twice && Recoverable(status) &&
        Recover(&channel->connection, &channel->location, &channel->description, status)) {
      *moved = true;
      if (how != Delivery::kCall) return dp::kCuSuccess;
      *reply = Reply();
      continue;
    }
    if (!sent.ok()) {
      *transport_error = sent;
      return status;
    }
    if (how == Delivery::kCall) {
      Answered(request, *reply);
      if (status == dp::kCuSuccess) {
        MaybeCheckpoint(channel->connection.get(), dp::Synchronises(request.op));
      }
    } else {
      MaybeCheckpoint(channel->connection.get(), false);
    }
    return status;
  }
}

// A call waiting on a hung GPU gives up once the lease names another GPU in its place
// (the agent's watchdog reported the hang, gpupoold swapped the GPU, spank_gpupool's
// watcher rewrote the lease file): the wait ends as a lost connection, and Deliver
// recovers from it.
// A call waiting on an agent whose host stopped answering (its connections open, nothing
// sent) asks gpupoold after a second: see AskAboutSilentAgent.
void Failover::WatchLease(Channel* channel) {
  if (!protecting_ || (lease_file_.empty() && !report_lost_) ||
      channel->connection.get() == watched_) {
    return;
  }
  watched_ = channel->connection.get();
  channel->connection->SetAbandonCheck([this, channel]() -> std::string {
    GpuLocation named;
    if (!lease_file_.empty() && ReadLeaseFileSlot(lease_file_, slot_, &named) &&
        named.uuid != channel->location.uuid) {
      return "the lease names " + named.uuid + " in place of " + channel->location.uuid;
    }
    return AskAboutSilentAgent(channel->location);
  });
}

std::string Failover::AskAboutSilentAgent(const GpuLocation& waiting_on) {
  if (!report_lost_) return "";
  const auto now = std::chrono::steady_clock::now();
  if (sending_seq_ != silent_wait_seq_) {
    // A new wait, at its first check (the transport checks once it has slept 200 ms).
    silent_wait_seq_ = sending_seq_;
    silent_backoff_ = std::chrono::milliseconds(0);
    silent_next_report_ = now + kSilentBeforeReport - std::chrono::milliseconds(200);
    return "";
  }
  if (now < silent_next_report_) return "";
  silent_backoff_ = std::clamp(silent_backoff_ * 2, std::chrono::milliseconds(1000),
                               std::chrono::milliseconds(30000));
  GpuLocation named;
  std::string problem;
  const bool answered = report_lost_(waiting_on, slot_, &named, &problem);
  // Measured from after the answer: a report takes up to gpupoold's probe's second.
  silent_next_report_ = std::chrono::steady_clock::now() + silent_backoff_;
  if (!answered) {
    LogDebug("GPU %d (%s): a call has waited %lld ms; could not ask gpupoold (%s)", device_,
             waiting_on.uuid.c_str(), static_cast<long long>(kSilentBeforeReport.count()),
             problem.c_str());
    return "";
  }
  if (named.uuid.empty() || named.uuid == waiting_on.uuid) return "";  // the agent answered
  silent_named_ = named;
  return "its agent is silent: gpupoold's probe got no answer, and it names " + named.uuid +
         " in place of " + waiting_on.uuid;
}

bool Failover::Recoverable(int32_t status) const {
  if (!protecting_) return false;
  // With migrate, only a planned move (the session revoked, its memory kept) is followed.
  if (config_.mode == FailoverConfig::Mode::kMigrate) return status == dp::kCuNotPermitted;
  return status == dp::kCuDeviceUnavailable || status == dp::kCuEccUncorrectable ||
         status == dp::kCuNotPermitted;
}

void Failover::Sent(const Request& request, bool started) {
  if (!protecting_) return;
  Entry entry;
  entry.op = request.op;
  entry.seq = sending_seq_;
  entry.args.assign(static_cast<const char*>(request.args), request.args_len);
  const bool held = !started && request.payload_held_until_sync &&
                    request.op == dp::kOpMemcpyHtoD && request.payload_len > 0;
  if (held) {
    entry.held = static_cast<const char*>(request.payload);
    // Append drops the upload this one overwrites: its buffer is kept for this one's bytes
    // (CaptureHeld), as StartOverlappedEntry lends it to an overlapped copy.
    if (size_t previous = 0; OverwritesLastUpload(entry, &previous)) {
      SparePayload(&log_[previous]);
    }
  } else if (request.payload_len > 0) {
    const char* bytes = static_cast<const char*>(request.payload);
    entry.payload = TakePayloadBuffer(request.payload_len);
    AppendBytes(&entry.payload, bytes, request.payload_len);
  }
  if (held) {
    LogSent(std::move(entry));
    // Track may have stopped protecting (then the log is gone).
    if (protecting_ && !log_.empty() && log_.back().held != nullptr) {
      held_.push_back(log_.size() - 1);
      any_held_.store(true, std::memory_order_relaxed);
    }
    return;
  }
  if (started) {
    started_.push_back(
        StartedRequest{std::move(entry), request.result_buffer, request.result_capacity});
    return;
  }
  if (!ChangesState(request.op)) return;
  LogSent(std::move(entry));
}

Failover::Entry Failover::StartOverlappedEntry(const Request& request) {
  Entry entry;
  entry.op = request.op;
  entry.seq = sending_seq_;
  entry.args.assign(static_cast<const char*>(request.args), request.args_len);
  size_t previous = 0;
  if (OverwritesLastUpload(entry, &previous)) {
    // Append drops that entry once this one is logged: its buffer takes this copy.
    // (Log entries are only ever read under mu_, which Deliver holds throughout.)
    entry.payload.swap(log_[previous].payload);
    log_bytes_ -= entry.payload.size();
    entry.payload.clear();
  } else {
    entry.payload = TakePayloadBuffer(request.payload_len);
  }
  entry.payload.reserve(request.payload_len);
  return entry;
}

void Failover::ArgBytes::assign(const char* bytes, size_t size) {
  if (size <= kInline) {
    heap_.reset();
    if (size > 0) std::memcpy(inline_, bytes, size);
  } else {
    heap_ = std::make_unique<char[]>(size);
    std::memcpy(heap_.get(), bytes, size);
  }
  size_ = size;
}

void Failover::LogSent(Entry entry) {
  if (!protecting_) return;
  Track(entry, nullptr);
  Append(std::move(entry));
}

// An upload of a whole range makes the range's previous whole upload unnecessary
// when nothing may have read the range in between, on the GPU or in the log: no
// kernel ran since (a kernel may read any memory), no device copy read the range,
// and both went on one stream. That entry is dropped from the log, so a loop of
// uploads into one buffer keeps one journal copy, not one per upload (and reuses
// its buffer: StartOverlappedEntry).
bool Failover::OverwritesLastUpload(const Entry& entry, size_t* index) const {
  if (entry.op != dp::kOpMemcpyHtoD) return false;
  dp::MemcpyHtoDArgs args{};
  if (!ReadStruct(entry.args, &args)) return false;
  auto range = ranges_.find(args.dst);
  if (range == ranges_.end() || range->second != args.size) return false;
  auto last = last_upload_.find(args.dst);
  if (last == last_upload_.end()) return false;
  dp::MemcpyHtoDArgs previous{};
  if (!ReadStruct(log_[last->second].args, &previous) || previous.stream != args.stream) {
    return false;
  }
  *index = last->second;
  return true;
}

void Failover::Append(Entry entry) {
  switch (entry.op) {
    case dp::kOpMemcpyHtoD: {
      dp::MemcpyHtoDArgs args{};
      if (!ReadStruct(entry.args, &args)) break;
      size_t previous = 0;
      if (OverwritesLastUpload(entry, &previous)) {
        Entry& dropped = log_[previous];
        log_bytes_ -= dropped.args.size() + dropped.payload.size();
        dropped_bytes_ += args.size;
        dropped.op = kDroppedEntry;
        dropped.payload = JournalBytes();
      }
      auto range = ranges_.find(args.dst);
      if (range != ranges_.end() && range->second == args.size) {
        last_upload_[args.dst] = log_.size();
      }
      break;
    }
    case dp::kOpMemcpyDtoD: {
      dp::MemcpyDtoDArgs args{};
      uint64_t source = 0;
      if (!ReadStruct(entry.args, &args)) {
        last_upload_.clear();
      } else if (RangeHolding(args.src, &source)) {
        last_upload_.erase(source);
      }
      break;
    }
    case dp::kOpMemAlloc: {
      dp::MemAllocArgs args{};
      if (ReadStruct(entry.args, &args)) last_upload_.erase(args.address);
      break;
    }
    case dp::kOpMemFree: {
      dp::MemFreeArgs args{};
      if (ReadStruct(entry.args, &args)) last_upload_.erase(args.dptr);
      break;
    }
    case dp::kOpMemset:
      break;  // reads nothing
    default:
      last_upload_.clear();  // a kernel, or what else may read device memory
      break;
  }
  log_bytes_ += entry.args.size() + entry.payload.size();
  log_.push_back(std::move(entry));
}

void Failover::Answered(const Request& request, const Reply& reply) {
  // The server answers in order: every request started before this one has its
  // reply.
  started_.clear();
  if (!protecting_ || reply.status != 0 || reply.async_status != 0) return;
  if (ChangesState(request.op)) {
    Entry entry;
    entry.op = request.op;
    entry.call = true;
    entry.args.assign(static_cast<const char*>(request.args), request.args_len);
    if (request.payload_len > 0) {
      const char* bytes = static_cast<const char*>(request.payload);
      entry.payload = TakePayloadBuffer(request.payload_len);
      AppendBytes(&entry.payload, bytes, request.payload_len);
    }
    Track(entry, &reply);
    if (!protecting_) return;
    Append(std::move(entry));
  }
  if (dp::Synchronises(request.op)) printf_delivered_ = log_.size();
}

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
    if (RangeHolding(word, &start)) (*ranges)[start] = true;
  }
  auto function = live_.find({kFunction, args.function});
  if (function == live_.end()) return;
  if (auto globals = module_globals_.find(function->second.owner);
      globals != module_globals_.end()) {
    (*ranges)[globals->second] = true;
  }
}

void Failover::MaybeCheckpoint(ClientConnection* connection, bool synchronised) {
  if (!protecting_ || log_.empty()) return;
  // A log that keeps growing between synchronisations is cut short here instead
  // of holding host memory without bound.
  bool large = log_bytes_ > config_.checkpoint_mem / 4;
  if (large) {
    Checkpoint(connection);
    return;
  }
  if (!synchronised) return;
  bool due = std::chrono::steady_clock::now() - last_checkpoint_ >= config_.checkpoint_interval;
  // A long log of small requests (a stream of launches between synchronisations) is cut
  // at a synchronisation before the interval when the checkpoint is cheap, that is when
  // little device memory may need reading back: otherwise a second's worth of launches
  // (a million of them) is held, costs the host its memory, and takes as long again to
  // replay after a failure.
  bool long_and_cheap = log_.size() >= kLongLog && WrittenBytesBound() <= kCheapReadback;
  if (due || long_and_cheap) Checkpoint(connection);
}

uint64_t Failover::WrittenBytesBound() const {
  uint64_t bytes = 0;
  for (const auto& [start, dirty] : written_) {
    if (auto range = ranges_.find(start); range != ranges_.end()) bytes += range->second;
  }
  return bytes;
}

// The requests whose bytes ApplyLog puts in the images on the host (the other requests
// it looks at only classify what is known).
static bool WritesImages(uint32_t op) {
  return op == dp::kOpMemcpyHtoD || op == dp::kOpMemset || op == dp::kOpMemcpyDtoD;
}

bool Failover::Checkpoint(ClientConnection* connection) {
  CaptureHeld();  // the checkpoint applies the log's bytes
  if (config_.mode == FailoverConfig::Mode::kMigrate) {
    // No memory image: a move's memory comes from the old agent. The log is cut where
    // every request before has run (the device idle), which keeps only live resources.
    Reply idle;
    Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
    if (!connection->Call(synchronise, &idle).ok() || idle.status != 0 ||
        idle.async_status != 0) {
      return false;
    }
    ShowOutput(idle.out);
    StartLogAfresh();
    return true;
  }
  uint64_t total = 0;
  for (const auto& [start, size] : ranges_) total += size;
  if (total > config_.checkpoint_mem) {
    Unprotect("its device memory (" + Size(total) + ") is over checkpoint_mem (" +
              Size(config_.checkpoint_mem) + ")");
    return false;
  }
  // Idle: every stream's work has run, so the memory read below is the log's
  // end state.
  Reply idle;
  Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
  if (!connection->Call(synchronise, &idle).ok() || idle.status != 0 || idle.async_status != 0) {
    return false;  // the failure shows at the application's next request
  }
  ShowOutput(idle.out);
  // What the log tells is known without the GPU (ApplyLog); the rest is read
  // into fresh buffers first. Only then, when nothing can fail any more, is the
  // log applied to the previous images in place and the reads put in: a
  // failure in the middle leaves the previous checkpoint and its log intact.
  std::set<uint64_t> unknown, made;
  ApplyLog(false, &unknown, &made);
  std::set<uint64_t> reads(unknown);
  for (const auto& [start, dirty] : written_) {
    if (made.count(start) == 0) reads.insert(start);
  }
  std::map<uint64_t, JournalBytes> fresh;
  for (uint64_t start : reads) {
    auto range = ranges_.find(start);
    if (range == ranges_.end()) continue;
    JournalBytes bytes(range->second);  // the read fills it whole (checked below)
    dp::MemcpyDtoHArgs args{start, range->second, 0};
    Request read{dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, bytes.data(), bytes.size()};
    Reply reply;
    if (!connection->Call(read, &reply).ok() || reply.status != 0 || reply.async_status != 0 ||
        reply.bulk_received != bytes.size()) {
      return false;
    }
    ShowOutput(reply.out);
    readback_bytes_ += bytes.size();
    fresh[start] = std::move(bytes);
  }
  // The second pass only puts in the images what copies and memsets wrote: a log without
  // any (a stream of launches) has nothing to apply, and is walked once.
  if (std::any_of(log_.begin(), log_.end(),
                  [](const Entry& entry) { return WritesImages(entry.op); })) {
    std::set<uint64_t> unknown_again, made_again;
    ApplyLog(true, &unknown_again, &made_again);
  }
  for (auto& [start, bytes] : fresh) saved_[start] = std::move(bytes);
  checkpoint_bytes_ = 0;
  for (auto it = saved_.begin(); it != saved_.end();) {
    if (ranges_.count(it->first) == 0) {
      it = saved_.erase(it);
    } else {
      checkpoint_bytes_ += it->second.size();
      ++it;
    }
  }
  StartLogAfresh();
  return true;
}

void Failover::StartLogAfresh() {
  base_ = live_;
  RecyclePayloads();
  log_.clear();
  last_upload_.clear();
  log_bytes_ = 0;
  printf_delivered_ = 0;
  written_.clear();
  last_checkpoint_ = std::chrono::steady_clock::now();
  ++checkpoints_;
}

// A GPU keeps no dirty bits, but the log says exactly what copies from the host
// and memsets wrote, and a copy between two ranges whose contents are known
// writes known contents: those ranges' images are the previous checkpoint's with
// the log applied, on the host, and only what a kernel may have written (or a
// copy from it) is read back from the GPU. A process that uploads 1 GiB is then
// checkpointed by host copies instead of a second transfer.
//
// Conservative where the log's order may not be the GPU's: a range written on two
// streams since the last checkpoint, or read from a range written on another
// stream, is read back; so is a range a kernel may have written, even if a copy
// overwrote it later.
//
// Two passes over the same log with the same decisions: `apply` false only
// classifies (*unknown: to read back; *made: images the log makes); `apply`
// true, once the reads have succeeded, writes the bytes into saved_ in place
// (ranges read back get scratch writes there, replaced by their reads after).
// Only the requests WritesImages names write images: Checkpoint skips the second
// pass for a log without them.
void Failover::ApplyLog(bool apply, std::set<uint64_t>* unknown, std::set<uint64_t>* made) {
  std::map<uint64_t, uint64_t> stream_of;  // range -> the stream that last wrote it
  std::set<uint64_t> allocated;            // allocated in the log: no previous image
  // The range holding [address, address + size), if one does.
  auto range_of = [&](uint64_t address, uint64_t size, uint64_t* start) {
    return RangeHolding(address, start) && size <= ranges_.at(*start) - (address - *start);
  };
  auto mark_unknown = [&](uint64_t address) {
    uint64_t start = 0;
    if (RangeHolding(address, &start)) unknown->insert(start);
  };
  // Whether the contents of `start` are known at this point of the log.
  auto known = [&](uint64_t start) {
    if (unknown->count(start) != 0) return false;
    if (made->count(start) != 0) return true;
    if (allocated.count(start) != 0) return false;
    auto saved = saved_.find(start);
    return saved != saved_.end() && saved->second.size() == ranges_.at(start);
  };
  // A write of `size` bytes at `address` on `stream`: whether its bytes land in
  // the range's image on the host (false: the range is read back instead).
  auto lands = [&](uint64_t address, uint64_t size, uint64_t stream) {
    uint64_t start = 0;
    if (!range_of(address, size, &start)) {
      mark_unknown(address);
      return false;
    }
    auto last = stream_of.find(start);
    if (last != stream_of.end() && last->second != stream) unknown->insert(start);
    stream_of[start] = stream;
    if (unknown->count(start) != 0) return false;
    const bool whole = address == start && size == ranges_.at(start);
    if (!whole && !known(start)) {
      unknown->insert(start);
      return false;
    }
    made->insert(start);
    return true;
  };
  // Where the bytes of a write that lands at `address` go in its range's image.
  auto image_at = [&](uint64_t address) -> char* {
    uint64_t start = 0;
    RangeHolding(address, &start);
    JournalBytes& image = saved_[start];
    image.resize(ranges_.at(start), 0);  // a whole-range write may make the first image
    return image.data() + (address - start);
  };

  // Writes that a later entry overwrites whole before anything reads them are
  // classified as usual but not applied.
  const std::vector<bool> overwritten = apply ? OverwrittenEntries() : std::vector<bool>();
  for (size_t index = 0; index < log_.size(); ++index) {
    Entry& entry = log_[index];
    const bool skip = apply && overwritten[index];
    if (skip) {
      overwritten_bytes_ += entry.op == dp::kOpMemcpyHtoD ? entry.payload.size() : 0;
    }
    switch (entry.op) {
      case dp::kOpMemAlloc: {
        dp::MemAllocArgs args{};
        if (!ReadStruct(entry.args, &args)) break;
        made->erase(args.address);
        unknown->erase(args.address);
        stream_of.erase(args.address);
        allocated.insert(args.address);
        break;
      }
      case dp::kOpMemcpyHtoD: {
        dp::MemcpyHtoDArgs args{};
        if (!ReadStruct(entry.args, &args) || entry.payload.size() != args.size) {
          mark_unknown(args.dst);
          break;
        }
        if (!lands(args.dst, args.size, args.stream) || !apply || skip) break;
        if (auto range = ranges_.find(args.dst); range != ranges_.end() && range->second == args.size) {
          // A whole range's upload: its buffer becomes the image, and the old image's
          // buffer goes back to the spares with the log's.
          saved_[args.dst].swap(entry.payload);
          break;
        }
        CopyBytes(image_at(args.dst), entry.payload.data(), args.size);
        break;
      }
      case dp::kOpMemset: {
        dp::MemsetArgs args{};
        uint64_t size = 0;
        if (!ReadStruct(entry.args, &args) ||
            (args.element_size != 1 && args.element_size != 2 && args.element_size != 4) ||
            __builtin_mul_overflow(args.count, args.element_size, &size)) {
          mark_unknown(args.dst);
          break;
        }
        if (!lands(args.dst, size, args.stream) || !apply || skip) break;
        if (char* out = image_at(args.dst)) {
          if (args.element_size == 1) {
            std::memset(out, static_cast<int>(args.value & 0xff), size);
          } else if (size > 0) {  // one element, then doubling copies of it
            std::memcpy(out, &args.value, args.element_size);
            for (uint64_t done = args.element_size; done < size; done *= 2) {
              std::memcpy(out + done, out, std::min(done, size - done));
            }
          }
        }
        break;
      }
      case dp::kOpMemcpyDtoD: {
        dp::MemcpyDtoDArgs args{};
        uint64_t source = 0;
        if (!ReadStruct(entry.args, &args) || !range_of(args.src, args.size, &source)) {
          mark_unknown(args.dst);
          break;
        }
        auto source_stream = stream_of.find(source);
        if (!known(source) ||
            (source_stream != stream_of.end() && source_stream->second != args.stream)) {
          mark_unknown(args.dst);
          uint64_t start = 0;
          if (range_of(args.dst, args.size, &start)) stream_of[start] = args.stream;
          break;
        }
        // The source's image is saved_[source], current at this point of the
        // log; std::map keeps it in place while the destination's is made, and
        // within one range the two may overlap.
        if (!lands(args.dst, args.size, args.stream) || !apply || skip) break;
        std::memmove(image_at(args.dst), saved_.at(source).data() + (args.src - source), args.size);
        break;
      }
      case dp::kOpLaunch: {
        // What MarkLaunchWrites marks written is not known on the host.
        std::map<uint64_t, bool> may_write;
        MayWrite(entry, &may_write);
        for (const auto& [start, yes] : may_write) {
          unknown->insert(start);
          made->erase(start);
        }
        break;
      }
      default:
        break;
    }
  }
}

// Log entries whose writes a later entry overwrites whole before anything reads
// them on the host, found walking the log backwards. Only a device-to-device copy
// reads an image on the host (ApplyLog); a kernel reads the GPU's memory, and what
// it may write is read back. Writes on two streams are read back too, whatever
// is skipped here. A range allocated in the log ends what is known of it.
std::vector<bool> Failover::OverwrittenEntries() const {
  std::vector<bool> overwritten(log_.size(), false);
  std::set<uint64_t> covered;  // ranges a later entry writes whole before any read
  auto write = [&](size_t index, uint64_t address, uint64_t size) {
    uint64_t start = 0;
    if (!RangeHolding(address, &start) || size > ranges_.at(start) - (address - start)) return;
    if (covered.count(start) != 0) {
      overwritten[index] = true;
    } else if (address == start && size == ranges_.at(start)) {
      covered.insert(start);
    }
  };
  for (size_t index = log_.size(); index-- > 0;) {
    const Entry& entry = log_[index];
    switch (entry.op) {
      case dp::kOpMemcpyHtoD: {
        dp::MemcpyHtoDArgs args{};
        if (ReadStruct(entry.args, &args)) write(index, args.dst, args.size);
        break;
      }
      case dp::kOpMemset: {
        dp::MemsetArgs args{};
        uint64_t size = 0;
        if (ReadStruct(entry.args, &args) &&
            !__builtin_mul_overflow(args.count, args.element_size, &size)) {
          write(index, args.dst, size);
        }
        break;
      }
      case dp::kOpMemcpyDtoD: {
        dp::MemcpyDtoDArgs args{};
        if (!ReadStruct(entry.args, &args)) {
          covered.clear();
          break;
        }
        write(index, args.dst, args.size);  // the write, then the read before it
        uint64_t source = 0;
        if (RangeHolding(args.src, &source)) covered.erase(source);
        break;
      }
      case dp::kOpMemAlloc: {
        dp::MemAllocArgs args{};
        if (ReadStruct(entry.args, &args)) covered.erase(args.address);
        break;
      }
      default:
        break;
    }
  }
  return overwritten;
}

// Keeps the log's payload buffers for the next entries. An upload's journal copy
// into fresh memory costs a page fault per page, which on a virtual machine can
// cost more than the copy (a loop of 1 MiB uploads ran at 0.5 GB/s; 13 GB/s with
// failover off), and glibc returns freed blocks of this size to the system. Kept:
// at most a quarter of checkpoint_mem (what the log itself may hold); buffers
// that stayed unused since the last checkpoint are let go, so a process that
// stops uploading gives them back at its next checkpoint.
constexpr size_t kRecycledPayload = size_t{64} << 10;

void Failover::CaptureHeldUploads() {
  // Without the lock when nothing is held: another thread's call may hold it for as long as
  // its GPU works. The store that marks an upload held happens before any free of its
  // memory that is ordered after the upload (same thread, or any synchronisation), so the
  // free sees it.
  if (!any_held_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> wire(mu_);
  CaptureHeld();
}

void Failover::CaptureHeld() {
  for (size_t index : held_) {
    if (index >= log_.size()) continue;
    Entry& entry = log_[index];
    dp::MemcpyHtoDArgs args{};
    // A held upload a later one overwrote unread was dropped (Append): nothing to keep.
    if (entry.held == nullptr || entry.op != dp::kOpMemcpyHtoD || !ReadStruct(entry.args, &args)) {
      entry.held = nullptr;
      continue;
    }
    entry.payload = TakePayloadBuffer(args.size);
    AppendBytes(&entry.payload, entry.held, args.size);
    entry.held = nullptr;
    log_bytes_ += args.size;
  }
  held_.clear();
  any_held_.store(false, std::memory_order_relaxed);
}

void Failover::RecyclePayloads() {
  spare_.clear();
  spare_bytes_ = 0;
  for (Entry& entry : log_) {
    const size_t capacity = entry.payload.capacity();
    if (capacity < kRecycledPayload || spare_bytes_ + capacity > config_.checkpoint_mem / 4) {
      continue;
    }
    spare_bytes_ += capacity;
    spare_.emplace(capacity, std::move(entry.payload));
  }
}

void Failover::SparePayload(Entry* entry) {
  const size_t capacity = entry->payload.capacity();
  if (capacity < kRecycledPayload || spare_bytes_ + capacity > config_.checkpoint_mem / 4) return;
  log_bytes_ -= entry->payload.size();
  spare_bytes_ += capacity;
  spare_.emplace(capacity, std::move(entry->payload));
  entry->payload = JournalBytes();
}

// The smallest spare buffer with room for `size` bytes (emptied), unless it is
// far larger than needed; else an empty one.
JournalBytes Failover::TakePayloadBuffer(size_t size) {
  if (size < kRecycledPayload) return {};
  auto best = spare_.lower_bound(size);
  if (best == spare_.end() || best->first > 4 * size + (size_t{1} << 20)) return {};
  JournalBytes buffer = std::move(best->second);
  spare_bytes_ -= best->first;
  spare_.erase(best);
  buffer.clear();
  return buffer;
}

bool Failover::Locate(const GpuLocation& failed, int32_t why, GpuLocation* next) {
  GpuLocation named = failed;
  if (!lease_file_.empty() && !ReadLeaseFileSlot(lease_file_, slot_, &named) &&
      server_named_.uuid.empty()) {
    return false;
  }
  // gpupoold's answer to this process's report is newer than a file that still names the
  // failed GPU (the job's watcher rewrites it at its next renewal, seconds later).
  if (named.uuid == failed.uuid && !server_named_.uuid.empty()) named = server_named_;
  // A GPU that failed (or whose session the agent revoked) is not tried again
  // until the lease names another; an agent that went away may come back with
  // the same GPU.
  if (named.uuid == failed.uuid && why != dp::kCuDeviceUnavailable) return false;
  *next = named;
  return true;
}

bool Failover::MaybeReportLost(const GpuLocation& failed) {
  const auto now = std::chrono::steady_clock::now();
  if (!report_lost_ || !server_named_.uuid.empty() || now < next_report_) return false;
  report_backoff_ = std::clamp(report_backoff_ * 2, std::chrono::milliseconds(1000),
                               std::chrono::milliseconds(8000));
  GpuLocation named;
  std::string problem;
  if (!report_lost_(failed, slot_, &named, &problem)) {
    LogError("GPU %d (%s): could not tell gpupoold (%s); waiting for the lease to move", device_,
             failed.uuid.c_str(), problem.c_str());
  } else if (named.uuid != failed.uuid) {
    server_named_ = named;
    LogDebug("GPU %d: gpupoold names %s at %s in place of %s", device_, named.uuid.c_str(),
             named.endpoint.c_str(), failed.uuid.c_str());
  }
  // Measured from after the answer: a report takes up to the probe's second.
  next_report_ = std::chrono::steady_clock::now() + report_backoff_;
  return !server_named_.uuid.empty();
}

bool Failover::Send(ClientConnection* connection, const Entry& entry, std::string* why,
                    bool show_output) {
  Request request{entry.op,
                  entry.args.data(),
                  entry.args.size(),
                  entry.payload.empty() ? nullptr : entry.payload.data(),
                  entry.payload.size(),
                  nullptr,
                  0};
  if (!entry.call) {
    Status posted = connection->Post(request);
    if (!posted.ok()) {
      *why = posted.message();
      replay_lost_transport_ = true;
    }
    return posted.ok();
  }
  Reply reply;
  Status called = connection->Call(request, &reply);
  if (!called.ok()) {
    *why = called.message();
    replay_lost_transport_ = true;
    return false;
  }
  if (reply.status != 0 || reply.async_status != 0) {
    *why = "replaying request " + std::to_string(entry.op) + " gave CUDA error " +
           std::to_string(reply.async_status != 0 ? reply.async_status : reply.status);
    return false;
  }
  if (entry.op == dp::kOpMemAlloc) {
    dp::MemAllocArgs args{};
    dp::MemAllocResult result{};
    if (!ReadStruct(entry.args, &args) || !ReadStruct(reply.out, &result) ||
        result.dptr != args.address) {
      *why = "the new GPU did not place an allocation at its address";
      return false;
    }
  } else if (entry.op == dp::kOpModuleLoad) {
    dp::ModuleLoadArgs args{};
    dp::ModuleLoadResult result{};
    if (!ReadStruct(entry.args, &args) || !ReadStruct(reply.out, &result) ||
        (result.globals_size > 0 && result.globals_base != args.globals_base)) {
      *why = "the new GPU did not place a module's variables at their address";
      return false;
    }
  } else if (show_output) {
    ShowOutput(reply.out);
  }
  return true;
}

bool Failover::CreateCheckpointResources(ClientConnection* connection, std::string* why) {
  std::vector<const Resource*> resources;
  for (const auto& [key, resource] : base_) resources.push_back(&resource);
  std::sort(resources.begin(), resources.end(),
            [](const Resource* a, const Resource* b) { return a->seq < b->seq; });
  for (const Resource* resource : resources) {
    Entry creation = resource->creation;
    creation.call = creation.call || creation.op == dp::kOpMemAlloc ||
                    creation.op == dp::kOpModuleLoad || creation.op == dp::kOpGetFunction;
    if (!Send(connection, creation, why, false)) return false;
  }
  return true;
}

bool Failover::OfferHandoff(ClientConnection* old, Handoff* handoff) {
  // The reads the old GPU ran land in the application's buffers; the rest are sent again.
  int32_t first_error = 0;
  if (!old->Drain(&first_error).ok()) return false;
  Reply reply;
  Request offer{dp::kOpHandoffOffer, nullptr, 0, nullptr, 0, nullptr, 0};
  dp::HandoffOfferResult result{};
  if (!old->Call(offer, &reply).ok() || reply.status != 0 || reply.out.size() < sizeof(result)) {
    return false;
  }
  std::memcpy(&result, reply.out.data(), sizeof(result));
  result.ticket[sizeof(result.ticket) - 1] = '\0';
  handoff->ticket = result.ticket;
  handoff->last_seq = result.last_seq;
  ShowOutput(reply.out.substr(sizeof(result)));  // of kernels the old GPU ran
  return true;
}

// Only device memory changes (the handoff brings their effect).
static bool WritesMemoryOnly(uint32_t op) {
  return op == dp::kOpMemcpyHtoD || op == dp::kOpMemcpyDtoD || op == dp::kOpMemset ||
         op == dp::kOpLaunch;
}

bool Failover::RebuildMoved(ClientConnection* connection, const Handoff& handoff,
                            const GpuLocation& from, Recovery* recovery, std::string* why) {
  // 1. The resources as the old GPU had them after its last request: the checkpoint's, and
  //    what the log made and freed since (the log's memory writes are in the handoff).
  if (!CreateCheckpointResources(connection, why)) return false;
  size_t ran = 0;  // log_[0, ran) ran on the old GPU
  while (ran < log_.size() && log_[ran].seq <= handoff.last_seq) ++ran;
  for (size_t i = 0; i < ran; ++i) {
    if (log_[i].op == kDroppedEntry || WritesMemoryOnly(log_[i].op)) continue;
    if (!Send(connection, log_[i], why, false)) return false;
  }
  // 2. The memory, straight from the old GPU's agent.
  dp::HandoffPullArgs pull{};
  std::snprintf(pull.endpoint, sizeof(pull.endpoint), "%s", from.endpoint.c_str());
  std::snprintf(pull.gpu_uuid, sizeof(pull.gpu_uuid), "%s", from.uuid.c_str());
  std::snprintf(pull.ticket, sizeof(pull.ticket), "%s", handoff.ticket.c_str());
  Reply reply;
  Status called =
      connection->Call({dp::kOpHandoffPull, &pull, sizeof(pull), nullptr, 0, nullptr, 0}, &reply);
  dp::HandoffPullResult pulled{};
  if (!called.ok() || reply.status != 0 || !ReadStruct(reply.out, &pulled)) {
    *why = !called.ok() ? called.message()
           : reply.out.empty() ? "the handoff gave CUDA error " + std::to_string(reply.status)
                               : reply.out;
    return false;
  }
  recovery->copied_bytes = pulled.bytes;
  // 3. What the old GPU did not run, as a replay.
  for (size_t i = ran; i < log_.size(); ++i) {
    if (log_[i].op == kDroppedEntry) continue;
    if (!Send(connection, log_[i], why, true)) return false;
    ++recovery->replayed;
  }
  printf_delivered_ = std::max(printf_delivered_, ran);
  // 4. Reads the old GPU did not run.
  for (const StartedRequest& started : started_) {
    if (started.entry.seq <= handoff.last_seq) continue;
    Request request{
        started.entry.op, started.entry.args.data(), started.entry.args.size(), nullptr, 0,
        started.result,   started.capacity};
    if (Status status = connection->Start(request); !status.ok()) {
      *why = status.message();
      return false;
    }
  }
  return true;
}

bool Failover::Rebuild(ClientConnection* connection, Recovery* recovery, std::string* why) {
  // 1. The resources of the checkpoint, in creation order (a module before its
  // functions).
  if (!CreateCheckpointResources(connection, why)) return false;
  // 2. Their memory as the checkpoint saw it.
  for (const auto& [start, bytes] : saved_) {
    // Sent from the image itself: a copy of 1 GiB would cost more than its transfer.
    dp::MemcpyHtoDArgs args{start, bytes.size(), 0};
    Request restore{dp::kOpMemcpyHtoD, &args, sizeof(args), bytes.data(), bytes.size(), nullptr, 0};
    if (Status posted = connection->Post(restore); !posted.ok()) {
      *why = posted.message();
      return false;
    }
    recovery->restored_bytes += bytes.size();
  }
  // 3. The log: first what had shown its printf text (shown again it would
  // print twice),
  //    then the rest, whose text the application has not seen yet.
  for (size_t i = 0; i < log_.size(); ++i) {
    if (i == printf_delivered_ && i > 0) {
      Reply discard;
      Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
      Status status = connection->Call(synchronise, &discard);
      if (!status.ok() || discard.status != 0 || discard.async_status != 0) {
        *why = status.ok() ? "replay failed with CUDA error " +
                                 std::to_string(discard.async_status ? discard.async_status
                                                                     : discard.status)
                           : status.message();
        return false;
      }
    }
    if (log_[i].op == kDroppedEntry) continue;
    if (!Send(connection, log_[i], why, i >= printf_delivered_)) return false;
    ++recovery->replayed;
  }
  // 4. Reads the application started and has not collected: they land in its
  // buffers.
  for (const StartedRequest& started : started_) {
    Request request{
        started.entry.op, started.entry.args.data(), started.entry.args.size(), nullptr, 0,
        started.result,   started.capacity};
    Status status = connection->Start(request);
    if (!status.ok()) {
      *why = status.message();
      return false;
    }
  }
  return true;
}

bool Failover::Recover(std::unique_ptr<ClientConnection>* connection, GpuLocation* location,
                       dp::DeviceDescription* description, int32_t why) {
  if (!Recoverable(why)) return false;
  // The replay sends the log's bytes; the program has not synchronised since its held
  // uploads (it is inside a call), so their sources still hold what was sent.
  CaptureHeld();
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + config_.recovery_deadline;
  const GpuLocation failed = *location;
  std::string last_problem = "the lease still names the failed GPU";
  bool waiting_logged = false;
  // A session the agent revoked because the lease moved off a healthy GPU keeps its memory
  // for the new GPU (a planned move: drain, gpupoolctl migrate).
  Handoff handoff;
  bool handing_off = why == dp::kCuNotPermitted && OfferHandoff(connection->get(), &handoff);
  if (handing_off) {
    LogError("GPU %d (%s): the lease moved to another GPU; moving there with its memory",
             device_, failed.uuid.c_str());
  } else if (config_.mode == FailoverConfig::Mode::kMigrate) {
    LogError("GPU %d (%s) failed (CUDA error %d); GPUPOOL_FAILOVER=migrate follows planned "
             "moves only",
             device_, failed.uuid.c_str(), why);
    return false;
  } else {
    LogError("GPU %d (%s) failed (CUDA error %d): recovering on the GPU the lease names next",
             device_, failed.uuid.c_str(), why);
  }
  // gpupoold may already have named the replacement while a call waited on a silent agent.
  server_named_ = std::exchange(silent_named_, GpuLocation());
  next_report_ = began;
  report_backoff_ = std::chrono::milliseconds(0);
  while (std::chrono::steady_clock::now() < deadline) {
    GpuLocation next;
    // A lost connection may be the session's worker alone (its agent then opens a new
    // session at once): gpupoold hears of it only once the agent itself did not answer.
    if (why != dp::kCuDeviceUnavailable || handing_off) MaybeReportLost(failed);
    if (Locate(failed, why, &next)) {
      dp::DeviceDescription fresh{};
      int32_t refusal = 0;
      std::unique_ptr<ClientConnection> session =
          open_session_(next, &fresh, &last_problem, &refusal);
      if (session != nullptr) {
        Recovery recovery;
        recovery.from = failed;
        recovery.to = next;
        const bool moved = handing_off && next.uuid != failed.uuid;
        replay_lost_transport_ = false;
        if (moved ? RebuildMoved(session.get(), handoff, failed, &recovery, &last_problem)
                  : Rebuild(session.get(), &recovery, &last_problem)) {
          // The old connection goes only now: closing it may wait for a peer
          // that is gone.
          connection->swap(session);
          session.reset();
          *location = next;
          *description = fresh;
          recovery.pause = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - began);
          // The new agent tells gpupoold (a "recovered" event); best effort.
          dp::RecoveredArgs report{static_cast<uint64_t>(recovery.pause.count()),
                                   recovery.restored_bytes, recovery.replayed, {},
                                   recovery.copied_bytes};
          std::snprintf(report.from, sizeof(report.from), "%s", failed.uuid.c_str());
          // What ran before now ran on this GPU (its seqs are another connection's).
          for (Entry& entry : log_) entry.seq = 0;
          for (StartedRequest& started : started_) started.entry.seq = 0;
          (void)(*connection)->Post({dp::kOpRecovered, &report, sizeof(report), nullptr, 0, nullptr, 0});
          if (moved) {
            LogError(
                "GPU %d: moved to %s at %s in %lld ms (memory copied agent to agent: %s, "
                "replayed %zu operation(s))",
                device_, next.uuid.c_str(), next.endpoint.c_str(),
                static_cast<long long>(recovery.pause.count()), Size(recovery.copied_bytes).c_str(),
                recovery.replayed);
          } else {
            LogError(
                "GPU %d: recovered on %s at %s in %lld ms (restored %s, "
                "replayed %zu "
                "operation(s))",
                device_, next.uuid.c_str(), next.endpoint.c_str(),
                static_cast<long long>(recovery.pause.count()), Size(recovery.restored_bytes).c_str(),
                recovery.replayed);
          }
          recoveries_.push_back(recovery);
          return true;
        }
        if (moved && config_.mode == FailoverConfig::Mode::kMigrate) {
          LogError("GPU %d: the handoff from %s failed (%s); GPUPOOL_FAILOVER=migrate keeps no "
                   "checkpoint to recover from",
                   device_, failed.uuid.c_str(), last_problem.c_str());
          return false;
        }
        if (replay_lost_transport_ && !moved) {
          // The new session's process ended while it replayed this process's own work: the
          // work ends whatever runs it (a tenant fault, never the GPU's), so no other GPU
          // is tried with it (gpupool-remote(7), FAILOVER).
          LogError("GPU %d: replaying this process's work on %s ended that session too (%s): "
                   "the program's own work ends the sessions that run it; not recovering "
                   "again",
                   device_, next.uuid.c_str(), last_problem.c_str());
          return false;
        }
        if (moved) {
          // The checkpoint and the whole log still hold: recover from them on a fresh session.
          LogError("GPU %d: the handoff from %s failed (%s); recovering from the checkpoint",
                   device_, failed.uuid.c_str(), last_problem.c_str());
          handing_off = false;
          continue;
        }
        // The replacement failed too, or refused us: wait for the lease to move
        // again.
      }
      // gpupoold named another GPU: try it now, not after the wait below.
      if (next.uuid == failed.uuid && MaybeReportLost(failed)) continue;
    }
    if (!waiting_logged && std::chrono::steady_clock::now() - began > std::chrono::seconds(5)) {
      waiting_logged = true;
      LogError(
          "GPU %d: still waiting for a replacement GPU (%s); giving up "
          "after %lld s",
          device_, last_problem.c_str(),
          static_cast<long long>(
              std::chrono::duration_cast<std::chrono::seconds>(config_.recovery_deadline).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  LogError("GPU %d: no replacement within the recovery deadline (%s)", device_,
           last_problem.c_str());
  return false;
}

}  // namespace gpupool::client
