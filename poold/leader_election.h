// LeaderElection: one gpupoold replica leads, through etcd (`state = "etcd"`).
//
// A replica campaigns by creating the key `<prefix>leader` (value: its advertised URL) with
// an etcd lease of `ttl` seconds, in a transaction that succeeds only if the key does not
// exist. The winner keeps its lease alive (every ttl/3); the key's create revision is the
// fence every one of its writes is conditioned on (poold/etcd_store.h). The others poll the
// key and campaign again as soon as it is gone: when the leader resigns (a clean stop) at
// once, when it dies or pauses after its lease lapses, i.e. within about `ttl`.
//
// A leader that cannot renew its lease before it lapses has lost: `on_lost` is called once
// (gpupoold then stops; its supervisor restarts it as a follower). Even before it notices,
// it cannot write, because the fence no longer matches.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "poold/etcd_client.h"

namespace gpupool::poold {

class LeaderElection {
 public:
  LeaderElection(EtcdAccess access, std::string prefix, std::string my_url, int ttl_seconds);
  ~LeaderElection();

  // Blocks until this replica leads (OK, fence_revision() set and the keep-alive running)
  // or Cancel() was called (Unavailable). etcd being unreachable is retried, not returned:
  // a follower waits for quorum to come back.
  Status Campaign(std::function<void(const Status&)> on_lost);
  // Ends Campaign() and the keep-alive; gives the leadership up (deletes the key at once
  // by revoking the lease) if this replica leads. Callable from any thread, more than once.
  void Cancel();

  bool is_leader() const { return leader_; }
  int64_t fence_revision() const { return fence_revision_; }
  // The leader's URL as last seen ("" when none is known).
  std::string leader_url() const;
  const std::string& my_url() const { return my_url_; }

 private:
  void KeepAliveLoop(std::unique_ptr<EtcdClient> client, std::function<void(const Status&)> on_lost);
  bool WaitFor(int milliseconds);  // false when cancelled

  const EtcdAccess access_;
  const std::string prefix_, my_url_;
  const int ttl_;
  std::atomic<bool> leader_{false};
  std::atomic<int64_t> fence_revision_{0};
  std::atomic<int64_t> lease_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;  // GUARDED_BY(mu_)
  std::string leader_url_;  // GUARDED_BY(mu_)
  std::thread keepalive_;
};

}  // namespace gpupool::poold
