// Failover: keeps one leased GPU's CUDA state recoverable, so that a process
// goes on when that GPU fails (gpupool-remote(7), FAILOVER).
//
// Every request to the GPU passes through here, in the order it goes on the
// wire:
//  - live resources (allocations, modules, functions, streams, events) are kept
//  as the
//    requests that created them, so that they can be created again on another
//    GPU with the same handles and device addresses (the client chooses both:
//    protocol.h);
//  - a recovery point: a checkpoint of the device memory the process owns,
//  taken where
//    the device is idle, at most every `checkpoint_interval`, and incremental
//    (only the ranges that copies, memsets or kernels since the last one could
//    have written: a kernel's pointer arguments, or every range with
//    scope=all; what copies from the host, memsets and copies between known
//    ranges wrote is taken from the log on the host, only what kernels wrote
//    is read back from the GPU), plus a log of every state-changing request
//    since (launches with their argument bytes, copies with the host bytes
//    captured when they were sent, or, for an asynchronous copy from page-locked
//    memory this library allocated, by the process's next two-way request, before
//    CUDA lets the program change them, or, for one of kSnapshotUpload or more from that
//    memory, as a copy-on-write snapshot of its source, copied when anything writes it
//    (pinned_snapshots.h); memsets, frees, events);
//  - on a failure (agent gone, GPU failed, session revoked because the lease
//  moved), a
//    new session on the GPU the lease names now (the lease file, rewritten by
//    spank_gpupool at a swap; waited for up to `recovery_deadline`), the live
//    resources of the checkpoint created again, its memory restored, the log
//    replayed, and the request that failed sent again: the application sees no
//    error.
// Nothing is replayed on the GPU where it already ran: the replay goes to a new
// session. A replayed kernel gives the same bits unless its result depends on
// the order of atomic operations or on timing. Device printf text already shown
// is not shown twice.
//
// Not protected (logged once, never silently): memory over `checkpoint_mem`, an
// allocation the agent could not place at the client's address (a cuda executor
// whose driver granted another window), a module whose variables or device-malloc
// heap the driver places itself (the cuda executor: Runtime::EnsureModuleLoaded),
// failover=off.
//
// Recovering together: a process's GPUs often share an agent (one host serving several of
// them), and a program drives them in turn (cudaSetDevice(0), work, cudaSetDevice(1), ...).
// Each Failover recovers only when a request to its own GPU fails, so without more the
// program would pay one recovery after the other (the detection, the wait for the lease
// file, the restore and the replay of each). So when a Failover starts a recovery because
// its agent is gone (a lost connection; not a failed GPU, a revoked session or a planned
// move, which leave the agent serving the others), it calls the hook the runtime set
// (SetAgentLostHook), and the runtime calls RecoverInBackground on every other GPU of the
// process. That returns at once (it takes no mu(): the caller holds its own, and the other
// GPU's program thread may be recovering and calling back) and starts a thread of that
// Failover's own (one at a time), which:
//  - takes mu(): the program's next call to that GPU waits in Deliver for the recovery in
//    progress, and no second one starts;
//  - goes on only when the channel's connection is known broken (ClientConnection::PeerGone:
//    a request already failed on it, or the server closed its socket; nothing is sent). On a
//    connection to the lost agent's endpoint it looks again for up to kPeerGoneGrace, mu()
//    released in between (a killed server's sockets close together, not at one instant).
//    A GPU whose agent is healthy is not touched, nor one that a call of its own recovered
//    first (its connection is then new and open). A silent agent (its host stopped, or cut
//    off without a reset) closes nothing, so PeerGone never says it is gone: when the
//    recovery that calls the hook began on gpupoold's word (a call waited on the agent and
//    gpupoold, having probed it, named a replacement: AskAboutSilentAgent), the hook says
//    so (`confirmed`), and a GPU on the same endpoint asks gpupoold about its own slot at
//    once instead (SilentAgentReplaced; gpupoold holds the host unreachable by then, so it
//    answers without a second probe) and goes on when that names another GPU, which is
//    where it recovers. The word is gpupoold's, never this process's: a client cannot fail
//    a GPU;
//  - marks the old connection abandoned (ClientConnection::Abandon: nothing more is sent
//    on it), so that neither a send nor its close at the handover waits on a silent agent,
//    and a failed recovery's next request gets its error at once;
//  - runs the Recover a failed request would, into a connection of its own: the channel is
//    written only by the program's thread, in Deliver (the runtime reads it unlocked). The
//    result waits in recovered_ until the next Deliver puts it in the channel (and sets
//    *moved, as for a recovery of its own). A recovery that fails logs what a failed one
//    does, and the next request that fails on the old connection returns its error without
//    recovering again (abandoned_), as the call that had run the recovery would have; a
//    later one tries again, as after any failed recovery.
// Deliver's cost on every request: one null test of recovered_ under the mu() it already
// holds (and, only when a request failed, a pointer compare with abandoned_).
// StopBackground (the runtime's Shutdown at process exit; the destructor) makes a
// background recovery give up its wait for a replacement at once and joins its thread (a
// restore under way runs to its end). A call to the GPU meanwhile (a cuCtxDestroy's frees)
// waits for the recovery as any call to a recovering GPU does, then goes to the new GPU.
// Nothing changes with one GPU, with failover off or migrate, or with
// GPUPOOL_RECOVER_TOGETHER=off (each GPU recovers at its own next failed request).
//
// Thread safety: Deliver and CaptureHeldUploads may be called from any thread (they
// hold mu()); RecoverInBackground and StopBackground too (they take no mu() of the
// caller's); the other methods with mu() held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "remote/client/failover/journal_bytes.h"
#include "remote/client/failover/pinned_snapshots.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/rpc_client.h"

