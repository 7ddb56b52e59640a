// Channel: the supervisor's line to one session worker, a SOCK_SEQPACKET socketpair.
//
// Each message is one JSON object (at most kMaxMessage bytes) and up to kMaxFds file
// descriptors (SCM_RIGHTS). Who sends what (session_worker.h lists the fields):
//   supervisor -> worker: "start" (the session: GPU, lease, limits; with the two shared
//     pages), "client" (a client the supervisor authenticated; with its socket),
//     "revoke" (the lease no longer holds the GPU), "stop".
//   worker -> supervisor: "ready", "ticket" (a handoff ticket it offered), "recovered" (a
//     client's report, kOpRecovered), "failed" (an in-band GPU failure a session saw),
//     "idle" (no client is left).
// The supervisor believes nothing a worker says about the GPU without checking it
// (session_broker.h): a worker runs tenant input and may be anyone's.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::worker {

inline constexpr size_t kMaxMessage = 64 * 1024;
inline constexpr size_t kMaxFds = 4;

struct Message {
  nlohmann::json body;
  std::vector<int> fds;  // received ones belong to the receiver
};

// Bytes as hex digits, for binary fields (a UCX worker address) in a JSON message.
std::string ToHex(const std::string& bytes);
// The bytes back; false for text that is not an even number of hex digits.
bool FromHex(const std::string& hex, std::string* bytes);

// Blocking send; the fds stay the caller's (the receiver gets copies).
Status Send(int channel, const nlohmann::json& body, const std::vector<int>& fds = {});
// Blocking receive (a timeout set on the socket bounds it). Unavailable when the other end
// closed; InvalidArgument for a message that is not one JSON object (its fds are closed).
Result<Message> Receive(int channel);

}  // namespace gpupool::worker
