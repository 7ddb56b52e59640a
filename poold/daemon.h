// Daemon: gpupoold assembled: store, engine, API server and the periodic threads (liveness
// and expiry every second; Slurm job reaping every reap_interval). main() only parses
// options and calls Run(); tests start a Daemon in-process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/status.h"
#include "poold/api_server.h"
#include "poold/pool_engine.h"
#include "poold/slurm_jobs.h"
#include "poold/store.h"

namespace gpupool::poold {

class Daemon {
 public:
  // `job_owner` answers who owns a Slurm job (tests pass their own); empty: libslurm,
  // when slurm.conf is readable here, else users cannot acquire (only admins can).
  explicit Daemon(Config config, JobOwnerLookup job_owner = {});
  ~Daemon();

  // Opens the state, recovers, binds. After it returns OK, port() is known.
  Status Start();
  // Serves until Stop() (from a signal handler thread or a test). Blocks.
  void Run();
  void Stop();

  int port() const { return server_ ? server_->port() : 0; }
  // Why the daemon stopped itself (its state store failed); OK after an ordinary Stop().
  // main() exits non-zero on it, so that a supervisor restarts gpupoold from disk.
  Status fatal();
  PoolEngine* engine() { return engine_.get(); }

 private:
  void PeriodicLoop();

  Config config_;
  JobOwnerLookup job_owner_;
  std::unique_ptr<SlurmJobs> slurm_owners_;  // backs job_owner_ when none was given
  std::unique_ptr<Store> store_;
  std::unique_ptr<PoolEngine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::thread periodic_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  Status fatal_;           // GUARDED_BY(mu_)
};

}  // namespace gpupool::poold