namespace gpupool::client {

struct FailoverConfig {
  // kMigrate: follows planned moves only (its memory handed over agent to agent); keeps no
  // memory image, so a failure gives the CUDA error as kOff does.
  enum class Mode { kOff, kMigrate, kReplay };
  Mode mode = Mode::kReplay;
  std::chrono::milliseconds checkpoint_interval{1000};
  uint64_t checkpoint_mem = uint64_t{4} << 30;
  std::chrono::milliseconds recovery_deadline{300'000};
  bool scope_all = false;  // a launch may write every range (programs that chase pointers)
  // A recovery from a lost agent starts those of the process's other GPUs whose
  // connections are broken too (failover.h's header comment).
  bool recover_together = true;
  // Large uploads from page-locked memory are kept as copy-on-write snapshots where the
  // process may catch writes (pinned_snapshots.h); off: copied at the call.
  bool copy_on_write = true;
  // Connections a recovery restores a large checkpoint over at once (protocol.h,
  // kOpRestoreOffer), as many as the agent takes; 1: its session alone.
  uint32_t restore_streams = 2;
  // A checkpoint this large, at least, is restored over several streams (tests lower it).
  uint64_t restore_streams_from = uint64_t{256} << 20;

  // From GPUPOOL_FAILOVER, GPUPOOL_CHECKPOINT_INTERVAL (seconds),
  // GPUPOOL_CHECKPOINT_MEM (bytes, K/M/G suffixes), GPUPOOL_RECOVERY_DEADLINE
  // (seconds), GPUPOOL_CHECKPOINT_SCOPE (arguments|all), GPUPOOL_RECOVER_TOGETHER
  // (on|off), GPUPOOL_COPY_ON_WRITE (on|off), GPUPOOL_RESTORE_STREAMS (1-8). A bad value is named
  // in *errors and its default kept.
  static FailoverConfig FromEnvironment(std::vector<std::string>* errors);
};

// Parses "64M"-style sizes (K, M, G, T; powers of 1024); false when malformed.
bool ParseByteSize(const std::string& text, uint64_t* bytes);

// Where a GPU of the lease is now: its uuid and agent endpoint.
struct GpuLocation {
  std::string uuid;
  std::string endpoint;
};

// Reads entry `slot` of the lease file's "gpus" array; false when the file
// cannot be read or has no such entry (being rewritten: try again).
bool ReadLeaseFileSlot(const std::string& path, int slot, GpuLocation* location);

class Failover {
 public:
  // Opens a session (connection + hello) with the GPU at `location`; on success
  // fills the description. `why` says what went wrong otherwise.
  using OpenSession = std::function<std::unique_ptr<transport::ClientConnection>(
      const GpuLocation& location, dataplane::DeviceDescription* description, std::string* why, int32_t* refusal)>;

