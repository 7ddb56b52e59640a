// EtcdStore: gpupoold's state in etcd (`state = "etcd"`), written only by the elected leader.
//
// Keys, under the configured prefix P:
//   P leader              the election key (poold/leader_election.h)
//   P gpus/<uuid>         a GpuRow as JSON
//   P leases/<number>     a LeaseRow as JSON (number zero-padded to 20 digits: keys sort by it)
//   P events/<seq>        an EventRow as JSON (same padding)
//   P meta/next_lease     the next lease number (never reused)
// Every transaction compares the leader key's create revision with the one this replica
// created when it won the election: a deposed or paused leader (its etcd lease lapsed,
// another replica created the key anew) can never write. Such a refused write fails the
// store, and the daemon stops, exactly as when SQLite cannot write.
//
// etcd refuses transactions of more than --max-txn-ops operations (default 128). A batch
// whose distinct keys exceed `max_txn_ops` is written in several transactions, each fenced;
// the dev cluster raises etcd's limit so that this does not happen in practice.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "poold/etcd_client.h"
#include "poold/store.h"

namespace gpupool::poold {

class EtcdStore final : public Store {
 public:
  // `fence_revision`: the create revision of the leader key `prefix + "leader"` this replica
  // holds; every write is conditioned on it.
  static Result<std::unique_ptr<Store>> Open(EtcdAccess access, std::string prefix, int64_t fence_revision,
                                             int max_txn_ops = 128);
  ~EtcdStore() override;
  Result<LoadedState> Load(size_t recent_events) override;

 private:
  EtcdStore(EtcdAccess access, std::string prefix, int64_t fence_revision, int max_txn_ops);
  Status WriteBatch(const std::vector<Op>& ops) override;
  Status TrimEvents(uint64_t keep) override;
  Status Commit(const nlohmann::json& ops);

  EtcdClient etcd_;
  const std::string prefix_;
  const int64_t fence_revision_;
  const int max_txn_ops_;
  uint64_t newest_event_ = 0;  // committer thread only
};

// Row <-> JSON, as stored (exposed for tests).
nlohmann::json GpuRowToJson(const GpuRow& r);
nlohmann::json LeaseRowToJson(const LeaseRow& r);
nlohmann::json EventRowToJson(const EventRow& r);
Result<GpuRow> GpuRowFromJson(const std::string& text);
Result<LeaseRow> LeaseRowFromJson(const std::string& text);
Result<EventRow> EventRowFromJson(const std::string& text);

}  // namespace gpupool::poold
