// Agent: keeps gpupoold informed about this host's GPUs.
//
// One thread registers the host (POST /v1/agents/register), retrying with backoff while
// gpupoold is unreachable, then heartbeats every heartbeat_interval seconds with each GPU's
// health (POST /v1/agents/heartbeat) and stores the answer's leases in the LeaseTable.
// A health change in the backend triggers a heartbeat at once. A 404 answer (gpupoold
// restarted without its inventory) makes the agent register again. Each kind of trouble is
// logged once when it starts and once when it ends, not at every retry.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/status.h"
#include "remote/agentd/lease_table.h"
#include "remote/device/backend.h"

namespace gpupool::agentd {

struct AgentOptions {
  AgentConfig config;        // server, host, rack, listen (the advertised endpoint), interval
  std::string munge_socket;  // for ApiClient; empty: $MUNGE_SOCKET or libmunge's default
  int initial_backoff_ms = 200;
  int max_backoff_ms = 5000;
  // True while data-path clients are attached: then leases are fetched every
  // lease_refresh_ms (instead of every heartbeat interval), so that a lease released,
  // expired or moved reaches the data path, which closes its sessions, within a second.
  std::function<bool()> leases_in_use;
  int lease_refresh_ms = 400;
};

class Agent {
 public:
  // `backend` and `leases` must outlive the Agent.
  Agent(AgentOptions options, device::GpuBackend* backend, LeaseTable* leases);
  ~Agent();  // Stop()s
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Starts the thread and installs the backend's health listener.
  void Start();
  // Stops the thread (interrupting a backoff or a wait); idempotent.
  void Stop();

  // Asks for a heartbeat now (the backend's health listener calls it).
  void HeartbeatSoon();

  // Asks for a heartbeat now and waits until one that started after this call has been
  // answered (its leases are then in the LeaseTable), at most `timeout_ms`. Returns false
  // on timeout or stop. The data path calls it before refusing a client whose lease it
  // does not know yet: a job's first CUDA call often comes before the next heartbeat.
  bool RefreshLeases(int timeout_ms);

  // A client of `gpu_uuid` (session of `lease`, checked by the data path) recovered there
  // after losing GPU `from`: reported to gpupoold with the next heartbeat (asked for now),
  // which records a "recovered" event. Any thread.
  void ReportRecovery(const std::string& gpu_uuid, const std::string& lease, const std::string& from, uint64_t pause_ms,
                      uint64_t restored_bytes, uint64_t replayed, uint64_t copied_bytes = 0);

  // A session worker of `lease` on `gpu_uuid` ended through its tenant's own input (`how`):
  // reported with the next heartbeat (asked for now), which records a "tenant_fault" event;
  // the GPU's health does not change. Any thread.
  void ReportTenantFault(const std::string& gpu_uuid, const std::string& lease, const std::string& how);

  bool registered() const { return registered_.load(); }
  uint64_t registrations() const { return registrations_.load(); }
  uint64_t heartbeats() const { return heartbeats_.load(); }  // successful ones

  // The request bodies (exposed for tests).
  nlohmann::json RegisterBody() const;
  nlohmann::json HeartbeatBody() const;

 private:
  void Run();
  // The time between heartbeats now (shorter while data-path clients are attached).
  int HeartbeatIntervalMs() const;
  // Waits up to `ms` or until Stop()/HeartbeatSoon(); returns false when stopping.
  bool Wait(int ms);
  void Trouble(const std::string& what, const Status& status);  // logs a new kind of failure
  void Recovered(const std::string& message);                   // logs the end of it

  // What wakes the agent thread. Shared with the backend's health listener, which may
  // still be running on a data-path thread after the Agent is gone.
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;             // guarded by mu
    bool heartbeat_soon = false;       // guarded by mu
    uint64_t heartbeats_started = 0;   // guarded by mu; numbers each heartbeat sent
    uint64_t heartbeats_answered = 0;  // guarded by mu; last number answered (or failed)
  };

  const AgentOptions options_;
  device::GpuBackend* const backend_;
  LeaseTable* const leases_;
  const std::shared_ptr<Wake> wake_ = std::make_shared<Wake>();
  std::thread thread_;

  std::atomic<bool> registered_{false};
  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> heartbeats_{0};
  std::string trouble_;  // the failure last logged; used only by the agent thread
  std::mutex recoveries_mu_;
  nlohmann::json recoveries_ = nlohmann::json::array();     // not yet sent; guarded by recoveries_mu_
  nlohmann::json tenant_faults_ = nlohmann::json::array();  // likewise
};

}  // namespace gpupool::agentd