  // Opens a restore stream to the GPU at `location` (protocol.h: the lane key
  // "<uuid>#restore", no hello); `why` says what went wrong otherwise.
  using OpenRestoreStream =
      std::function<std::unique_ptr<transport::ClientConnection>(const GpuLocation& location, std::string* why)>;
  // Without one (the default) a recovery restores over its session alone. Call before the
  // first Deliver.
  void SetRestoreStreamOpener(OpenRestoreStream open) { open_restore_stream_ = std::move(open); }

  struct Recovery {
    GpuLocation from, to;
    uint32_t streams = 1;  // connections the memory was restored over
    std::chrono::milliseconds pause{0};
    uint64_t restored_bytes = 0;
    // From the first restore sent to the last one's bytes sent (over restore streams: to the
    // last stream's reply).
    std::chrono::milliseconds restore{0};
    uint64_t copied_bytes = 0;  // handed over agent to agent (a planned move)
    size_t replayed = 0;
  };

  Failover(FailoverConfig config, int device, int slot, std::string lease_file, OpenSession open_session);
  ~Failover();  // StopBackground

  // Tells gpupoold that the agent of `lost` is gone from this process's view, and fills
  // *named with the GPU gpupoold's answer puts in this slot of the lease (the same GPU
  // while gpupoold's own probe found its agent alive); false with *why when gpupoold did
  // not answer. See failover_report.h.
  using ReportLost = std::function<bool(const GpuLocation& lost, int slot, GpuLocation* named, std::string* why)>;
  // Without one (no gpupoold: the default) a recovery waits for the lease file alone.
  // Call before the first Deliver.
  void SetLostReporter(ReportLost report) { report_lost_ = std::move(report); }

  // The GPU as the process reaches it now; Deliver replaces all three on a
  // recovery.
  struct Channel {
    std::unique_ptr<transport::ClientConnection> connection;
    GpuLocation location;
    dataplane::DeviceDescription description{};
  };

  // Called (with mu() held) when this GPU starts a recovery because its agent is gone:
  // `lost` is where it was; `confirmed`: gpupoold probed that agent and named a replacement
  // (a silent agent: AskAboutSilentAgent), not only this process's view. The runtime's hook
  // calls RecoverInBackground on the process's other GPUs. Set before the first Deliver.
  using AgentLostHook = std::function<void(const GpuLocation& lost, bool confirmed)>;
  void SetAgentLostHook(AgentLostHook hook) { agent_lost_ = std::move(hook); }
  // Another GPU of the process found its agent `lost`: recovers `channel` (this GPU's, as
  // Deliver is given it) on a thread of its own when its connection is broken too, or, with
  // `confirmed`, when it goes to the same agent and gpupoold names another GPU for this
  // slot; unless one runs already. Returns at once; takes no mu(). See the header comment.
  void RecoverInBackground(Channel* channel, const GpuLocation& lost, bool confirmed = false);
  // Makes a background recovery stop waiting for a replacement, joins its thread and
  // starts no other; closes a session it recovered that no call took up.
  void StopBackground();
  // For tests: the background recoveries this GPU ran (mu() held).
  size_t background_recoveries() const { return background_started_; }
  static constexpr std::chrono::milliseconds kPeerGoneGrace{500};
  enum class Delivery { kCall, kPost, kStart };  // as ClientConnection's methods

  // Sends one request on `channel` in wire order with the journal: when the GPU
  // is lost, recovers (a replacement, the state rebuilt) and sends the request
  // again (a Post or Start is already in the log the recovery replays). Returns
  // the request's CUresult (for Call, the reply's; a lost transport:
  // kCuDeviceUnavailable with *transport_error set). *moved: the channel now
  // reaches another GPU.
  int32_t Deliver(Channel* channel, Delivery how, const transport::Request& request, transport::Reply* reply,
                  Status* transport_error, bool* moved);

  std::mutex& mu() { return mu_; }

  // Whether this GPU's state is kept (failover on, and nothing has made it
  // unprotectable).
  bool protecting() const { return protecting_; }
  // Stops protecting, with the reason logged once (e.g. an executor that cannot
  // place memory).
  void Unprotect(const std::string& why);

  // A launch that names an address in range `via` may write range `target` too: a surface
  // object's descriptor and its array (api/api_array.cc). Takes mu().
  void AddWriteThrough(uint64_t via, uint64_t target);

