// PoolEngine: gpupoold's state machine. Owns the inventory and the leases, and applies
// every change: acquire, renew, release, expiry and reaping of leases; agent registration
// and heartbeats; GPU failure, unreachability and admin drain/resume/fail; and the swap
// of a failed leased GPU for a healthy one. Every change is queued to the Store in the
// order it happened and recorded as an event.
//
// Thread safety: all public methods lock mu_; callers answer a request only after
// Store::WaitDurable(store->last_ticket()) so that what they report is on disk.
// Never touches a compute node: the only outward effect of a swap is the lease's new
// generation, which the job side polls.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/auth.h"
#include "common/config.h"
#include "common/status.h"
#include "poold/inventory.h"
#include "poold/lease_tokens.h"
#include "poold/slurm_jobs.h"
#include "poold/store.h"

namespace gpupool::poold {

struct Caller {
  uid_t uid = 0;
  auth::Role role = auth::Role::kUser;
  bool is_admin() const { return role == auth::Role::kAdmin; }
  bool is_agent() const { return role == auth::Role::kAdmin || role == auth::Role::kAgent; }
};

struct PoolRequest {
  std::string pool;
  int count = 0;
  bool operator==(const PoolRequest&) const = default;
};

struct AcquireRequest {
  int64_t job_id = 0;
  std::vector<PoolRequest> request;
  std::string place = "pack";  // "pack", "spread" or "rack:NAME"
  uint64_t min_memory_mib = 0;
  int64_t ttl = 0;         // 0: the configured default
  bool has_owner = false;  // uid/user given (admins only)
  uid_t uid = 0;
  std::string user;
  // The job's processes follow a move of its GPUs (gpupool's library with failover on):
  // a drain then moves the lease instead of waiting for it.
  bool movable = false;
};

struct GpuHealthReport {
  std::string uuid;
  bool failed = false;
  std::string reason;
};

// A running process that recovered on one of the host's GPUs after its previous GPU failed
// (the remoting library tells the agent, the agent tells gpupoold in its next heartbeat).
struct RecoveryReport {
  std::string uuid;   // the GPU it recovered on (of the reporting host)
  std::string lease;  // the lease the process's session holds (the agent checked it)
  std::string from;   // the GPU it lost
  uint64_t pause_ms = 0, restored_bytes = 0, replayed = 0;
  uint64_t copied_bytes = 0;  // handed over from the old GPU's agent (a planned move)
};

// A session on one of the host's GPUs ended through its own input (its worker process
// crashed, hit a limit, or was killed): the tenant's fault, never the GPU's.
struct TenantFaultReport {
  std::string uuid;   // the GPU (of the reporting host)
  std::string lease;  // the lease whose session it was
  std::string how;    // e.g. "killed by signal 11 (Segmentation fault)"
};

struct AgentGpu {
  std::string uuid, model, pci_bus_id;
  int index = 0, numa_node = -1;
  uint64_t memory_mib = 0;
  bool failed = false;
  std::string reason;
};

struct AgentRegistration {
  std::string host, rack, endpoint;
  std::vector<AgentGpu> gpus;
};

struct EventFilter {
  std::string gpu;     // id or uuid; empty = any
  int64_t job_id = 0;  // 0 = any
  uint64_t since = 0;  // events with seq > since
  size_t limit = 1000;
};

// Counters for /metrics.
struct EngineCounters {
  uint64_t acquired = 0, released = 0, expired = 0, reaped = 0, swapped = 0, degraded = 0, failed = 0, unreachable = 0,
           recovered = 0, migrated = 0, recoveries_dropped = 0, tenant_faults = 0, agent_lost_confirmed = 0,
           agent_lost_refuted = 0, agent_lost_dropped = 0;
};

// Who owns Slurm job N, as slurmctld says (SlurmJobs::Owner). NotFound: no such job or it
// has ended; Unavailable: slurmctld did not answer. Called without the engine's lock.
using JobOwnerLookup = std::function<Result<SlurmJobOwner>(int64_t job_id)>;

// gpupoold's own look at an agent's data endpoint (agent_probe.h): OK when it answers.
// Called without the engine's lock.
using AgentProbe = std::function<Status(const std::string& endpoint)>;

// Who sent an agent's request: the TCP peer address and the credential's uid.
struct AgentSender {
  std::string address;
  uid_t uid = 0;
};

class PoolEngine {
 public:
  using Clock = std::function<int64_t()>;  // unix seconds

