#include "poold/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"

namespace gpupool::poold {
namespace {

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gpus (
  uuid TEXT PRIMARY KEY, host TEXT NOT NULL, idx INTEGER NOT NULL, rack TEXT NOT NULL,
  model TEXT NOT NULL, memory_mib INTEGER NOT NULL, pci_bus_id TEXT NOT NULL,
  numa_node INTEGER NOT NULL, endpoint TEXT NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL, admin_drain INTEGER NOT NULL, admin_fail INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
  number INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, uid INTEGER NOT NULL,
  user TEXT NOT NULL, request TEXT NOT NULL, place TEXT NOT NULL,
  min_memory_mib INTEGER NOT NULL, gpus TEXT NOT NULL, generation INTEGER NOT NULL,
  state TEXT NOT NULL, token TEXT NOT NULL, created INTEGER NOT NULL,
  renewed INTEGER NOT NULL, expires INTEGER NOT NULL, ttl INTEGER NOT NULL,
  movable INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY, time INTEGER NOT NULL, type TEXT NOT NULL, gpu TEXT NOT NULL,
  job_id INTEGER NOT NULL, lease TEXT NOT NULL, detail TEXT NOT NULL, uid INTEGER NOT NULL);
)sql";

// A prepared statement: prepared here and finalized at scope end, or a cached one that is
// only reset for its next use.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : owned_(true) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) s_ = nullptr;  // Step() says so
  }
  explicit Stmt(sqlite3_stmt* cached) : s_(cached), owned_(false) {}
  ~Stmt() {
    if (owned_) {
      sqlite3_finalize(s_);
    } else {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  sqlite3_stmt* get() { return s_; }
  Stmt& Text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Int(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  std::string ColText(int i) {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t ColInt(int i) { return sqlite3_column_int64(s_, i); }
  // SQLITE_ROW, SQLITE_DONE or an error code (SQLITE_MISUSE when the statement did not
  // prepare). A read loop stops at anything but SQLITE_ROW and must check it was DONE.
  int Step() { return s_ != nullptr ? sqlite3_step(s_) : SQLITE_MISUSE; }

 private:
  sqlite3_stmt* s_ = nullptr;
  bool owned_;
};

// An upsert, not INSERT OR REPLACE: a replace deletes the row and inserts it again under a
// new rowid, at the table's end, and so rewrites two table pages and the uuid index's page
// in every commit that changes a GPU; an update in place rewrites the one page the row is on.
constexpr char kPutGpu[] =
    "INSERT INTO gpus VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(uuid) DO UPDATE SET host = excluded.host,"
    " idx = excluded.idx, rack = excluded.rack, model = excluded.model, memory_mib = excluded.memory_mib,"
    " pci_bus_id = excluded.pci_bus_id, numa_node = excluded.numa_node, endpoint = excluded.endpoint,"
    " state = excluded.state, reason = excluded.reason, admin_drain = excluded.admin_drain,"
    " admin_fail = excluded.admin_fail";
constexpr char kPutLease[] = "INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
constexpr char kDeleteLease[] = "DELETE FROM leases WHERE number = ?";
constexpr char kPutEvent[] = "INSERT OR REPLACE INTO events VALUES (?,?,?,?,?,?,?,?)";
constexpr char kBegin[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kTrimEvents[] = "DELETE FROM events WHERE seq <= ?";
constexpr char kPutNextLease[] =
    "INSERT INTO meta VALUES ('next_lease', ?) ON CONFLICT(key) DO UPDATE SET value = MAX(value, excluded.value)";

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& state_dir, bool fsync) {
  if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Internal("cannot create state directory " + state_dir + ": " + std::strerror(errno));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore());
  std::string path = state_dir + "/gpupoold.db";
  if (sqlite3_open_v2(path.c_str(), &store->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return Status::Internal("cannot open " + path + ": " + sqlite3_errmsg(store->db_));
  }
  sqlite3_busy_timeout(store->db_, 5000);
  GPUPOOL_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  GPUPOOL_RETURN_IF_ERROR(store->Exec(fsync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  GPUPOOL_RETURN_IF_ERROR(store->Exec(kSchema));
  GPUPOOL_RETURN_IF_ERROR(store->Migrate());
  const std::pair<sqlite3_stmt**, const char*> statements[] = {
      {&store->put_gpu_, kPutGpu},     {&store->put_lease_, kPutLease},          {&store->delete_lease_, kDeleteLease},
      {&store->put_event_, kPutEvent}, {&store->put_next_lease_, kPutNextLease}, {&store->begin_, kBegin},
      {&store->commit_, kCommit},      {&store->trim_events_, kTrimEvents}};
  for (const auto& [stmt, sql] : statements) {
    if (sqlite3_prepare_v2(store->db_, sql, -1, stmt, nullptr) != SQLITE_OK) {
      return Status::Internal(std::string("sqlite: cannot prepare: ") + sqlite3_errmsg(store->db_));
    }
  }
  store->set_inline_writes(true);
  store->StartCommitter();
  return std::unique_ptr<Store>(std::move(store));
}

Store::~Store() { StopCommitter(); }

void Store::StartCommitter() {
  committer_ = std::thread(&Store::CommitterLoop, this);
  // Named by its starter, so that it has its name as soon as it exists (`top -H`).
  pthread_setname_np(committer_.native_handle(), "gpupoold-commit");
}

void Store::StopCommitter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

SqliteStore::~SqliteStore() {
  StopCommitter();
  for (sqlite3_stmt* s :
       {put_gpu_, put_lease_, delete_lease_, put_event_, put_next_lease_, begin_, commit_, trim_events_}) {
    sqlite3_finalize(s);
  }
  sqlite3_close(db_);
}

// Runs a cached statement that returns no rows.
Status SqliteStore::Step(sqlite3_stmt* cached) {
  int rc = sqlite3_step(cached);
  std::string error = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db_);
  sqlite3_reset(cached);
  if (rc != SQLITE_DONE) return Status::Internal("sqlite: " + error + " in: " + sqlite3_sql(cached));
  return Status::OK();
}

// Brings a state directory written by an older gpupoold up to the current schema
// (PRAGMA user_version). Version 1 added events.uid, version 2 leases.movable.
Status SqliteStore::Migrate() {
  int version = 0;
  {
    Stmt v(db_, "PRAGMA user_version");
    if (sqlite3_step(v.get()) == SQLITE_ROW) version = static_cast<int>(v.ColInt(0));
  }
  if (version >= 2) return Status::OK();
  auto has_column = [this](const char* table, const char* column) {
    Stmt cols(db_, (std::string("PRAGMA table_info(") + table + ")").c_str());
    bool found = false;
    while (sqlite3_step(cols.get()) == SQLITE_ROW) found = found || cols.ColText(1) == column;
    return found;
  };
  if (!has_column("events", "uid")) {
    GPUPOOL_RETURN_IF_ERROR(Exec("ALTER TABLE events ADD COLUMN uid INTEGER NOT NULL DEFAULT 0"));
  }
  if (!has_column("leases", "movable")) {
    GPUPOOL_RETURN_IF_ERROR(Exec("ALTER TABLE leases ADD COLUMN movable INTEGER NOT NULL DEFAULT 0"));
  }
  return Exec("PRAGMA user_version = 2");
}

Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg =
        std::string("sqlite: ") + (err != nullptr ? err : "error") + " in: " + std::string(sql).substr(0, 60);
    sqlite3_free(err);
    return Status::Internal(msg);
  }
  return Status::OK();
}

Result<LoadedState> SqliteStore::Load(size_t recent_events) {
  LoadedState st;
  // A read that stops early must not pass for an empty table: gpupoold would forget leases.
  auto finished = [this](int rc, const char* what) -> Status {
    if (rc == SQLITE_DONE) return Status::OK();
    return Status::Internal(std::string("cannot read ") + what + " from the state database: " + sqlite3_errmsg(db_));
  };
  int rc = SQLITE_DONE;
  {
    Stmt s(db_,
           "SELECT uuid, host, idx, rack, model, memory_mib, pci_bus_id, numa_node, endpoint,"
           " state, reason, admin_drain, admin_fail FROM gpus ORDER BY host, idx");
    while ((rc = s.Step()) == SQLITE_ROW) {
      GpuRow r;
      r.uuid = s.ColText(0);
      r.host = s.ColText(1);
      r.index = static_cast<int>(s.ColInt(2));
      r.rack = s.ColText(3);
      r.model = s.ColText(4);
      r.memory_mib = static_cast<uint64_t>(s.ColInt(5));
      r.pci_bus_id = s.ColText(6);
      r.numa_node = static_cast<int>(s.ColInt(7));
      r.endpoint = s.ColText(8);
      r.state = s.ColText(9);
      r.reason = s.ColText(10);
      r.admin_drain = s.ColInt(11) != 0;
      r.admin_fail = s.ColInt(12) != 0;
      st.gpus.push_back(std::move(r));
    }
    GPUPOOL_RETURN_IF_ERROR(finished(rc, "GPUs"));
  }
  {
    Stmt s(db_,
           "SELECT number, job_id, uid, user, request, place, min_memory_mib, gpus, generation,"
           " state, token, created, renewed, expires, ttl, movable FROM leases ORDER BY number");
    while ((rc = s.Step()) == SQLITE_ROW) {
      LeaseRow r;
      r.number = static_cast<uint64_t>(s.ColInt(0));
      r.job_id = s.ColInt(1);
      r.uid = static_cast<uint32_t>(s.ColInt(2));
      r.user = s.ColText(3);
      r.request_json = s.ColText(4);
      r.place = s.ColText(5);
      r.min_memory_mib = static_cast<uint64_t>(s.ColInt(6));
      r.gpus_json = s.ColText(7);
      r.generation = static_cast<uint64_t>(s.ColInt(8));
      r.state = s.ColText(9);
      r.token = s.ColText(10);
      r.created = s.ColInt(11);
      r.renewed = s.ColInt(12);
      r.expires = s.ColInt(13);
      r.ttl = s.ColInt(14);
      r.movable = s.ColInt(15) != 0;
      st.leases.push_back(std::move(r));
    }
    GPUPOOL_RETURN_IF_ERROR(finished(rc, "leases"));
  }
  {
    Stmt s(db_,
           "SELECT seq, time, type, gpu, job_id, lease, detail, uid FROM"
           " (SELECT * FROM events ORDER BY seq DESC LIMIT ?) ORDER BY seq");
    s.Int(1, static_cast<int64_t>(recent_events));
    while ((rc = s.Step()) == SQLITE_ROW) {
      EventRow r;
      r.seq = static_cast<uint64_t>(s.ColInt(0));
      r.time = s.ColInt(1);
      r.type = s.ColText(2);
      r.gpu = s.ColText(3);
      r.job_id = s.ColInt(4);
      r.lease = s.ColText(5);
      r.detail = s.ColText(6);
      r.uid = static_cast<uint32_t>(s.ColInt(7));
      st.recent_events.push_back(std::move(r));
    }
    GPUPOOL_RETURN_IF_ERROR(finished(rc, "events"));
  }
  {
    // Never reuse a lease number or event sequence, even of deleted rows.
    Stmt s(db_, "SELECT key, value FROM meta");
    while ((rc = s.Step()) == SQLITE_ROW) {
      std::string key = s.ColText(0);
      if (key == "next_lease") st.next_lease = static_cast<uint64_t>(s.ColInt(1));
    }
    GPUPOOL_RETURN_IF_ERROR(finished(rc, "the lease counter"));
    for (const LeaseRow& l : st.leases) st.next_lease = std::max(st.next_lease, l.number + 1);
    Stmt e(db_, "SELECT COALESCE(MAX(seq), 0) FROM events");
    if (e.Step() != SQLITE_ROW) return finished(SQLITE_ERROR, "the event counter");
    st.next_event = static_cast<uint64_t>(e.ColInt(0)) + 1;
  }
  return st;
}

namespace {
// The store whose committer the calling thread's InlineWrite keeps from waking.
thread_local Store* deferring_wake = nullptr;
}  // namespace

void Store::WakeCommitter() {
  if (deferring_wake != this) work_cv_.notify_one();
}

uint64_t Store::Enqueue(Op op) {
  uint64_t ticket;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
    ticket = ++enqueued_;
    // Under a Hold the op is part of an operation still queueing: the Hold's end makes it
    // takeable and wakes the committer, once per operation rather than once per row.
    wake = held_ == 0;
    if (wake) complete_ = ticket;
  }
  if (wake) WakeCommitter();
  return ticket;
}

Store::Hold::Hold(Store* store) : store_(store) {
  std::lock_guard<std::mutex> lock(store_->mu_);
  ++store_->held_;
}

Store::Hold::~Hold() {
  {
    std::lock_guard<std::mutex> lock(store_->mu_);
    if (--store_->held_ > 0 || store_->complete_ == store_->enqueued_) return;
    store_->complete_ = store_->enqueued_;
  }
  store_->WakeCommitter();
}

Store::InlineWrite::InlineWrite(Store* store, bool wanted)
    : store_(store), outer_(deferring_wake), active_(wanted && store->inline_writes_) {
  if (active_) deferring_wake = store_;
}

Store::InlineWrite::~InlineWrite() {
  if (!active_) return;
  deferring_wake = outer_;
  // What this thread completed and did not write: the committer's now (a writer at work
  // wakes it when it ends).
  bool left;
  {
    std::lock_guard<std::mutex> lock(store_->mu_);
    left = !store_->writing_ && store_->complete_ > store_->enqueued_ - store_->queue_.size();
  }
  if (left) store_->WakeCommitter();
}

bool Store::InlineWrite::Write(uint64_t ticket) {
  if (!active_) return false;
  std::vector<Op> batch;
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(store_->mu_);
    if (store_->durable_ >= ticket || !store_->failure_.ok()) return true;
    const uint64_t taken = store_->enqueued_ - store_->queue_.size();
    if (store_->writing_ || store_->stopping_ || store_->complete_ < ticket || store_->complete_ <= taken) {
      return false;
    }
    batch = store_->TakeBatch(&last);
    ++store_->inline_commits_;
  }
  store_->WriteTaken(batch, last, /*wake_committer=*/true);
  return true;
}