  // Copies into the log the bytes of uploads it holds only by reference (an asynchronous
  // copy from page-locked memory: Request::payload_held_until_sync), for a caller about to
  // let the program change or free that memory (cuMemFreeHost). Takes mu().
  void CaptureHeldUploads();
  // Uploads whose bytes the log holds only by reference now (for tests).
  size_t held_uploads() const { return held_.size(); }

  // Bookkeeping around the wire (mu() held). Sent: before a one-way request
  // (Post) or a started one (Start) goes out. Answered: after a Call's
  // successful reply.
  void Sent(const transport::Request& request, bool started);
  void Answered(const transport::Request& request, const transport::Reply& reply);

  // Whether `status` (a request's result) means the GPU is lost to this
  // process.
  bool Recoverable(int32_t status) const;

  // Replaces `*connection` with a session on the GPU the lease names now and
  // rebuilds the state there (mu() held). `location` and `description` are
  // updated. False when it could not (deadline passed, replay failed): the
  // caller returns its original error.
  bool Recover(std::unique_ptr<transport::ClientConnection>* connection, GpuLocation* location,
               dataplane::DeviceDescription* description, int32_t why);

  // After a synchronising Call succeeded (the device idle as far as the
  // application knows): takes a checkpoint when the interval has passed, or the
  // log holds kLongLog entries and the checkpoint would read back at most
  // kCheapReadback bytes. Also after any request when the log has grown large.
  void MaybeCheckpoint(transport::ClientConnection* connection, bool synchronised);
  static constexpr size_t kLongLog = 4096;
  static constexpr uint64_t kCheapReadback = uint64_t{1} << 20;

  // For tests and the benchmark.
  size_t log_entries() const { return log_.size(); }
  uint64_t checkpoint_bytes() const { return checkpoint_bytes_; }
  // Ranges whose checkpointed contents are a snapshot of the program's memory (no copy).
  size_t snapshot_images() const { return image_snapshots_.size(); }
  // Snapshots the journal copied from the program's pages itself (a checkpoint's partial
  // write or device copy of them; not those a write or a free had copied first).
  uint64_t snapshots_copied() const { return snapshots_copied_; }
  // Bytes checkpoints read back from the GPU (the rest they took from the log).
  uint64_t readback_bytes() const { return readback_bytes_; }
  // Bytes of log writes checkpoints did not apply: a later write overwrote them whole.
  uint64_t overwritten_bytes() const { return overwritten_bytes_; }
  // Bytes of uploads dropped from the log: a later upload overwrote them unread.
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  size_t checkpoints() const { return checkpoints_; }
  const std::vector<Recovery>& recoveries() const { return recoveries_; }

 private:
  // A request's arguments as the log keeps them: most are a few dozen bytes (a
  // launch's are 48), kept inline, so that logging a launch allocates only for its
  // parameters.
  class ArgBytes {
   public:
    ArgBytes() = default;
    ArgBytes(const ArgBytes& other) { assign(other.data(), other.size()); }
    ArgBytes& operator=(const ArgBytes& other) {
      if (this != &other) assign(other.data(), other.size());
      return *this;
    }
    ArgBytes(ArgBytes&&) noexcept = default;
    ArgBytes& operator=(ArgBytes&&) noexcept = default;
    void assign(const char* bytes, size_t size);
    const char* data() const { return heap_ ? heap_.get() : inline_; }
    size_t size() const { return size_; }