  PoolEngine(const Config& config, Store* store, Clock clock);

  // Rebuilds memory from what Store::Load returned. Call once, before serving.
  Status Recover(const LoadedState& state);

  // How Acquire learns a job's owner. Without one (no Slurm here), only admins acquire.
  // Call before serving.
  void SetJobOwnerLookup(JobOwnerLookup lookup) { job_owner_ = std::move(lookup); }
  // How AgentLost looks at an agent; default: ProbeAgentEndpoint with kAgentProbeTimeoutMs.
  // Call before serving.
  void SetAgentProbe(AgentProbe probe) { agent_probe_ = std::move(probe); }
  // How lease tokens are kept at rest (lease_tokens.h); default: in clear. Call before
  // Recover.
  void SetLeaseTokens(LeaseTokens tokens) { tokens_ = std::move(tokens); }

  // --- leases ---
  // Who may acquire for job N: admins (root and SlurmUser: spank_gpupool in slurmstepd),
  // for any job, on behalf of its owner (uid/user); any other user only for a job that
  // Slurm says is theirs. A job's existing lease is handed only to its owner; an admin
  // acquiring for the job's owner revokes a lease of the job held by someone else.
  // With enforce_licenses (the default), nobody, admins included, leases a job more GPUs
  // of a pool than the gpupool_<pool> licences Slurm allocated the running job: a job
  // without them gets PermissionDenied. The request is fixed for the life of the lease
  // (swaps and migrations stay in the slot's pool), so the lease never exceeds them; a
  // job's steps share its lease, handed back without asking Slurm again.
  Result<nlohmann::json> Acquire(const Caller& caller, const AcquireRequest& request, bool* created);
  Result<nlohmann::json> Renew(const Caller& caller, const std::string& lease_id, int64_t job_id);
  Result<nlohmann::json> Release(const Caller& caller, const std::string& lease_id, int64_t job_id,
                                 const std::string& why);
  Result<nlohmann::json> ListLeases(const Caller& caller, const std::string& lease_id, int64_t job_id);

  // --- inventory ---
  Result<nlohmann::json> ListPools(const std::string& name);
  Result<nlohmann::json> ListGpus(const std::string& id, const std::string& pool);
  Result<nlohmann::json> UpdateGpu(const std::string& id, const std::string& state, const std::string& reason);
  // Admin: moves one GPU of lease `lease_id` (`gpu`: its id or uuid; may be empty when the
  // lease has one GPU) to `to` (empty: placement chooses in its pool, rack-aware). The
  // lease's generation goes up, a "migrated" event is recorded, the old GPU goes back to
  // IDLE (DRAINED when drained); the job's running processes follow with their state
  // (gpupool-remote(7), FAILOVER).
  Result<nlohmann::json> Migrate(const std::string& lease_id, const std::string& gpu, const std::string& to,
                                 const std::string& reason);
  Result<nlohmann::json> ListEvents(const Caller& caller, const EventFilter& filter);

  // --- agents ---
  // `from`: who sends it, for the binding of a host to its agent (empty: in-process, not
  // checked). A host is bound to the address its agent first registers or heartbeats from
  // (kept in memory, learnt afresh after a restart): a credential from another address may
  // not register, heartbeat, fail or recover the host's GPUs (PermissionDenied), unless the
  // host is UNREACHABLE and registers again (it moved).
  Result<nlohmann::json> Register(const AgentRegistration& reg, const AgentSender& from = {});
  // `recoveries`: events to record ("recovered"); one naming a GPU of another host or a
  // lease that does not hold the GPU is ignored (an agent speaks for its own GPUs only).
  // Recovered events name the reporting host, address and uid, and at most
  // kRecoveriesPerMinute are recorded per lease (more are dropped and counted).
  Result<nlohmann::json> Heartbeat(const std::string& host, const std::vector<GpuHealthReport>& gpus,
                                   const std::vector<RecoveryReport>& recoveries = {}, const AgentSender& from = {});
  static constexpr int kRecoveriesPerMinute = 10;
  // Records a "tenant_fault" event for each report whose GPU is the host's and held by the
  // lease it names (others are ignored); the GPU's state does not change. Counted with the
  // recovered events against kRecoveriesPerMinute per lease. Same sender check as Heartbeat.
  Status RecordTenantFaults(const std::string& host, const std::vector<TenantFaultReport>& reports,
                            const AgentSender& from = {});

