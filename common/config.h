// Config: gpupool.conf (libconfig syntax), shared by gpupoold, gpupool-agentd, gpupoolctl
// and the SPANK plugin. See man/gpupool.conf.5 and etc/gpupool.conf.
//
// Loading is strict: an unknown key, a value of the wrong type, a duplicate GPU or pool, or
// a pool name that no pool defines is an error naming the file, line and key, e.g.
//   gpupool.conf:14: pools[1].modles: unknown key (expected one of: name, models, ...)
// Every section is optional; missing keys take the defaults below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool {

struct PoolConfig {
  std::string name;                 // [a-z0-9_-]+, unique
  std::vector<std::string> models;  // glob patterns on the GPU model; empty = any
  std::vector<std::string> racks;   // rack names; empty = any
  std::vector<std::string> hosts;   // host names (Slurm hostlist syntax not supported); empty = any
  uint64_t min_memory_mib = 0;      // GPUs with less memory are not in the pool
};

// Explicit assignment of one GPU (by UUID or "host:index") to a pool, overriding selectors.
struct GpuAssignment {
  std::string gpu;
  std::string pool;
  int line = 0;
};

struct PooldConfig {
  std::string listen = "127.0.0.1:6830";
  std::string state_dir = "/var/lib/gpupool";
  std::string log_file;              // empty: stderr
  std::string slurm_user = "slurm";  // is an admin
  std::vector<std::string> admins;   // user names or numeric uids
  std::vector<std::string> agent_users;
  int lease_ttl = 600;  // seconds; default for acquires without "ttl"
  int max_lease_ttl = 7 * 24 * 3600;
  int unreachable_timeout = 15;  // seconds without heartbeat → UNREACHABLE
  int reap_interval = 30;        // seconds between expiry/Slurm reap passes; 0 = off
  bool slurm_reap = true;        // release leases whose Slurm job has ended
  // A lease holds at most the gpupool_<pool> licences Slurm allocated its job (asked of
  // slurmctld at acquire); false: no such limit, for sites without gres/ (gpupool.conf(5)).
  bool enforce_licenses = true;
  std::string durability = "fsync";  // "fsync" (power-loss safe) or "process" (kill -9 safe)
  int max_request_bytes = 65536;
  int threads = 128;                 // HTTP worker threads (for complete requests)
  int header_timeout = 5;            // seconds from a request's first byte to its headers' end
  int body_timeout = 10;             // seconds from the headers' end to the body's end
  int connections_per_source = 256;  // open API connections of one source address (and uid)
  // High availability (gpupoold(8) HIGH AVAILABILITY): "sqlite" keeps state in state_dir;
  // "etcd" keeps it in etcd, and replicas elect one leader that serves the API.
  std::string state = "sqlite";
  std::vector<std::string> etcd_endpoints = {"http://127.0.0.1:2379"};  // all http:// or all https://
  std::string etcd_prefix = "/gpupool/";                                // every key gpupoold writes starts with it
  // A locked-down etcd (https:// endpoints only): the CA that signed etcd's server
  // certificate (empty: the system's CAs), the client certificate and key gpupoold shows it
  // (etcd --client-cert-auth), and the etcd user whose role covers etcd_prefix, with its
  // password in a file only gpupoold's user may read (etcd's gateway takes no user from a
  // certificate: gpupoold.8, ETCD SECURITY).
  std::string etcd_ca_file, etcd_cert_file, etcd_key_file;
  std::string etcd_user, etcd_password_file;
  int leader_ttl = 2;     // seconds: a dead leader is replaced within about this
  std::string advertise;  // URL followers name for this replica; empty: http://<listen>
  // Key that lease tokens are derived from, outside the state (poold/lease_tokens.h); empty:
  // <state_dir>/token.key (made at first start) with sqlite, tokens in clear with etcd.
  std::string token_key_file;
};

struct SimGpuConfig {
  std::string model = "A100-SXM4-80GB";
  uint64_t memory_mib = 81920;
  int count = 1;
};

struct AgentConfig {
  std::string server = "http://127.0.0.1:6830";
  std::string host;  // empty: gethostname()
  std::string rack = "default";
  std::string listen = "127.0.0.1:7100";  // data-path (UCX) endpoint served to jobs
  std::string control;                    // "host:port" of the local fault/inspection API; empty = off
  // "sim" or "cuda"; empty: not set. No default: the agent refuses to start without one,
  // so that a host nobody configured never serves simulated GPUs as if they were real.
  std::string backend;
  int heartbeat_interval = 2;  // seconds
  int hang_timeout = 10;       // seconds without progress before the GPU is probed; 0 off
  // The session workers (remote/worker): the user they run as when the agent is root
  // (default "nobody"), the program (empty: gpupool-worker beside gpupool-agentd, else the
  // installed one), and how long a worker whose lease ended may take to exit before it is
  // killed (seconds).
  std::string worker_user = "nobody";
  std::string worker_program;
  int session_grace = 2;
  // A client on this host gets a worker of its own uid (shared memory needs it).
  bool worker_same_user = true;
  // A cgroup per worker ("auto", "required", "off"; remote/agentd/worker_cgroup.h), its
  // memory limit in MiB (0: the GPU's memory + 4 GiB on the sim, none on cuda) and each
  // worker's CPU time limit in seconds (RLIMIT_CPU; 0: none).
  std::string worker_cgroup = "auto";
  uint64_t worker_memory_mib = 0;
  int worker_cpu_seconds = 0;
  std::vector<SimGpuConfig> sim_gpus;   // sim backend inventory (default: 4 × A100 80 GB)
  std::vector<std::string> sim_faults;  // sim faults at start, "INDEX:fail[=REASON]|fail-after=N|hang"
};

struct ClientConfig {
  std::string server = "http://127.0.0.1:6830";
  int timeout = 5;  // seconds
};

struct Config {
  std::string path;          // the file it came from ("" for defaults)
  std::string munge_socket;  // top-level key; empty: $MUNGE_SOCKET, else libmunge's default
  PooldConfig poold;
  std::vector<PoolConfig> pools;
  std::vector<GpuAssignment> gpus;
  AgentConfig agent;
  ClientConfig client;
};

// Parses `path`. Errors name file, line and key.
Result<Config> LoadConfig(const std::string& path);
// Same, from text (tests); `name` stands for the file name in messages.
Result<Config> ParseConfig(const std::string& text, const std::string& name);

// "80G", "81920M", "1T", "512" (MiB) → MiB. InvalidArgument naming the text otherwise.
Result<uint64_t> ParseMemoryMib(const std::string& text);

// Pool and rack names: 1-64 of [A-Za-z0-9_.-]. The one rule for gpupool.conf, the
// --gpu-pool options and gpupoolctl.
bool IsValidName(const std::string& name);

// Default config path: $GPUPOOL_CONF, else /etc/gpupool/gpupool.conf.
std::string DefaultConfigPath();

}  // namespace gpupool