   private:
    static constexpr size_t kInline = 64;
    char inline_[kInline] = {};
    size_t size_ = 0;
    std::unique_ptr<char[]> heap_;  // arguments over kInline bytes
  };
  struct Entry {
    uint32_t op = 0;
    ArgBytes args;
    JournalBytes payload;  // a vector: its buffer can become a range's image
    // An upload whose bytes are still only in the program's page-locked memory, where CUDA
    // keeps them unchanged until the program's next synchronisation (payload empty until
    // CaptureHeld copies them; held_ lists it).
    const char* held = nullptr;
    // A large upload from page-locked memory this library allocated, kept as a copy-on-write
    // snapshot of its source (pinned_snapshots.h) until a checkpoint or a recovery needs its
    // bytes (ApplyLog, and Send from the pages); payload empty until then. A checkpoint keeps a
    // whole range's last one as the range's image (image_snapshots_).
    HostSnapshot snapshot;
    // The bytes it uploads: its payload's, or its snapshot's not copied yet.
    size_t uploaded_bytes() const { return payload.empty() && snapshot ? snapshot.size() : payload.size(); }
    bool call = false;  // sent with Call (its reply is checked on replay)
    // The transport seq it was sent with on the current GPU's connection; 0: known to have
    // run there (answered, or replayed before a later request was answered).
    uint64_t seq = 0;
  };
  struct StartedRequest {
    Entry entry;
    void* result = nullptr;
    size_t capacity = 0;
  };
  // A live resource: the request that created it, in creation order (`seq`).
  struct Resource {
    uint64_t seq = 0;
    Entry creation;
    uint64_t owner = 0;  // a function's module
  };
  enum Kind : int { kAllocation, kModule, kFunction, kStream, kEvent };
  using Key = std::pair<int, uint64_t>;

  // For a one-way request whose payload is copied while it is in flight
  // (Deliver, PostOverlapped): its entry with room for the payload; LogSent logs
  // it once the copy is made (Sent's last step).
  Entry StartOverlappedEntry(const transport::Request& request);
  void LogSent(Entry entry);
  // Puts `entry` at the end of the log (dropping an upload it overwrites).
  void Append(Entry entry);
  // Whether `entry` uploads a whole range whose previous whole upload (at log
  // index *index) nothing may have read since: see Append.
  bool OverwritesLastUpload(const Entry& entry, size_t* index) const;
  void Track(const Entry& entry, const transport::Reply* reply);
  // The live range holding `address` (its start in *start), if one does.
  bool RangeHolding(uint64_t address, uint64_t* start) const;
  void MarkWritten(uint64_t address);
  void MarkLaunchWrites(const Entry& launch);
  // The ranges a launch may write (its pointer arguments, its module's variables).
  void MayWrite(const Entry& launch, std::map<uint64_t, bool>* ranges) const;
  bool Checkpoint(transport::ClientConnection* connection);
  // At most the bytes a checkpoint now reads back from the GPU (the ranges written since
  // the last one; ApplyLog may take some of them from the log instead).
  uint64_t WrittenBytesBound() const;

