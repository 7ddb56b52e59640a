// Daemon: gpupoold assembled: store, engine, API server and the periodic threads (liveness
// and expiry every second; Slurm job reaping every reap_interval). main() only parses
// options and calls Run(); tests start a Daemon in-process.
//
// With `state = "etcd"` the daemon is one of several replicas: it serves a StandbyServer
// (answers: the leader is there) while it campaigns, and once elected it loads the state
// from etcd and serves the API on the same port. A leader that loses leadership stops
// (fatal()), so that its supervisor restarts it as a follower.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/status.h"
#include "poold/api_server.h"
#include "poold/leader_election.h"
#include "poold/pool_engine.h"
#include "poold/slurm_jobs.h"
#include "poold/standby_server.h"
#include "poold/store.h"

namespace gpupool::poold {

class Daemon {
 public:
  // `job_owner` answers who owns a Slurm job (tests pass their own); empty: libslurm,
  // when slurm.conf is readable here, else users cannot acquire (only admins can).
  explicit Daemon(Config config, JobOwnerLookup job_owner = {});
  ~Daemon();

  // Opens the state, recovers, binds (etcd: binds the standby server and starts the
  // campaign). After it returns OK, port() is known.
  Status Start();
  // Serves until Stop() (from a signal handler thread or a test). Blocks.
  void Run();
  void Stop();

  int port() const { return port_; }
  // etcd: whether this replica leads now (always true with SQLite once started).
  bool is_leader() const { return leading_; }
  // Why the daemon stopped itself (its state store failed); OK after an ordinary Stop().
  // main() exits non-zero on it, so that a supervisor restarts gpupoold from disk.
  Status fatal();
  PoolEngine* engine() { return engine_.get(); }

 private:
  void PeriodicLoop();
  // Store, engine and API server over a store that is open; binds `listen`.
  Status Serve(std::unique_ptr<Store> store, const std::string& listen);
  void CampaignLoop();
  void Fail(const Status& why);
  std::string AdvertisedUrl() const;

  Config config_;
  JobOwnerLookup job_owner_;
  std::unique_ptr<SlurmJobs> slurm_owners_;  // backs job_owner_ when none was given
  std::unique_ptr<Store> store_;
  std::unique_ptr<PoolEngine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<LeaderElection> election_;  // etcd only
  EtcdAccess etcd_access_;                    // etcd only: checked once at Start()
  std::unique_ptr<StandbyServer> standby_;    // etcd only, until elected
  std::thread campaign_;
  std::atomic<int> port_{0};
  std::atomic<bool> leading_{false};
  bool leader_ready_ = false;  // GUARDED_BY(mu_): server_ is bound and may serve
  std::thread periodic_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  Status fatal_;           // GUARDED_BY(mu_)
};

}  // namespace gpupool::poold
