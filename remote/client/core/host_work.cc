// Host functions in stream order (cuLaunchHostFunc, cuStreamAddCallback).
//
// The agent cannot call back into this process, so the ordering is kept here: a host
// function opens a queue for its stream; the stream's later requests that would travel
// one-way or complete later (copies, launches, event records, asynchronous device-to-host
// copies into page-locked memory, the stream's destruction) wait in that queue, in order,
// instead of going out; page-locked sources are read when their copy is sent, as a GPU's
// DMA would. A thread of this library works through the queue: it waits for the stream's
// earlier work (a stream synchronisation with the agent), runs the host function, sends
// the requests queued behind it, and closes the queue once empty. Requests that must
// answer now behave as on a GPU: a query of the stream, or of an event whose record is
// queued, answers CUDA_ERROR_NOT_READY; a synchronisation (of the stream, an event, the
// context) or a synchronous copy on the stream waits for the queue. A stream told to wait
// for an event whose record is queued gets a queue of its own that holds until then.
//
// Known difference: the legacy default stream does not wait for host functions queued on
// other streams (nor the reverse); each stream's own order is kept.
#include <cstring>
#include <thread>

#include "remote/client/core/api_common.h"

namespace gpupool::client {
namespace {

namespace dp = gpupool::dataplane;

template <typename Args>
bool StreamField(const void* args, size_t args_len, uint64_t Args::*field, uint64_t* stream) {
  if (args == nullptr || args_len < sizeof(Args)) return false;
  Args copy;
  std::memcpy(&copy, args, sizeof(copy));
  *stream = copy.*field;
  return true;
}

// The stream a request is ordered on, for the requests that have one.
bool StreamOf(uint32_t op, const void* args, size_t args_len, uint64_t* stream) {
  switch (op) {
    case dp::kOpMemcpyHtoD:
      return StreamField(args, args_len, &dp::MemcpyHtoDArgs::stream, stream);
    case dp::kOpMemcpyDtoH:
      return StreamField(args, args_len, &dp::MemcpyDtoHArgs::stream, stream);
    case dp::kOpMemcpyDtoD:
      return StreamField(args, args_len, &dp::MemcpyDtoDArgs::stream, stream);
    case dp::kOpMemset:
      return StreamField(args, args_len, &dp::MemsetArgs::stream, stream);
    case dp::kOpLaunch:
      return StreamField(args, args_len, &dp::LaunchArgs::stream, stream);
    case dp::kOpStreamDestroy:
    case dp::kOpStreamSynchronize:
    case dp::kOpStreamQuery:
      return StreamField(args, args_len, &dp::StreamArgs::stream, stream);
    case dp::kOpStreamWaitEvent:
      return StreamField(args, args_len, &dp::StreamWaitEventArgs::stream, stream);
    case dp::kOpEventRecord:
      return StreamField(args, args_len, &dp::EventRecordArgs::stream, stream);
    default:
      return false;
  }
}

}  // namespace

bool RequestStream(uint32_t op, const void* args, size_t args_len, uint64_t* stream) {
  return StreamOf(op, args, args_len, stream);
}

namespace {

uint64_t EventOf(const void* args, size_t args_len) {
  uint64_t event = 0;
  StreamField(args, args_len, &dp::EventArgs::event, &event);  // the event id comes first
  return event;
}

}  // namespace

bool Runtime::DeferOrWait(int device, uint32_t op, const void* args, size_t args_len, const void* payload,
                          size_t payload_len, Delivery delivery, void* result, size_t result_capacity,
                          CUresult* answer) {
  if (host_queue_count_.load() == 0) return false;  // the common case: no host work at all
  std::unique_lock<std::mutex> lock(host_mu_);
  uint64_t stream = 0;
  if (StreamOf(op, args, args_len, &stream)) {
    const std::pair<int, uint64_t> key{device, stream};
    auto queue = host_queues_by_stream_.find(key);
    if (op == dp::kOpStreamWaitEvent && delivery == Delivery::kOneWay) {
      // A wait for an event whose record is still queued behind a host function on
      // another stream: this stream's later work must wait for that record too, so the
      // wait itself queues here behind a step that holds until the record has gone out.
      dp::StreamWaitEventArgs wait;
      std::memcpy(&wait, args, sizeof(wait));
      const std::pair<int, uint64_t> record{device, wait.event};
      if (deferred_event_records_.count(record) > 0) {
        if (queue == host_queues_by_stream_.end()) {
          queue = host_queues_by_stream_.try_emplace(key).first;
          host_queue_count_.fetch_add(1);
          std::thread([this, device, stream] { DrainHostQueue(device, stream); }).detach();
        }
        DeferredRequest hold;
        hold.host_work = [this, record](CUresult) {
          std::unique_lock<std::mutex> hold_lock(host_mu_);
          host_cv_.wait(hold_lock, [&] { return deferred_event_records_.count(record) == 0; });
        };
        queue->second.push_back(std::move(hold));
      }
    }
    if (queue == host_queues_by_stream_.end()) return false;
    if (op == dp::kOpStreamQuery) {
      *answer = CUDA_ERROR_NOT_READY;
      return true;
    }
    if (delivery != Delivery::kWaitForReply) {
      DeferredRequest request;
      request.op = op;
      request.args.assign(static_cast<const char*>(args), args_len);
      // An asynchronous copy from page-locked memory reads it when it runs, as on a GPU:
      // only such a copy keeps a pointer. Anything else (a launch's arguments, which CUDA
      // takes at the call) is copied, wherever it lies.
      if (payload_len > 0 && op == dp::kOpMemcpyHtoD && FindHostRange(payload, nullptr)) {
        request.pinned_payload = payload;
        request.pinned_payload_len = payload_len;
      } else if (payload_len > 0) {
        // Pageable memory: CUDA stages a copy's source at the call, so may we.
        request.payload.assign(static_cast<const char*>(payload), payload_len);
      }
      request.reply_later = delivery == Delivery::kReplyLater;
      request.result = result;
      request.result_capacity = result_capacity;
      if (op == dp::kOpEventRecord) {
        dp::EventRecordArgs record;
        std::memcpy(&record, args, sizeof(record));
        deferred_event_records_.insert({device, record.event});
      }
      queue->second.push_back(std::move(request));
      *answer = CUDA_SUCCESS;
      return true;
    }
    host_cv_.wait(lock, [&] { return host_queues_by_stream_.count(key) == 0; });
    return false;
  }
  switch (op) {
    case dp::kOpEventQuery:
      if (deferred_event_records_.count({device, EventOf(args, args_len)}) > 0) {
        *answer = CUDA_ERROR_NOT_READY;
        return true;
      }
      return false;
    case dp::kOpEventElapsed: {
      dp::EventElapsedArgs elapsed{};
      if (args_len >= sizeof(elapsed)) std::memcpy(&elapsed, args, sizeof(elapsed));
      if (deferred_event_records_.count({device, elapsed.start}) > 0 ||
          deferred_event_records_.count({device, elapsed.end}) > 0) {
        *answer = CUDA_ERROR_NOT_READY;
        return true;
      }
      return false;
    }
    case dp::kOpEventSynchronize: {
      const std::pair<int, uint64_t> key{device, EventOf(args, args_len)};
      host_cv_.wait(lock, [&] { return deferred_event_records_.count(key) == 0; });
      return false;
    }
    case dp::kOpContextSynchronize:
    case dp::kOpMemFree:
    case dp::kOpModuleUnload:
    case dp::kOpEventDestroy:
      // Queued requests may still use what these free or wait for.
      host_cv_.wait(lock, [&] {
        for (const auto& [key, queue] : host_queues_by_stream_) {
          if (key.first == device) return false;
        }
        return true;
      });
      return false;
    default:
      return false;
  }
}

CUresult Runtime::EnqueueHostFunction(int device, uint64_t stream, std::function<void(CUresult)> work) {
  if (shut_down_) return CUDA_ERROR_DEINITIALIZED;
  if (this->device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(host_mu_);
  auto [queue, created] = host_queues_by_stream_.try_emplace({device, stream});
  DeferredRequest request;
  request.host_work = std::move(work);
  queue->second.push_back(std::move(request));
  if (created) {
    host_queue_count_.fetch_add(1);
    std::thread([this, device, stream] { DrainHostQueue(device, stream); }).detach();
  }
  return CUDA_SUCCESS;
}

void Runtime::DrainHostQueue(int device, uint64_t stream) {
  const std::pair<int, uint64_t> key{device, stream};
  for (;;) {
    DeferredRequest request;
    {
      std::lock_guard<std::mutex> lock(host_mu_);
      auto& queue = host_queues_by_stream_[key];
      if (queue.empty()) {
        host_queues_by_stream_.erase(key);
        host_queue_count_.fetch_sub(1);
        host_cv_.notify_all();
        return;
      }
      request = std::move(queue.front());
      queue.pop_front();
    }
    if (request.host_work) {
      dp::StreamArgs args{stream, 0, 0};
      CUresult status = CallNow(device, dp::kOpStreamSynchronize, &args, sizeof(args), nullptr, 0, nullptr, 0, nullptr);
      request.host_work(status);
      continue;
    }
    CUresult status;
    if (request.reply_later) {
      status = StartNow(device, request.op, request.args.data(), request.args.size(), request.result,
                        request.result_capacity);
    } else if (request.pinned_payload != nullptr) {
      status = PostNow(device, request.op, request.args.data(), request.args.size(), request.pinned_payload,
                       request.pinned_payload_len);
    } else {
      status = PostNow(device, request.op, request.args.data(), request.args.size(),
                       request.payload.empty() ? nullptr : request.payload.data(), request.payload.size());
    }
    if (status != CUDA_SUCCESS) {
      // Once: when the agent is gone every queued request fails the same way, and the
      // stream's next synchronisation reports it.
      static std::once_flag logged;
      std::call_once(logged, [&] {
        LogError("a request queued behind a host function on stream %llu failed: %d",
                 static_cast<unsigned long long>(stream), static_cast<int>(status));
      });
    }
    if (request.op == dp::kOpEventRecord) {
      dp::EventRecordArgs record;
      std::memcpy(&record, request.args.data(), sizeof(record));
      std::lock_guard<std::mutex> lock(host_mu_);
      auto found = deferred_event_records_.find({device, record.event});
      if (found != deferred_event_records_.end()) deferred_event_records_.erase(found);
      host_cv_.notify_all();
    }
  }
}

bool Runtime::WaitAllHostWork(int device, std::chrono::steady_clock::duration limit) {
  std::unique_lock<std::mutex> lock(host_mu_);
  return host_cv_.wait_for(lock, limit, [&] {
    for (const auto& [key, queue] : host_queues_by_stream_) {
      if (device < 0 || key.first == device) return false;
    }
    return true;
  });
}

}  // namespace gpupool::client
