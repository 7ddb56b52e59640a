// The agent's end of the data path: requests as the dataplane decodes them from a client
// (remote/dataplane/session.cc over the sim executor), after the transport has split an
// active message into RequestHeader, argument block and payload (remote/transport/wire.h).
// A client holds a lease for one GPU; nothing it sends may crash the agent or reach memory
// outside what it allocated.
//
// Input: a sequence of requests, each
//   u8 op, u8 flags (bit 0: one-way, bit 1: payload arrives by rendezvous, i.e. straight
//   into BulkDestination), u16 args_len, u16 payload_len, args, payload
// (lengths are cut to what is left). Every reply's bulk data is read back in full, as the
// transport does when it sends it.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remote/dataplane/executor_factory.h"
#include "remote/dataplane/session.h"
#include "remote/device/backend.h"
#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_server.h"
#include "remote/transport/wire.h"

namespace {

// A healthy simulated GPU that never fails on its own.
class QuietBackend : public gpupool::device::GpuBackend {
 public:
  std::string name() const override { return "sim"; }
  std::vector<gpupool::device::GpuInfo> Discover() override { return {}; }
  gpupool::device::HealthState Health(int) override { return {}; }
  gpupool::Status BeforeOperation(int) override { return gpupool::Status::OK(); }
  void ReportFailure(int, const std::string&) override {}
  void SetHealthListener(std::function<void(int)>) override {}
};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  uint64_t Int(size_t bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes && left_ > 0; ++i, ++p_, --left_) value |= uint64_t{*p_} << (8 * i);
    return value;
  }
  std::string_view Bytes(size_t n) {
    n = std::min(n, left_);
    std::string_view out(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return out;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static QuietBackend backend;
  static const bool registered =  // once, as the agent's main does
      gpupool::device::RegisterDeviceKind(gpupool::devices::MakeSimKind());
  (void)registered;
  gpupool::device::GpuInfo gpu;
  gpu.uuid = "GPU-fuzz";
  gpu.index = 0;
  gpu.model = "A100-SXM4-80GB";
  gpu.memory_bytes = 1 << 20;  // small, so every byte of it can be checked quickly
  gpupool::dataplane::ExecutorFactory executors(&backend);
  auto executor = executors.Create(gpu);
  if (!executor.ok()) __builtin_trap();
  // Rate-limited lines go nowhere: the fuzzer's output stays readable.
  static gpupool::dataplane::LogLimiter log(std::chrono::seconds(10), [](const std::string&) {});
  gpupool::dataplane::Session session("fuzz-peer", &log);
  session.Authorize("L-fuzz", "fuzz-token", gpu, &backend, std::move(executor.value()), 0);

  Input in(data, size);
  while (!in.empty()) {
    gpupool::transport::RequestHeader header;
    header.op = static_cast<uint32_t>(in.Int(1));
    uint32_t flags = static_cast<uint32_t>(in.Int(1));
    header.flags = flags & gpupool::transport::kFlagOneWay;
    size_t args_len = in.Int(2);
    size_t payload_len = in.Int(2);
    std::string args(in.Bytes(args_len));
    std::string_view payload = in.Bytes(payload_len);
    header.args_len = static_cast<uint32_t>(args.size());

    const void* payload_at = payload.data();
    std::unique_ptr<char[]> eager;
    if ((flags & 2) && !payload.empty()) {
      // Rendezvous: the transport receives the bulk data where the session says.
      void* destination = session.BulkDestination(header, args, payload.size());
      if (destination != nullptr) {
        std::memcpy(destination, payload.data(), payload.size());
        payload_at = destination;
      }
    } else {
      // Eager: a copy owned by the transport (exact size, so overreads show).
      eager.reset(new char[payload.size()]);  // exact size: an overread is caught
      std::memcpy(eager.get(), payload.data(), payload.size());
      payload_at = eager.get();
    }
    gpupool::transport::ServerReply reply;
    session.Run(header, args, payload_at, payload.size(), &reply);
    if (reply.bulk_len > 0) {
      if (reply.bulk == nullptr) __builtin_trap();
      uint8_t sum = 0;
      const auto* bulk = static_cast<const uint8_t*>(reply.bulk);
      for (size_t i = 0; i < reply.bulk_len; ++i) sum ^= bulk[i];
      asm volatile("" : : "r"(sum));
    }
    if (reply.close_after) break;
  }
  return 0;
}