  // A process of lease `lease_id`, presenting the lease's `token`, lost its connection to
  // the agent of GPU `gpu_uuid` (POST /v1/leases/agent-lost). Its word alone changes
  // nothing: gpupoold probes the agent itself (SetAgentProbe, at most kAgentProbeTimeoutMs),
  // and only when the agent does not answer is its host marked UNREACHABLE and the host's
  // leased GPUs swapped, as a silent host's are at unreachable_timeout. A host whose agent
  // answered a probe within the last kAgentProbeFreshMs is not probed again; a lease may
  // report kLostReportsPerMinute times a minute (Unavailable after that, counted in
  // gpupool_agent_lost_dropped_total). A wrong token, or a lease that does not exist, is
  // PermissionDenied (the same words for both); a GPU the lease no longer holds is no
  // report (the lease has moved: the answer says where). Answers {"probe": what gpupoold
  // saw, "agent_lost": bool, "lease": the lease as GET /v1/leases shows it, no token}.
  Result<nlohmann::json> AgentLost(const std::string& lease_id, const std::string& token, const std::string& gpu_uuid);
  static constexpr int kLostReportsPerMinute = 10;
  static constexpr int kAgentProbeTimeoutMs = 600;
  static constexpr int kAgentProbeFreshMs = 1000;

  // Periodic work: hosts silent for unreachable_timeout → UNREACHABLE (and swaps);
  // leases past their expiry → released. `deaf`: gpupoold itself was too busy to hear
  // agents within the last unreachable_timeout (ApiServer::Stalled), so a host's silence
  // proves nothing: no host is declared UNREACHABLE on this tick.
  void Tick(bool deaf = false);
  // Leases that belong to Slurm jobs: (job id, lease number), for the reaper.
  std::vector<std::pair<int64_t, uint64_t>> SlurmJobLeases();
  // Releases lease `number` if it still belongs to `job_id` (the job has ended).
  void ReapJob(int64_t job_id, uint64_t number);

  // For /metrics.
  std::vector<std::pair<std::string, PoolCounts>> PoolSnapshot();
  EngineCounters counters();
  size_t lease_count();
  size_t inventory_bytes();

  // Checks invariants (a GPU in at most one lease, lease↔GPU links agree, idle index right);
  // returns the first violation. For tests.
  Status CheckInvariants();

 private:
  struct Lease {
    uint64_t number = 0;
    int64_t job_id = 0;
    uid_t uid = 0;
    std::string user;
    std::vector<PoolRequest> request;
    std::string place;
    uint64_t min_memory_mib = 0;
    std::vector<GpuIndex> gpus;  // device order; slot i belongs to pool slot_pool[i]
    std::vector<uint32_t> slot_pool;
    // Per slot, the GPU it held before its last move (kNone: none known). Not persisted:
    // the new GPU's agent pulls a process's memory only from that GPU's agent (a handoff),
    // and after a restart of gpupoold processes recover from their checkpoints instead.
    std::vector<GpuIndex> moved_from;
    uint64_t generation = 1;
    bool degraded = false;
    bool movable = false;
    std::string token;         // in memory only
    std::string stored_token;  // what the state keeps for it (LeaseTokens)
    int64_t created = 0, renewed = 0, expires = 0, ttl = 0;
  };

