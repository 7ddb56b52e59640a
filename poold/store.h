// Store: gpupoold's durable state: SQLite (WAL) under the state directory, or etcd
// (poold/etcd_store.h) when replicas share it.
//
// Mutations are queued as row images and written many requests per transaction (group
// commit), so that the cost of a durable commit is shared by all requests that arrived
// while the previous one was being written. One writer at a time: the first request to
// wait while nobody writes writes the batch itself; a background committer writes what
// nobody waits for. A request is answered only after WaitDurable(ticket) returns, so every
// acknowledged lease is on disk.
//
// Thread safety: Enqueue* may be called from any thread but callers must serialise them in
// the order the state changed (PoolEngine calls them under its mutex). Load() only at start.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gpupool::poold {

struct GpuRow {
  std::string uuid, host, rack, model, pci_bus_id, endpoint, state, reason;
  int index = 0, numa_node = -1;
  uint64_t memory_mib = 0;
  bool admin_drain = false, admin_fail = false;
};

struct LeaseRow {
  uint64_t number = 0;
  int64_t job_id = 0;
  uint32_t uid = 0;
  std::string user, request_json, place, state, token, gpus_json;
  uint64_t min_memory_mib = 0, generation = 0;
  int64_t created = 0, renewed = 0, expires = 0, ttl = 0;
  bool movable = false;  // the job's processes follow a move (a drain moves the lease)
};

struct EventRow {
  uint64_t seq = 0;
  int64_t time = 0;
  std::string type, gpu, lease, detail;
  int64_t job_id = 0;
  uint32_t uid = 0;  // the lease owner's (0 for events of no lease): users see their own
};

struct LeaseDelete {
  uint64_t number = 0;
};

struct LoadedState {
  std::vector<GpuRow> gpus;
  std::vector<LeaseRow> leases;
  std::vector<EventRow> recent_events;  // the newest, oldest first
  uint64_t next_lease = 1;
  uint64_t next_event = 1;
};

// The queue, the committers and the tickets are common to every backend; a backend
// writes batches (WriteBatch) and reads the state back (Load).
class Store {
 public:
  // The SQLite backend: opens (creating if needed) `<state_dir>/gpupoold.db`. `fsync`:
  // synchronous=FULL (survives power loss) or NORMAL (survives kill -9 of the daemon, not of
  // the machine).
  static Result<std::unique_ptr<Store>> Open(const std::string& state_dir, bool fsync);
  virtual ~Store();

  virtual Result<LoadedState> Load(size_t recent_events) = 0;

  using Op = std::variant<GpuRow, LeaseRow, LeaseDelete, EventRow>;
  // Queues one change; returns its ticket. REQUIRES: callers serialise (see above).
  uint64_t Enqueue(Op op);
  // Held by one operation that queues several changes (PoolEngine holds one for as long as
  // it holds its lock): the committer waits for it to end, at most a millisecond, so that
  // one request's rows go in one transaction rather than two (an etcd round trip each).
  class Hold {
   public:
    explicit Hold(Store* store);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Store* const store_;
  };
  // Blocks until every change up to `ticket` is committed. Returns the commit error if the
  // write failed (then the daemon must stop: memory is ahead of disk).
  Status WaitDurable(uint64_t ticket);
  uint64_t last_ticket() const;
  // OK, or the write error that stopped the store. Once failed, it stays failed: memory is
  // ahead of disk, and only a restart that reloads the disk makes them agree again.
  Status Health() const;

  // Events older than the newest `keep` are deleted by the committer from time to time.
  void set_event_retention(uint64_t keep) { event_retention_ = keep; }
  uint64_t commits() const;  // transactions written so far (for metrics)
  // WAL checkpoints done so far (SQLite; 0 for etcd), for metrics.
  virtual uint64_t checkpoints() const { return 0; }

 protected:
  Store() = default;
  // Subclasses start the committer once they can write, and stop it in their destructor
  // before what WriteBatch uses goes away.
  void StartCommitter();
  void StopCommitter();
  // Writes `ops` atomically (all or none), in order. Called by one committer at a time.
  virtual Status WriteBatch(const std::vector<Op>& ops) = 0;
  // Deletes events older than the newest `keep`, every 10,000 changes. Housekeeping: a
  // failure is only logged. A backend that trims inside its batches (SQLite) keeps this.
  virtual Status TrimEvents(uint64_t /*keep*/) { return Status::OK(); }
  uint64_t event_retention() const { return event_retention_; }

 private:
  void CommitterLoop();
  void CommitQueued(std::unique_lock<std::mutex>& lock);

  uint64_t event_retention_ = 1000000;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // the background committer waits for a batch
  std::condition_variable durable_cv_;  // requests wait for their ticket or to commit
  std::condition_variable held_cv_;     // a commit waits for the Holds to end
  std::deque<Op> queue_;                // GUARDED_BY(mu_)
  uint64_t enqueued_ = 0;               // GUARDED_BY(mu_): ticket of the last queued op
  uint64_t durable_ = 0;                // GUARDED_BY(mu_): ticket of the last committed op
  uint64_t commits_ = 0;                // GUARDED_BY(mu_)
  Status failure_;                      // GUARDED_BY(mu_): sticky commit error
  bool stopping_ = false;               // GUARDED_BY(mu_)
  int held_ = 0;                        // GUARDED_BY(mu_): Holds alive
  bool committing_ = false;             // GUARDED_BY(mu_): a batch is being written
  uint64_t since_trim_ = 0;             // the committer of the moment's (committing_)
  std::thread committer_;
};

// SQLite in WAL mode (the embedded default, `state = "sqlite"`).
//
// A commit only appends to the WAL and syncs it. Copying the WAL back into the database
// (a checkpoint: a few MiB written and synced) happens on a thread and connection of its
// own, so that no request waits behind it; SQLite's automatic checkpoint would run it inside
// every thousandth page's commit and hold every request of that batch. Old events are
// deleted in each batch, a few rows at a time, for the same reason.
class SqliteStore final : public Store {
 public:
  ~SqliteStore() override;
  Result<LoadedState> Load(size_t recent_events) override;
  uint64_t checkpoints() const override;

 private:
  friend class Store;
  SqliteStore() = default;
  Status WriteBatch(const std::vector<Op>& ops) override;
  Status RollBack(const std::string& why);
  Status Exec(const char* sql);
  Status Migrate();
  Status Step(sqlite3_stmt* cached);
  // Called by SQLite after each commit with the pages now in the WAL (the committer).
  static int OnWalCommit(void* self, sqlite3* db, const char* name, int pages);
  void CheckpointLoop();
  void StopCheckpointer();

  sqlite3* db_ = nullptr;
  // Prepared once, used only by the committer of the moment.
  sqlite3_stmt* put_gpu_ = nullptr;
  sqlite3_stmt* put_lease_ = nullptr;
  sqlite3_stmt* delete_lease_ = nullptr;
  sqlite3_stmt* put_event_ = nullptr;
  sqlite3_stmt* put_next_lease_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* trim_events_ = nullptr;

  // The checkpointer's own connection and thread.
  sqlite3* checkpoint_db_ = nullptr;
  std::thread checkpointer_;
  mutable std::mutex checkpoint_mu_;
  std::condition_variable checkpoint_cv_;
  bool checkpoint_wanted_ = false;  // GUARDED_BY(checkpoint_mu_)
  bool checkpoint_stop_ = false;    // GUARDED_BY(checkpoint_mu_)
  uint64_t checkpoints_ = 0;        // GUARDED_BY(checkpoint_mu_)
};

}  // namespace gpupool::poold