uint64_t Store::inline_commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inline_commits_;
}

Status Store::WaitDurable(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  durable_cv_.wait(lock, [&] { return durable_ >= ticket || !failure_.ok(); });
  return failure_;
}

void Store::SetDurableListener(DurableListener listener) {
  std::lock_guard<std::mutex> calls(listener_mu_);
  listener_ = std::move(listener);
  if (!listener_) return;
  uint64_t durable;
  Status health;
  {
    std::lock_guard<std::mutex> lock(mu_);
    durable = durable_;
    health = failure_;
  }
  listener_(durable, health);
}

uint64_t Store::last_ticket() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

uint64_t Store::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

void Store::CommitterLoop() {
  for (;;) {
    std::vector<Op> batch;
    uint64_t last;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Only whole operations: the ops an operation still holding a Hold has queued wait
      // for its end (which wakes us), while everything before them is written now, with no
      // wait for a gap between operations (under load there need not be one). One writer
      // at a time: an InlineWrite's batch ends before the next is taken (which wakes us).
      // The queue holds the tickets after enqueued_ - queue_.size().
      auto taken = [&] { return enqueued_ - queue_.size(); };
      work_cv_.wait(lock, [&] { return !writing_ && (stopping_ || complete_ > taken()); });
      if (queue_.empty() && stopping_) return;
      batch = TakeBatch(&last);
    }
    WriteTaken(batch, last, /*wake_committer=*/false);
  }
}

