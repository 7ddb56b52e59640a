// Store: gpupoold's durable state: SQLite (WAL) under the state directory, or etcd
// (poold/etcd_store.h) when replicas share it.
//
// Mutations are queued as row images and written by one committer thread, many requests
// per transaction (group commit), so that the cost of a durable commit is shared by all
// requests that arrived while the previous one was being written. A request is answered
// only after WaitDurable(ticket) returns, so every acknowledged lease is on disk.
//
// Thread safety: Enqueue* may be called from any thread but callers must serialise them in
// the order the state changed (PoolEngine calls them under its mutex). Load() only at start.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "common/status.h"
#include "poold/metrics.h"

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

// The queue, the committer thread and the tickets are common to every backend; a backend
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
  // it holds its lock): the committer takes the changes queued under a Hold only once it
  // has ended, so that one request's rows go in one transaction (all or none, and one etcd
  // round trip). It never waits for a Hold: what was queued before it is written at once.
  class Hold {
   public:
    explicit Hold(Store* store);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Store* const store_;
  };
  // Lets a request served alone write its own changes on its thread, saving the committer's
  // wake and the hand-over of its answer (at one client, most of a request's time but the
  // fsync). While one is alive and `wanted` (and the store writes inline at all:
  // set_inline_writes), the changes the constructing thread completes do not wake the
  // committer; Write(ticket) then writes every complete change up to and past `ticket` here
  // when nothing is being written, as the committer would (one batch, in ticket order), and
  // the destructor wakes the committer for whatever this thread left unwritten.
  // Thread safety: created, used and destroyed on one thread.
  class InlineWrite {
   public:
    InlineWrite(Store* store, bool wanted);
    ~InlineWrite();
    InlineWrite(const InlineWrite&) = delete;
    InlineWrite& operator=(const InlineWrite&) = delete;
    // True when `ticket` is now durable, or the store has failed (WaitDurable says which,
    // at once); false when another write was in progress or the change is not complete (a
    // Hold still open): then the committer writes it, and the caller waits as usual.
    bool Write(uint64_t ticket);

   private:
    Store* const store_;
    Store* const outer_;  // the thread's previous deferral (nested InlineWrites)
    const bool active_;
  };
  // The SQLite store writes inline; an etcd store does not (its writes are round trips
  // that a worker should not wait out). Before the store is used.
  void set_inline_writes(bool on) { inline_writes_ = on; }
  uint64_t inline_commits() const;  // transactions written by InlineWrite (for tests, metrics)
  // Blocks until every change up to `ticket` is committed. Returns the commit error if the
  // write failed (then the daemon must stop: memory is ahead of disk).
  Status WaitDurable(uint64_t ticket);
  // Called by the committer after each commit, and once from this call, with the ticket of
  // the last committed op and the store's health (a failure is sticky: every later call
  // carries it). Lets an answer wait for its ticket without a thread blocked on it (the
  // HTTP server holds answers until then). Values may arrive out of order when a call from
  // here overlaps a commit's: the listener keeps the largest. Set or replaced
  // at any time (an empty listener removes it: once this returns, no call to the old one is
  // running or will come). The listener must not call into the store.
  using DurableListener = std::function<void(uint64_t durable, const Status& health)>;
  void SetDurableListener(DurableListener listener);
  uint64_t last_ticket() const;
  // OK, or the write error that stopped the store. Once failed, it stays failed: memory is
  // ahead of disk, and only a restart that reloads the disk makes them agree again.
  Status Health() const;

  // Events older than the newest `keep` are deleted by the committer from time to time.
  void set_event_retention(uint64_t keep) { event_retention_ = keep; }
  uint64_t commits() const;  // transactions written so far (for metrics)
  // How long each of them took to write, its fsync included (for metrics: a slow disk shows
  // here before it shows in every request's latency).
  const LatencyHistogram& commit_duration() const { return commit_duration_; }

 protected:
  Store() = default;
  // Subclasses start the committer once they can write, and stop it in their destructor
  // before what WriteBatch uses goes away.
  void StartCommitter();
  void StopCommitter();
  // Writes `ops` atomically (all or none), in order. Called by the committer thread only.
  virtual Status WriteBatch(const std::vector<Op>& ops) = 0;
  // Deletes events older than the newest `keep`, every 10,000 changes. Housekeeping: a
  // failure is only logged. A backend that trims inside its batches (SQLite) keeps this.
  virtual Status TrimEvents(uint64_t /*keep*/) { return Status::OK(); }
  uint64_t event_retention() const { return event_retention_; }

 private:
  void CommitterLoop();
  // Wakes the committer for complete changes, unless the calling thread defers the wake
  // (InlineWrite). REQUIRES: mu_ not held.
  void WakeCommitter();
  // Takes the complete changes nobody has taken, up to complete_ (all of them when
  // stopping), for one writer, and marks a write in progress. REQUIRES: mu_ held, no
  // write in progress, something to take.
  std::vector<Op> TakeBatch(uint64_t* last);
  // Writes a taken batch (mu_ not held), then records it durable (or the failure), ends
  // the write in progress, tells WaitDurable and the listener, and, from an InlineWrite
  // (`wake_committer`), wakes the committer for what completed meanwhile.
  void WriteTaken(const std::vector<Op>& batch, uint64_t last, bool wake_committer);

  uint64_t event_retention_ = 1000000;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // committer waits for work
  std::condition_variable durable_cv_;  // requests wait for their ticket
  std::deque<Op> queue_;                // GUARDED_BY(mu_)
  uint64_t enqueued_ = 0;               // GUARDED_BY(mu_): ticket of the last queued op
  uint64_t durable_ = 0;                // GUARDED_BY(mu_): ticket of the last committed op
  uint64_t commits_ = 0;                // GUARDED_BY(mu_)
  uint64_t inline_commits_ = 0;         // GUARDED_BY(mu_)
  bool writing_ = false;                // GUARDED_BY(mu_): a batch is being written
  bool inline_writes_ = false;
  uint64_t since_trim_ = 0;           // changes written since the last trim (by the writer)
  LatencyHistogram commit_duration_;  // written by the committer, read by anyone
  Status failure_;                    // GUARDED_BY(mu_): sticky commit error
  bool stopping_ = false;             // GUARDED_BY(mu_)
  int held_ = 0;                      // GUARDED_BY(mu_): Holds alive
  // GUARDED_BY(mu_): ticket of the last op that no live Hold covers: the committer takes
  // the queue up to it. Callers serialise, so the ops after it are one operation's.
  uint64_t complete_ = 0;
  // Calls to the listener and its replacement are serialised by listener_mu_ (taken before
  // mu_ where both are held), so that a removed listener is never called again.
  std::mutex listener_mu_;
  DurableListener listener_;  // GUARDED_BY(listener_mu_)
  std::thread committer_;
};

// SQLite in WAL mode (the embedded default, `state = "sqlite"`). Old events are deleted in
// each batch, a few rows at a time: the periodic trim deleted 10,000 at once, inside the
// commit that every waiting request of its batch waited for.
class SqliteStore final : public Store {
 public:
  ~SqliteStore() override;
  Result<LoadedState> Load(size_t recent_events) override;

 private:
  friend class Store;
  SqliteStore() = default;
  Status WriteBatch(const std::vector<Op>& ops) override;
  Status RollBack(const std::string& why);
  Status Exec(const char* sql);
  Status Migrate();
  Status Step(sqlite3_stmt* cached);

  sqlite3* db_ = nullptr;
  // Prepared once, used only by the committer thread.
  sqlite3_stmt* put_gpu_ = nullptr;
  sqlite3_stmt* put_lease_ = nullptr;
  sqlite3_stmt* delete_lease_ = nullptr;
  sqlite3_stmt* put_event_ = nullptr;
  sqlite3_stmt* put_next_lease_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* trim_events_ = nullptr;
};

}  // namespace gpupool::poold
