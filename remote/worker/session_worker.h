// The session worker: one process per session (one lease on one GPU), started by
// gpupool-agentd's supervisor (remote/agentd/session_broker.h), which runs every tenant
// byte of that session: the data path's requests, module images, PTX, the JIT's code and
// the session's device memory (sim), or its own CUDA context (cuda).
//
// Start: `gpupool-worker --channel FD` with the supervisor's channel (channel.h) on FD.
// The first message, "start", names the session:
//   {type:"start", backend:"sim"|"cuda", gpu:{uuid,index,model,memory_bytes,pci_bus_id,
//    numa_node,cc_major,cc_minor,multiprocessor_count}, lease_id, token, handoff_source,
//    handoff_window_ms, user, address_space, verbose}
// with two descriptors: the GPU's state page (read-only) and this worker's counters page
// (gpu_status.h). The worker then enters its sandbox (sandbox.h) and only after that
// starts its data-path server, answers "ready", and takes clients ("client" messages, each
// with the client's socket and what its handshake said: {peer, flags, worker_address,
// restore}; restore: a recovery's restore stream, run on a restore lane of the GPU,
// protocol.h). A client's own hello (protocol.h) must name the worker's
// lease, token and GPU, compared in constant time. "revoke" {retain:bool} says the lease
// no longer holds the GPU (with retain, the sessions keep their memory for a handoff
// window); "stop" or a closed channel ends the worker, and with it every session's memory.
//
// The worker tells the supervisor "ticket" {ticket} when a retained session offers its
// memory, "recovered" {...} when a client reports a recovery, and "failed" {reason} when
// a session sees its GPU fail in-band.
#pragma once

namespace gpupool::worker {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// argv excludes nothing (argv[0] is the program). Returns the exit code.
int RunSessionWorker(int argc, char** argv);

}  // namespace gpupool::worker