std::vector<Store::Op> Store::TakeBatch(uint64_t* last) {
  const uint64_t taken = enqueued_ - queue_.size();
  // At a stop every op is taken: no operation runs once the store is being destroyed.
  const uint64_t upto = stopping_ ? enqueued_ : complete_;
  const size_t count = static_cast<size_t>(upto - taken);
  std::vector<Op> batch(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + count));
  queue_.erase(queue_.begin(), queue_.begin() + count);
  *last = upto;
  writing_ = true;
  return batch;
}

void Store::WriteTaken(const std::vector<Op>& batch, uint64_t last, bool wake_committer) {
  const auto began = std::chrono::steady_clock::now();
  Status s = WriteBatch(batch);
  if (s.ok()) commit_duration_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  since_trim_ += batch.size();
  if (s.ok() && since_trim_ > 10000) {
    since_trim_ = 0;
    // Trimming is housekeeping: a failure leaves more history on disk, nothing wrong.
    Status trimmed = TrimEvents(event_retention_);
    if (!trimmed.ok()) log::Warning("cannot trim old events: " + trimmed.message());
  }
  uint64_t durable;
  Status health;
  bool more;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) {
      durable_ = last;
      ++commits_;
    } else {
      log::Error("cannot write state: " + s.message());
      failure_ = s;
    }
    durable = durable_;
    health = failure_;
    writing_ = false;
    more = wake_committer && (stopping_ || complete_ > enqueued_ - queue_.size());
  }
  // The committer slept while an InlineWrite wrote this batch: what completed meanwhile is
  // its to write (after its own batch it simply looks again).
  if (more) work_cv_.notify_one();
  durable_cv_.notify_all();
  std::lock_guard<std::mutex> calls(listener_mu_);
  if (listener_) listener_(durable, health);
}

