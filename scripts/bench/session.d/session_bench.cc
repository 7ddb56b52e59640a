// The agent's data path in its two designs, side by side in one run, with one client: the
// sessions served inside the server's own process (dataplane::Server, the design before
// the session workers, still the data-path test server's) and each session in its own
// sandboxed worker process behind the agent's supervisor (agentd::SessionBroker).
//
// Measured through transport::RpcClient with raw data-path requests, on the sim backend,
// over the transport UCX_TLS selects (scripts/bench/session runs tcp and shm):
//   SessionStart   connect + hello + first allocation + close, a new lease each time (so a
//                  new worker each time); median and p95 of 40 in ms
//   SyncRoundTrip  a context synchronize with no payload
//   HtoD/DtoH      a synchronous copy of 64 KiB, 1 MiB, 16 MiB
//   Launch         one-way launches of an empty kernel, a synchronize every 64
// Arg 0: in-process; arg 1: worker process. Both with the watchdog on (10 s, the agent's
// default), as the agent runs them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "remote/agentd/session_broker.h"
#include "remote/dataplane/server.h"
#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_backend.h"
#include "remote/devices/sim/sim_kind.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"

namespace {

namespace dp = gpupool::dataplane;
using gpupool::Status;
using gpupool::transport::Reply;
using gpupool::transport::RpcClient;

std::string g_worker;  // --worker=PATH

struct Served {
  std::unique_ptr<gpupool::devices::SimBackend> backend;
  std::unique_ptr<dp::Server> in_process;
  std::unique_ptr<gpupool::agentd::SessionBroker> broker;
  std::string endpoint;
  std::string uuid;
};

Served& Design(int which) {
  static Served designs[2];
  Served& s = designs[which];
  if (s.backend) return s;
  gpupool::device::RegisterDeviceKind(gpupool::devices::MakeSimKind());  // as the agent does
  auto backend = gpupool::devices::SimBackend::Create("benchhost" + std::to_string(which),
                                                      {gpupool::SimGpuConfig{"A100-SXM4-80GB", 81920, 1}}, 1);
  if (!backend.ok()) std::abort();
  s.backend = std::move(backend.value());
  s.uuid = s.backend->Discover()[0].uuid;
  auto anyone = [](const std::string&, const std::string& token, const std::string&) { return token == "bench-token"; };
  if (which == 0) {
    dp::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = s.backend.get();
    options.authorize = anyone;
    // As the agent ran it before the workers: its watchdog on (the agent's default), so that
    // both designs pay for the progress counting of every operation.
    options.hang_timeout = std::chrono::seconds(10);
    auto server = dp::Server::Start(std::move(options));
    if (!server.ok()) std::abort();
    s.in_process = std::move(server.value());
    s.endpoint = "127.0.0.1:" + std::to_string(s.in_process->port());
  } else {
    gpupool::agentd::SessionBrokerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = s.backend.get();
    options.authorize = anyone;
    options.still_authorized = anyone;
    options.worker_program = gpupool::agentd::FindWorkerProgram(g_worker);
    options.hang_timeout = std::chrono::seconds(10);
    auto broker = gpupool::agentd::SessionBroker::Start(std::move(options));
    if (!broker.ok()) {
      std::fprintf(stderr, "session bench: %s\n", broker.status().message().c_str());
      std::abort();
    }
    s.broker = std::move(broker.value());
    s.endpoint = "127.0.0.1:" + std::to_string(s.broker->port());
  }
  return s;
}

std::unique_ptr<RpcClient> Open(Served& s, const std::string& lease) {
  auto client = RpcClient::Connect(s.endpoint, s.uuid, {lease, "bench-token", ""});
  if (!client.ok()) {
    std::fprintf(stderr, "session bench: %s\n", client.status().message().c_str());
    return nullptr;
  }
  dp::HelloArgs hello;
  std::snprintf(hello.lease_id, sizeof(hello.lease_id), "%s", lease.c_str());
  std::snprintf(hello.token, sizeof(hello.token), "bench-token");
  std::snprintf(hello.gpu_uuid, sizeof(hello.gpu_uuid), "%s", s.uuid.c_str());
  Reply reply;
  if (!client.value()->Call({dp::kOpHello, &hello, sizeof(hello), nullptr, 0, nullptr, 0}, &reply).ok() ||
      reply.status != 0) {
    return nullptr;
  }
  return std::move(client.value());
}

uint64_t Alloc(RpcClient* c, uint64_t size) {
  dp::MemAllocArgs args{size};
  Reply reply;
  if (!c->Call({dp::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0}, &reply).ok() || reply.status != 0 ||
      reply.out.size() != sizeof(dp::MemAllocResult)) {
    return 0;
  }
  dp::MemAllocResult result;
  std::memcpy(&result, reply.out.data(), sizeof(result));
  return result.dptr;
}

void SessionStart(benchmark::State& state) {
  Served& s = Design(static_cast<int>(state.range(0)));
  static int lease = 0;
  std::vector<double> ms;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    auto client = Open(s, "L" + std::to_string(++lease));
    if (client == nullptr || Alloc(client.get(), 4096) == 0) {
      state.SkipWithError("session did not start");
      return;
    }
    client.reset();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  state.counters["median_ms"] = ms[ms.size() / 2];
  state.counters["p95_ms"] = ms[std::min(ms.size() - 1, ms.size() * 95 / 100)];
}
BENCHMARK(SessionStart)->Arg(0)->Arg(1)->Iterations(40)->Unit(benchmark::kMillisecond)->UseRealTime();

// One open session per design for the steady-state benchmarks.
RpcClient* Steady(int which) {
  static std::unique_ptr<RpcClient> clients[2];
  if (!clients[which]) clients[which] = Open(Design(which), "steady");
  return clients[which].get();
}

void SyncRoundTrip(benchmark::State& state) {
  RpcClient* c = Steady(static_cast<int>(state.range(0)));
  if (c == nullptr) return state.SkipWithError("no session");
  Reply reply;
  for (auto _ : state) {
    if (!c->Call({dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0}, &reply).ok()) {
      return state.SkipWithError("call failed");
    }
  }
}
BENCHMARK(SyncRoundTrip)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void Copy(benchmark::State& state, bool to_device) {
  RpcClient* c = Steady(static_cast<int>(state.range(0)));
  if (c == nullptr) return state.SkipWithError("no session");
  const uint64_t size = static_cast<uint64_t>(state.range(1));
  uint64_t dptr = Alloc(c, size);
  if (dptr == 0) return state.SkipWithError("no memory");
  std::vector<char> host(size, 7);
  Reply reply;
  for (auto _ : state) {
    Status sent;
    if (to_device) {
      dp::MemcpyHtoDArgs args{dptr, size, 0};
      sent = c->Call({dp::kOpMemcpyHtoD, &args, sizeof(args), host.data(), size, nullptr, 0}, &reply);
    } else {
      dp::MemcpyDtoHArgs args{dptr, size, 0};
      sent = c->Call({dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, host.data(), size}, &reply);
    }
    if (!sent.ok() || reply.status != 0) return state.SkipWithError("copy failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
  dp::MemFreeArgs free_args{dptr};
  (void)c->Call({dp::kOpMemFree, &free_args, sizeof(free_args), nullptr, 0, nullptr, 0}, &reply);
}
void HtoD(benchmark::State& state) { Copy(state, true); }
void DtoH(benchmark::State& state) { Copy(state, false); }
BENCHMARK(HtoD)->ArgsProduct({{0, 1}, {64 << 10, 1 << 20, 16 << 20}})->UseRealTime();
BENCHMARK(DtoH)->ArgsProduct({{0, 1}, {64 << 10, 1 << 20, 16 << 20}})->UseRealTime();

constexpr const char* kEmptyKernel = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry empty()
{
  ret;
}
)";

void Launch(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  RpcClient* c = Steady(which);
  if (c == nullptr) return state.SkipWithError("no session");
  static bool loaded[2] = {false, false};
  const uint64_t module = 100;
  Reply reply;
  if (!loaded[which]) {
    const std::string ptx = kEmptyKernel;
    dp::ModuleLoadArgs args{module};
    const std::string payload = dp::ModuleLoadPayload({ptx.c_str(), ptx.size() + 1}, {{"empty", 0}});
    if (!c->Call({dp::kOpModuleLoad, &args, sizeof(args), payload.data(), payload.size(), nullptr, 0}, &reply).ok() ||
        reply.status != 0) {
      return state.SkipWithError("module load failed");
    }
    dp::GetFunctionArgs get{module, module + 1, {}};
    std::snprintf(get.name, sizeof(get.name), "empty");
    if (!c->Call({dp::kOpGetFunction, &get, sizeof(get), nullptr, 0, nullptr, 0}, &reply).ok() || reply.status != 0) {
      return state.SkipWithError("no kernel");
    }
    loaded[which] = true;
  }
  dp::LaunchArgs launch{};
  launch.function = module + 1;
  launch.grid[0] = launch.grid[1] = launch.grid[2] = 1;
  launch.block[0] = launch.block[1] = launch.block[2] = 1;
  int64_t n = 0;
  for (auto _ : state) {
    if (!c->Post({dp::kOpLaunch, &launch, sizeof(launch), nullptr, 0, nullptr, 0}).ok()) {
      return state.SkipWithError("launch failed");
    }
    if (++n % 64 == 0) (void)c->Call({dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  }
  (void)c->Call({dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  state.SetItemsProcessed(n);
}
BENCHMARK(Launch)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--worker=", 9) == 0) {
      g_worker = argv[i] + 9;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(rest.size());
  benchmark::Initialize(&count, rest.data());
  if (benchmark::ReportUnrecognizedArguments(count, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
