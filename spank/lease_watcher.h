// LeaseWatcher: keeps a running job's lease alive and its lease file current.
//
// One watcher is active per job and node: the one holding the node's watcher lock
// (flock on <lease_dir>/job<ID>.<node>.lock). Every interval it renews the lease; the
// answer carries the generation, so a swap done by gpupoold (a GPU failed and another took
// its place) shows up at the next renewal: the watcher then rewrites the lease file, which
// the remoting library watches, and calls `on_swap` (the plugin tells the job
// from there). Renewal failures are logged and retried; a lease that is gone (released,
// reaped) ends the thread.
//
// A watcher starts either active, with the lease its step just acquired, or on standby
// (the extern step, which cannot see the job's options): it then looks for the job's lease
// file every interval and adopts the lease once the file exists and the lock is free, so
// that an interactive job's lease stays renewed between its steps.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "spank/lease.h"
#include "spank/plugin_config.h"

namespace gpupool::spank {

class LeaseWatcher {
 public:
  struct Options {
    PluginConfig config;
    uint32_t job_id = 0;
    std::string lease_file;
    std::string lock_path;
    uid_t uid = 0;
    gid_t gid = 0;
    // Called from the watcher thread after the lease file has been rewritten.
    std::function<void(const Lease& before, const Lease& after)> on_swap;
    std::function<void(const std::string&)> log_info;
    std::function<void(const std::string&)> log_error;
  };

  explicit LeaseWatcher(Options options);
  ~LeaseWatcher();  // Stop()s
  LeaseWatcher(const LeaseWatcher&) = delete;
  LeaseWatcher& operator=(const LeaseWatcher&) = delete;

  // Active mode: takes the lock and starts watching `lease`; false (no thread) when
  // another step of the job on this node holds the lock.
  bool StartActive(const Lease& lease);
  // Standby mode: starts a thread that adopts the lease when its file appears.
  void StartStandby();
  // Wakes the thread and joins it (at most one API call's timeout); releases the lock.
  void Stop();

 private:
  void Run();
  bool TryLock();
  // Standby: true once the lease file exists, the lock is ours and the file parsed.
  bool TryAdopt();
  // One renewal; false when the lease is gone and watching should end.
  bool Tick();

  const Options options_;
  // Only the watcher thread touches these after Start*().
  std::optional<Lease> lease_;
  int lock_fd_ = -1;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace gpupool::spank
