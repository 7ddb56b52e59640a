#include "remote/worker/session_worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/constant_time.h"
#include "common/log.h"
#include "remote/dataplane/executor_factory.h"
#include "remote/dataplane/server.h"
#include "remote/transport/bootstrap.h"
#include "remote/worker/channel.h"
#include "remote/worker/gpu_status.h"
#include "remote/worker/sandbox.h"
#include "remote/worker/worker_backend.h"

namespace gpupool::worker {
namespace {

template <typename T>
T Get(const nlohmann::json& body, const char* key, T fallback) {
  auto found = body.find(key);
  if (found == body.end()) return fallback;
  try {
    return found->get<T>();
  } catch (...) {
    return fallback;
  }
}

int Fail(const std::string& why) {
  log::Error(why);
  return kExitFailure;
}

// A health probe on a fresh session: allocate, write, read back. The supervisor gives it
// a deadline; an injected hang holds it in BeforeOperation past that.
int RunProbe(int channel, const std::string& kind, const device::GpuInfo& gpu, const GpuState* state,
             GpuCounters* counters) {
  (void)Send(channel, {{"type", "ready"}});
  WorkerBackend backend(kind, gpu, state, counters, nullptr);
  auto answer = [channel](bool ok, const std::string& why) {
    (void)Send(channel, {{"type", "probe"}, {"ok", ok}, {"why", why}});
    return kExitOk;
  };
  if (Status usable = backend.BeforeOperation(gpu.index); !usable.ok()) {
    return answer(false, usable.message());
  }
  dataplane::ExecutorFactory factory(&backend);
  auto executor = factory.Create(gpu);
  if (!executor.ok()) return answer(false, executor.status().message());
  constexpr uint64_t kBytes = 4096;
  uint64_t dptr = 0;
  int32_t status = executor.value()->Allocate(kBytes, &dptr);
  if (status == 0) status = executor.value()->Memset(dptr, 0x5a5a5a5a, 4, kBytes / 4, 0);
  if (status == 0) status = executor.value()->SynchronizeStream(0);
  const void* data = nullptr;
  if (status == 0) status = executor.value()->CopyFromDevice(dptr, kBytes, 0, &data);
  if (status != 0) return answer(false, "CUDA error " + std::to_string(status));
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < kBytes; ++i) {
    if (bytes[i] != 0x5a) return answer(false, "the GPU gave back other bytes than it was given");
  }
  return answer(true, "");
}

}  // namespace