// Ends a failed batch. The batch's error is the one to report; a failed ROLLBACK (the
// connection is unusable) is logged beside it.
Status SqliteStore::RollBack(const std::string& why) {
  Status rolled = Exec("ROLLBACK");
  if (!rolled.ok()) log::Error("cannot roll back a failed write: " + rolled.message());
  return Status::Internal(why);
}

Status Store::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Status SqliteStore::WriteBatch(const std::vector<Op>& ops) {
  GPUPOOL_RETURN_IF_ERROR(Step(begin_));
  uint64_t max_lease = 0, max_event = 0;
  for (const Op& op : ops) {
    int rc = SQLITE_DONE;
    if (const GpuRow* g = std::get_if<GpuRow>(&op)) {
      Stmt s(put_gpu_);
      s.Text(1, g->uuid)
          .Text(2, g->host)
          .Int(3, g->index)
          .Text(4, g->rack)
          .Text(5, g->model)
          .Int(6, static_cast<int64_t>(g->memory_mib))
          .Text(7, g->pci_bus_id)
          .Int(8, g->numa_node)
          .Text(9, g->endpoint)
          .Text(10, g->state)
          .Text(11, g->reason)
          .Int(12, g->admin_drain)
          .Int(13, g->admin_fail);
      rc = sqlite3_step(s.get());
    } else if (const LeaseRow* l = std::get_if<LeaseRow>(&op)) {
      Stmt s(put_lease_);
      s.Int(1, static_cast<int64_t>(l->number))
          .Int(2, l->job_id)
          .Int(3, l->uid)
          .Text(4, l->user)
          .Text(5, l->request_json)
          .Text(6, l->place)
          .Int(7, static_cast<int64_t>(l->min_memory_mib))
          .Text(8, l->gpus_json)
          .Int(9, static_cast<int64_t>(l->generation))
          .Text(10, l->state)
          .Text(11, l->token)
          .Int(12, l->created)
          .Int(13, l->renewed)
          .Int(14, l->expires)
          .Int(15, l->ttl)
          .Int(16, l->movable ? 1 : 0);
      rc = sqlite3_step(s.get());
      max_lease = std::max(max_lease, l->number);
    } else if (const LeaseDelete* d = std::get_if<LeaseDelete>(&op)) {
      Stmt s(delete_lease_);
      s.Int(1, static_cast<int64_t>(d->number));
      rc = sqlite3_step(s.get());
      max_lease = std::max(max_lease, d->number);
    } else if (const EventRow* e = std::get_if<EventRow>(&op)) {
      Stmt s(put_event_);
      s.Int(1, static_cast<int64_t>(e->seq))
          .Int(2, e->time)
          .Text(3, e->type)
          .Text(4, e->gpu)
          .Int(5, e->job_id)
          .Text(6, e->lease)
          .Text(7, e->detail)
          .Int(8, e->uid);
      rc = sqlite3_step(s.get());
      max_event = std::max(max_event, e->seq);
    }
    if (rc != SQLITE_DONE) {
      std::string msg = std::string("sqlite write failed: ") + sqlite3_errmsg(db_);
      return RollBack(msg);
    }
  }
  if (max_lease > 0) {
    Stmt s(put_next_lease_);
    s.Int(1, static_cast<int64_t>(max_lease + 1));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      std::string msg = std::string("sqlite write failed: ") + sqlite3_errmsg(db_);
      return RollBack(msg);
    }
  }
  // The events that fell out of retention with this batch's: a few rows each time, never
  // a pause of thousands.
  if (max_event > event_retention()) {
    Stmt s(trim_events_);
    s.Int(1, static_cast<int64_t>(max_event - event_retention()));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      std::string msg = std::string("sqlite: cannot delete old events: ") + sqlite3_errmsg(db_);
      return RollBack(msg);
    }
  }
  Status committed = Step(commit_);
  if (!committed.ok()) return RollBack(committed.message());
  return Status::OK();
}

}  // namespace gpupool::poold