  // The checkpoint's last step: its resources are today's, and the log starts empty.
  void StartLogAfresh();
  // The log applied to the previous checkpoint's images on the host where it
  // tells the contents (see Checkpoint): `apply` false only classifies
  // (*unknown: ranges a GPU read must give; *made: ranges the log gives), true
  // writes the bytes into saved_.
  void ApplyLog(bool apply, std::set<uint64_t>* unknown, std::set<uint64_t>* made);
  // `snapshot`'s bytes in a spare buffer where one fits; the snapshot ends (MoveInto), and
  // a copy made from the program's pages counts in snapshots_copied_.
  JournalBytes SnapshotBytes(HostSnapshot* snapshot);
  // The image of the range at `start` in saved_, a snapshot image's bytes copied there first.
  JournalBytes& ImageBytes(uint64_t start);
  void RecyclePayloads();
  // Copies the bytes of the log's held uploads into their entries (mu() held). Done before
  // every two-way request (any of which may tell the program its copies are done: a
  // synchronisation, a query, an event), a checkpoint and a recovery.
  void CaptureHeld();
  // Logs an upload whose bytes `snapshot` keeps (Deliver).
  void LogSnapshot(const transport::Request& request, HostSnapshot snapshot);
  JournalBytes TakePayloadBuffer(size_t size);
  // Moves `entry`'s payload buffer (its bytes no longer needed) to the spare buffers.
  void SparePayload(Entry* entry);
  // Log entries whose writes a later entry overwrites whole before anything reads
  // them on the host (ApplyLog skips them).
  std::vector<bool> OverwrittenEntries() const;
  bool Rebuild(transport::ClientConnection* connection, Recovery* recovery, std::string* why);
  // Rebuild's restore of the checkpoint's memory: over restore streams when the checkpoint
  // is large (FailoverConfig::restore_streams_from) and the agent offers them (kNotUsed: restore over the
  // session instead; kFailed: the session broke, *why), or over the session.
  enum class StreamRestore { kDone, kNotUsed, kFailed };
  StreamRestore RestoreInStreams(transport::ClientConnection* connection, Recovery* recovery, std::string* why);
  bool RestoreOverSession(transport::ClientConnection* connection, Recovery* recovery, std::string* why);
  // The resources of the checkpoint, created again in creation order (a module before its
  // functions).
  bool CreateCheckpointResources(transport::ClientConnection* connection, std::string* why);
  // A planned move (the old GPU healthy, the lease moved): the old agent keeps the memory
  // for a handoff (protocol.h). OfferHandoff asks it for a ticket; RebuildMoved creates the
  // state again on the new GPU with the memory copied agent to agent, and replays only the
  // requests the old GPU did not run.
  struct Handoff {
    std::string ticket;
    uint64_t last_seq = 0;
  };
  bool OfferHandoff(transport::ClientConnection* old, Handoff* handoff);
  bool RebuildMoved(transport::ClientConnection* connection, const Handoff& handoff, const GpuLocation& from,
                    Recovery* recovery, std::string* why);
  // Sends a log entry again (a replay); an upload kept as a snapshot is sent from the
  // program's pages (SendSnapshot), copied into the entry only where a write copied it.
  bool Send(transport::ClientConnection* connection, Entry& entry, std::string* why, bool show_output);
  // Posts an upload (request args `args`) of `snapshot`'s bytes straight from the program's
  // pages while the snapshot is not copied; where a write had it copied (before or during
  // the send), from the copy, put in *copy (sent again: the same bytes to the same place).
  bool SendSnapshot(transport::ClientConnection* connection, const ArgBytes& args, HostSnapshot* snapshot,
                    JournalBytes* copy, std::string* why);
  bool Locate(const GpuLocation& failed, int32_t why, GpuLocation* next);
  // The abandon check of a call waiting on the agent (WatchLease): once a wait has gone
  // SilentThreshold() without an answer, asks gpupoold (report_lost_) whether the agent is
  // there, then after 1, 2, 4 ... 30 s. gpupoold probes the agent: one that answers (a long
  // kernel) changes nothing; a silent one (its host stopped or cut off, its connections
  // still open) is swapped, and the GPU gpupoold names instead ends the wait (non-empty
  // return) and is where the recovery goes (silent_named_).
  std::string AskAboutSilentAgent(const GpuLocation& waiting_on);
  // How long a call may wait before its agent is suspected: twice the longest call this
  // process saw answered in the last minute, at least kSilentBeforeReport, at most
  // kSilentAtMost. A program whose synchronisations take seconds (long kernels) asks later
  // instead of costing gpupoold a probe at every one of them (a lease's reports are
  // capped at 10 a minute); one of short calls asks after kSilentBeforeReport.
  std::chrono::milliseconds SilentThreshold() const;
  void NoteAnsweredCall(std::chrono::steady_clock::duration waited);
  static constexpr std::chrono::milliseconds kSilentBeforeReport{400};
  static constexpr std::chrono::milliseconds kSilentAtMost{10000};
  // Within Recover: asks gpupoold where the slot is now (report_lost_), at once and then
  // after 1, 2, 4, 8, 8... s; a GPU it names in place of `failed` is server_named_ (then
  // true).
  bool MaybeReportLost(const GpuLocation& failed);
  void WatchLease(Channel* channel);
  // The background recovery's thread (RecoverInBackground).
  void RunBackgroundRecovery(Channel* channel, GpuLocation lost, bool confirmed);
  // Whether `channel`'s connection is known broken; on one to `lost`'s endpoint, waits up
  // to kPeerGoneGrace for it (mu() held in *wire at each look, released between), or, with
  // `confirmed`, asks gpupoold about this slot at once (SilentAgentReplaced).
  bool ConnectionGone(Channel* channel, const GpuLocation& lost, bool confirmed, std::unique_lock<std::mutex>* wire);
  // Asks gpupoold (report_lost_) about this slot's GPU `at`, whose agent gpupoold found
  // silent for another GPU: true when it names another GPU (silent_named_, where the
  // recovery goes); false when it names `at` (its agent answers) or does not answer.
  bool SilentAgentReplaced(const GpuLocation& at);
  // Takes mu() into *wire unless StopBackground is called first (then false).
  bool LockUnlessStopped(std::unique_lock<std::mutex>* wire);