int RunSessionWorker(int argc, char** argv) {
  int channel = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--channel") == 0 && i + 1 < argc) {
      char* end = nullptr;
      long fd = std::strtol(argv[++i], &end, 10);
      if (*end == '\0' && fd > 2 && fd < 1024) channel = static_cast<int>(fd);
    } else if ((std::strcmp(argv[i], "--lease") == 0 || std::strcmp(argv[i], "--gpu") == 0) && i + 1 < argc) {
      ++i;  // for ps: the session comes from the channel
    }
  }
  if (channel < 0) {
    std::fprintf(stderr, "gpupool-worker: started by gpupool-agentd only (usage: gpupool-worker --channel FD)\n");
    return kExitUsage;
  }
  // Nothing the agent had open reaches a tenant's process but the channel.
  close_range(static_cast<unsigned>(channel) + 1, ~0U, 0);
  log::SetProgramName("gpupool-worker");
  transport::SetTimeouts(channel, 10000);
  Result<Message> start = Receive(channel);
  if (!start.ok()) return Fail("no start message from the supervisor: " + start.status().message());
  const nlohmann::json& body = start->body;
  const bool probe = body["type"] == "probe";
  if ((body["type"] != "start" && !probe) || start->fds.size() != 2) {
    for (int fd : start->fds) close(fd);
    return Fail("the supervisor's first message is not a start with two pages");
  }
  transport::SetTimeouts(channel, 0);
  const int verbose = Get<int>(body, "verbose", 0);
  log::SetLevel(static_cast<log::Level>(
      std::min(static_cast<int>(log::Level::kInfo) + verbose, static_cast<int>(log::Level::kDebug))));
  device::GpuInfo gpu;
  const nlohmann::json g = body.value("gpu", nlohmann::json::object());
  gpu.uuid = Get<std::string>(g, "uuid", "");
  gpu.index = Get<int>(g, "index", 0);
  gpu.model = Get<std::string>(g, "model", "");
  gpu.memory_bytes = Get<uint64_t>(g, "memory_bytes", 0);
  gpu.pci_bus_id = Get<std::string>(g, "pci_bus_id", "");
  gpu.numa_node = Get<int>(g, "numa_node", -1);
  gpu.cc_major = Get<int>(g, "cc_major", 8);
  gpu.cc_minor = Get<int>(g, "cc_minor", 0);
  gpu.multiprocessor_count = Get<int>(g, "multiprocessor_count", 108);
  const std::string kind = Get<std::string>(body, "backend", "sim");
  const std::string lease_id = Get<std::string>(body, "lease_id", "");
  const std::string token = Get<std::string>(body, "token", "");
  const std::string handoff_source = Get<std::string>(body, "handoff_source", "");
  if (gpu.uuid.empty() || lease_id.empty() || (kind != "sim" && kind != "cuda")) {
    return Fail("the supervisor's start message lacks a GPU, a lease or a backend");
  }

  auto state = MapShared(start->fds[0], sizeof(GpuState), /*writable=*/false);
  auto counters = MapShared(start->fds[1], sizeof(GpuCounters), /*writable=*/true);
  close(start->fds[0]);
  close(start->fds[1]);
  if (!state.ok() || !counters.ok()) return Fail("cannot map the shared pages");
  const auto* gpu_state = static_cast<const GpuState*>(state.value());
  auto* gpu_counters = static_cast<GpuCounters*>(counters.value());

  SandboxOptions sandbox;
  sandbox.user = Get<std::string>(body, "user", "nobody");
  sandbox.uid = Get<int64_t>(body, "uid", -1);
  sandbox.address_space = Get<uint64_t>(body, "address_space", 0);
  sandbox.cpu_seconds = Get<uint64_t>(body, "cpu_seconds", 0);
  if (Status entered = EnterSandbox(sandbox); !entered.ok()) {
    return Fail("cannot enter the sandbox: " + entered.message());
  }

  if (probe) return RunProbe(channel, kind, gpu, gpu_state, gpu_counters);

  auto report = [channel](const nlohmann::json& message) {
    Status sent = Send(channel, message);
    if (!sent.ok()) log::Warning("cannot tell the supervisor: " + sent.message());
  };
  WorkerBackend backend(kind, gpu, gpu_state, gpu_counters, [report](const std::string& reason) {
    report({{"type", "failed"}, {"reason", reason}});
  });

  std::atomic<bool> revoked{false};
  std::atomic<uint64_t> epoch{1};
  dataplane::ServerOptions options;
  options.backend = &backend;
  options.authorize = [&](const std::string& lease, const std::string& presented, const std::string& uuid) {
    return !revoked.load() && EqualInConstantTime(lease, lease_id) && EqualInConstantTime(presented, token) &&
           uuid == gpu.uuid;
  };
  options.authorization_epoch = [&epoch] { return epoch.load(); };
  options.handoff_window = std::chrono::milliseconds(Get<int64_t>(body, "handoff_window_ms", 30000));
  options.gpu_failed = [gpu_state](const std::string&) { return gpu_state->failed.load() != 0; };
  options.handoff_source = [handoff_source](const std::string&) { return handoff_source; };
  options.on_recovered = [report](const std::string&, const std::string&, const std::string& from, uint64_t pause_ms,
                                  uint64_t restored_bytes, uint64_t replayed, uint64_t copied_bytes) {
    report({{"type", "recovered"},
            {"from", from},
            {"pause_ms", pause_ms},
            {"restored_bytes", restored_bytes},
            {"replayed", replayed},
            {"copied_bytes", copied_bytes}});
  };
  options.on_ticket = [report](const std::string& ticket) { report({{"type", "ticket"}, {"ticket", ticket}}); };
  options.busy_since_ns = &gpu_counters->busy_since_ns;
  options.progress = &gpu_counters->progress;
  auto server = dataplane::Server::Start(std::move(options));
  if (!server.ok()) return Fail("cannot start the session's data path: " + server.status().message());
  report({{"type", "ready"}});
  log::Verbose("session worker of lease " + lease_id + " on GPU " + gpu.uuid + " ready");

  while (true) {
    Result<Message> message = Receive(channel);
    if (!message.ok()) {
      if (message.status().code() == Status::Code::kInvalidArgument) continue;
      break;  // the supervisor is gone or closed the channel: end every session
    }
    const std::string type = message->body["type"].get<std::string>();
    if (type == "client" && message->fds.size() == 1) {
      transport::Handshaken client;
      client.fd = message->fds[0];
      client.peer = Get<std::string>(message->body, "peer", "?");
      client.hello.flags = Get<uint32_t>(message->body, "flags", 0) & transport::kKnownHelloFlags;
      if (!FromHex(Get<std::string>(message->body, "worker_address", ""), &client.hello.worker_address) ||
          client.hello.worker_address.empty()) {
        close(client.fd);
        continue;
      }
      // A restore stream goes to a restore lane of the GPU (protocol.h, kOpRestoreOffer).
      client.hello.lane_key =
          gpu.uuid + (Get<bool>(message->body, "restore", false) ? dataplane::kRestoreLaneSuffix : "");
      server.value()->Adopt(std::move(client));
      continue;
    }
    for (int fd : message->fds) close(fd);
    if (type == "revoke") {
      revoked = true;
      epoch.fetch_add(1);
    } else if (type == "stop") {
      break;
    }
  }
  backend.Stop();
  server.value().reset();
  return kExitOk;
}

}  // namespace gpupool::worker
