// Session: one client connection to the dataplane server.
//
// Decodes the client's requests (protocol.h) and runs them on the session's Executor,
// after asking the backend whether the GPU may be used. Errors of one-way (asynchronous)
// requests are kept and reported with the next reply, once; a GPU failure or a kernel
// fault is sticky like on a real GPU: every later request gets it.
// A session whose lease lost its GPU is revoked (Revoke): every later request answers
// CUDA_ERROR_NOT_PERMITTED, and the server closes the connection. The executor, and with
// it the client's memory, goes with the session when the connection closes: not sooner,
// because a reply in flight may still be sending from that memory.
// Used by the server thread only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remote/dataplane/log_limiter.h"
#include "remote/dataplane/server.h"
#include "remote/device/backend.h"
#include "remote/device/executor.h"
#include "remote/transport/rpc_server.h"

namespace gpupool::dataplane {

class Session {
 public:
  // `log` (the server's) must outlive the session.
  Session(std::string peer, LogLimiter* log) : peer_(std::move(peer)), log_(log) {}

  // `epoch`: the authorization epoch the credential was checked at (server.h).
  void Authorize(const std::string& lease_id, const std::string& token, const device::GpuInfo& gpu,
                 device::GpuBackend* backend, std::unique_ptr<device::Executor> executor, uint64_t epoch);
  // Later requests are refused with `why`. `retain_until_ns` nonzero: the lease moved away
  // from a healthy GPU, so the session's memory is kept until then for a handoff (the
  // connection stays open, and the session may offer its memory once).
  void Revoke(const std::string& why, int64_t retain_until_ns = 0) {
    revoked_ = why;
    retained_until_ns_ = retain_until_ns;
  }
  int64_t retained_until_ns() const { return retained_until_ns_; }
  bool retained() const { return retained_until_ns_ != 0; }
  void set_retained_until_ns(int64_t until) { retained_until_ns_ = until; }
  bool offered() const { return offered_; }
  void set_offered() { offered_ = true; }
  // The transport seq of the last request this session ran while attached (a handoff
  // tells the client which of its requests the old GPU ran).
  uint64_t last_run_seq() const { return last_run_seq_; }
  void set_last_run_seq(uint64_t seq) { last_run_seq_ = seq; }
  // A connection another agent attached with a handoff ticket: the session it may read
  // (its connection id; 0: none).
  uint64_t handoff_of() const { return handoff_of_; }
  void set_handoff_of(uint64_t id) { handoff_of_ = id; }
  // Bytes this connection's reply sends from (a handoff read): its own, so that the offered
  // session they were copied from may close while the reply is still on its way.
  std::vector<char>& reply_bytes() { return reply_bytes_; }
  // The executor of an attached or retained session (nullptr otherwise).
  device::Executor* executor() const { return executor_.get(); }
  const device::GpuInfo& gpu() const { return gpu_; }
  // Attached to a GPU, and not revoked.
  bool authorized() const { return executor_ != nullptr && revoked_.empty(); }
  // Whether the server's watchdog follows this session's operations.
  bool watched() const { return watched_; }
  void set_watched(bool watched) { watched_ = watched; }
  // Where kOpRecovered reports go (ServerOptions::on_recovered).
  void set_recovery_listener(decltype(ServerOptions::on_recovered) listener) { on_recovered_ = std::move(listener); }
  bool revoked() const { return !revoked_.empty(); }
  // A GPU failure or a kernel's fault made the context unusable (its CUresult; 0: none).
  int32_t sticky_error() const { return sticky_error_; }
  const std::string& peer() const { return peer_; }
  const std::string& lease_id() const { return lease_id_; }
  const std::string& token() const { return token_; }
  const std::string& gpu_uuid() const { return gpu_.uuid; }
  // The process that opened the session, as its hello said (protocol.h, HelloArgs): the
  // client's word, shown back only to sessions of the same lease (kOpGpuStatus).
  // `monitor_only`: the session only watches (kHelloMonitorOnly) and is not listed.
  void set_client(uint32_t pid, std::string host, bool monitor_only) {
    client_pid_ = pid;
    client_host_ = std::move(host);
    monitor_only_ = monitor_only;
  }
  bool monitor_only() const { return monitor_only_; }
  uint32_t client_pid() const { return client_pid_; }
  const std::string& client_host() const { return client_host_; }
  // The authorization epoch at which the credential was last found valid.
  uint64_t checked_epoch() const { return checked_epoch_; }
  void set_checked_epoch(uint64_t epoch) { checked_epoch_ = epoch; }

  // Where the bulk data of a host-to-device copy can be received in place (sim).
  void* BulkDestination(const transport::RequestHeader& header, std::string_view args, size_t len);
  void Run(const transport::RequestHeader& header, std::string_view args, const void* payload, size_t payload_len,
           transport::ServerReply* reply);

 private:
  // Runs one decoded request; returns its CUresult.
  int32_t Dispatch(uint32_t op, std::string_view args, const void* payload, size_t payload_len,
                   transport::ServerReply* reply);
  int32_t LoadModule(std::string_view args, const void* payload, size_t payload_len, std::string* out);

  std::string peer_;
  LogLimiter* log_;
  std::string lease_id_;
  std::string token_;
  uint64_t checked_epoch_ = 0;
  std::string revoked_;  // why, once revoked
  int64_t retained_until_ns_ = 0;
  bool offered_ = false;
  uint64_t last_run_seq_ = 0;
  uint64_t handoff_of_ = 0;
  device::GpuInfo gpu_;
  device::GpuBackend* backend_ = nullptr;
  std::unique_ptr<device::Executor> executor_;
  bool watched_ = false;
  decltype(ServerOptions::on_recovered) on_recovered_;
  int32_t async_error_ = 0;     // first error of a one-way request not yet reported
  int32_t sticky_error_ = 0;    // GPU failed or a kernel faulted: the context is unusable
  bool said_unplaced_ = false;  // logged that an allocation could not go where asked
  std::vector<char> reply_bytes_;
  uint32_t client_pid_ = 0;
  std::string client_host_;
  bool monitor_only_ = false;
};

}  // namespace gpupool::dataplane