  const FailoverConfig config_;
  const int device_;
  const int slot_;
  const std::string lease_file_;
  const OpenSession open_session_;
  ReportLost report_lost_;
  OpenRestoreStream open_restore_stream_;
  // Within one Recover: the GPU gpupoold's answer to a report named for the slot (empty:
  // none yet), used while the lease file still names the failed GPU; when and how often it
  // was asked.
  GpuLocation server_named_;
  std::chrono::steady_clock::time_point next_report_{};
  std::chrono::milliseconds report_backoff_{0};
  // AskAboutSilentAgent's state: the wait it watches (by the request's seq), when it will
  // next ask, and what gpupoold named while a call waited (empty: nothing).
  uint64_t silent_wait_seq_ = 0;
  std::chrono::steady_clock::time_point silent_next_report_{};
  std::chrono::milliseconds silent_backoff_{0};
  GpuLocation silent_named_;
  // The longest call answered since longest_call_since_ (SilentThreshold); a minute old, it
  // gives way to the next answered call.
  std::chrono::steady_clock::duration longest_call_{};
  std::chrono::steady_clock::time_point longest_call_since_{};
  std::mutex mu_;
  bool protecting_ = true;
  bool unprotected_logged_ = false;

  uint64_t next_seq_ = 1;
  std::map<Key, Resource> live_;                 // resources now
  std::map<Key, Resource> base_;                 // resources at the last checkpoint
  std::map<uint64_t, uint64_t> ranges_;          // live device ranges: start -> size
  std::map<uint64_t, uint64_t> module_globals_;  // module id -> its variables' range start
  std::map<uint64_t, JournalBytes> saved_;       // checkpointed contents, by range start
  // Checkpointed contents still only in the program's page-locked memory: a range whose
  // last write before the checkpoint was a whole upload kept as a snapshot. Its image is
  // the snapshot, not copied unless written, freed, or needed (ImageBytes); a range's
  // image is in saved_ or here, never both.
  std::map<uint64_t, HostSnapshot> image_snapshots_;
  std::map<uint64_t, bool> written_;                 // ranges written since the last checkpoint
  std::multimap<uint64_t, uint64_t> write_through_;  // AddWriteThrough: via -> target
  std::vector<Entry> log_;                           // state changes since the last checkpoint
  std::map<uint64_t, size_t> last_upload_;           // range -> log index of its last whole upload
                                                     // that nothing may have read since
  std::vector<size_t> held_;                         // log indexes of held uploads (Entry::held)
  std::atomic<bool> any_held_{false};                // !held_.empty(), read without mu_
  std::multimap<size_t, JournalBytes> spare_;        // payload buffers for new entries, by capacity
  size_t spare_bytes_ = 0;
  size_t log_bytes_ = 0;
  size_t printf_delivered_ = 0;          // log_[0, this) had their printf text shown
  std::vector<StartedRequest> started_;  // Starts not yet known to be answered
  uint64_t sending_seq_ = 0;             // the seq of the request Deliver sends now
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  uint64_t checkpoint_bytes_ = 0;
  uint64_t readback_bytes_ = 0;
  uint64_t overwritten_bytes_ = 0;
  uint64_t dropped_bytes_ = 0;
  uint64_t snapshots_copied_ = 0;
  size_t checkpoints_ = 0;
  std::vector<Recovery> recoveries_;
  // Set when a replay lost its connection (the new session's process ended under it).
  bool replay_lost_transport_ = false;
  const transport::ClientConnection* watched_ = nullptr;  // has the lease check (WatchLease)

  // Recovering together (the header comment). Under mu(): a background recovery's new
  // session and where it is, for Deliver to put in the channel; the connection whose
  // background recovery failed (its next failure is not recovered again).
  AgentLostHook agent_lost_;
  std::unique_ptr<transport::ClientConnection> recovered_;
  GpuLocation recovered_location_;
  dataplane::DeviceDescription recovered_description_{};
  const transport::ClientConnection* abandoned_ = nullptr;
  bool in_background_ = false;  // the Recover under way is a background one
  size_t background_started_ = 0;
  // The thread and whether one runs (background_mu_); stop_background_: StopBackground
  // was called (read in Recover's wait without a lock).
  std::mutex background_mu_;
  std::thread background_;
  bool background_running_ = false;
  std::atomic<bool> stop_background_{false};
};

}  // namespace gpupool::client