  // All REQUIRES: mu_ held.
  Lease* FindLease(const std::string& id, int64_t job_id, Status* why);
  Status CheckOwner(const Caller& caller, const Lease& lease) const;
  // Without mu_: asks job_owner_ whether `caller` may lease for the job (its owner, or an
  // admin acquiring for its owner), whether it runs, and (enforce_licenses) whether the
  // request fits in the gpupool_<pool> licences Slurm allocated it.
  Status CheckJob(const Caller& caller, const AcquireRequest& req) const;
  void ReleaseLocked(Lease* lease, const std::string& type, const std::string& detail);
  void FailGpu(GpuIndex g, GpuState to, const std::string& reason, const std::string& event_type);
  void RecoverGpu(GpuIndex g, const std::string& detail);
  void SwapOut(GpuIndex g, const std::string& reason);
  // Moves slot `slot` of `lease` to `to` (kNone: placement chooses, rack-aware), records
  // `event` ("swapped" or "migrated"); false when there is no GPU to move to.
  bool ReplaceSlot(Lease* lease, size_t slot, const std::string& reason, GpuIndex to = kNone,
                   const char* event = "swapped");
  void HealDegraded();
  void MoveDrainingLeases();
  void UpdateLeaseHealth(Lease* lease);
  void MarkHostUnreachable(Host* host, const std::string& reason);
  void PersistGpu(GpuIndex g);
  void PersistLease(const Lease& lease);
  void Event(const std::string& type, GpuIndex gpu, const Lease* lease, const std::string& detail);
  // The lease a client's report (through the agent of `host_id`) names, when it holds GPU
  // `uuid` of that host (*gpu then names the GPU), and when the lease has not had
  // kRecoveriesPerMinute reports this minute (counted as dropped otherwise); else nullptr.
  // REQUIRES: mu_ held.
  Lease* ReportedLease(NameId host_id, const std::string& uuid, const std::string& lease, GpuIndex* gpu);
  nlohmann::json GpuJson(GpuIndex g) const;
  nlohmann::json LeaseJson(const Lease& lease, bool with_token) const;
  nlohmann::json EventJson(const EventRow& e) const;
  static std::string LeaseName(uint64_t number) { return "L" + std::to_string(number); }

  const Config config_;
  Store* const store_;
  const Clock clock_;
  LeaseTokens tokens_;        // set before serving, then read-only
  JobOwnerLookup job_owner_;  // set before serving, then read-only
  AgentProbe agent_probe_;    // set before serving, then read-only

  // Every method holds mu_ and a Store::Hold with it: the rows one operation queues go to
  // the store in one transaction.
  std::mutex mu_;
  Inventory inventory_;                       // GUARDED_BY(mu_)
  std::map<uint64_t, Lease> leases_;          // GUARDED_BY(mu_)
  std::map<int64_t, uint64_t> lease_by_job_;  // GUARDED_BY(mu_)
  std::set<uint64_t> degraded_;               // GUARDED_BY(mu_): leases with a bad slot
  // GUARDED_BY(mu_): DRAINING GPUs of movable leases, to move when a GPU is free.
  std::set<GpuIndex> draining_movable_;
  std::deque<EventRow> events_;  // GUARDED_BY(mu_): newest kEventMemory
  // Host → the address its agent speaks from and the uid it speaks as (Register,
  // Heartbeat): the uid tells apart agents of one address (one machine, several users).
  std::map<NameId, AgentSender> agent_sender_;  // GUARDED_BY(mu_)
  // Lease number → (minute, recovered events recorded in it): the rate limit.
  std::map<uint64_t, std::pair<int64_t, int>> recoveries_per_minute_;  // GUARDED_BY(mu_)
  // Lease number → (minute, agent-lost reports in it): AgentLost's rate limit.
  std::map<uint64_t, std::pair<int64_t, int>> lost_reports_per_minute_;  // GUARDED_BY(mu_)
  // Host → when its agent last answered a probe (AgentLost).
  std::map<NameId, std::chrono::steady_clock::time_point> agent_answered_;  // GUARDED_BY(mu_)
  // REQUIRES mu_: whether `from` may speak for host `host` (see Register).
  Status CheckAgentSender(NameId host, const AgentSender& from, bool registering);
  std::vector<bool> reported_failed_;        // GUARDED_BY(mu_): by GpuIndex, last agent health
  uint64_t next_lease_ = 1;                  // GUARDED_BY(mu_)
  uint64_t next_event_ = 1;                  // GUARDED_BY(mu_)
  EngineCounters counters_;                  // GUARDED_BY(mu_)
  std::map<uid_t, std::string> user_names_;  // GUARDED_BY(mu_): passwd lookups, cached
};

}  // namespace gpupool::poold
