#include "poold/api_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>

#include "common/json_fields.h"
#include "common/log.h"
#include "poold/api_requests.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;
namespace jf = json_fields;

constexpr char kVersion[] = "0.1.0";

}  // namespace

namespace {

HttpLimits LimitsOf(const PooldConfig& c) {
  HttpLimits l;
  l.workers = c.threads;
  l.max_body_bytes = static_cast<size_t>(c.max_request_bytes);
  l.header_timeout_ms = c.header_timeout * 1000;
  l.body_timeout_ms = c.body_timeout * 1000;
  l.per_source = c.connections_per_source;
  return l;
}

}  // namespace

ApiServer::ApiServer(const Config& config, PoolEngine* engine, Store* store)
    : config_(config), engine_(engine), store_(store), http_(std::make_unique<HttpServer>(LimitsOf(config.poold))) {
  munge_socket_ = auth::ResolveMungeSocket(config.munge_socket);
  std::vector<std::string> warnings;
  roles_ =
      auth::RolePolicy::FromNames(config.poold.slurm_user, config.poold.admins, config.poold.agent_users, &warnings);
  for (const std::string& w : warnings) log::Warning("config: " + w + " (ignored in admins/agent_users)");
  Route();
}

ApiServer::~ApiServer() = default;

nlohmann::json ApiServer::StateNotSaved(const Status& failure) {
  return nlohmann::json{{"error", "state not saved: " + failure.message()}};
}

Status ApiServer::Bind(const std::string& listen_override) {
  GPUPOOL_RETURN_IF_ERROR(http_->Bind(listen_override.empty() ? config_.poold.listen : listen_override));
  port_ = http_->port();
  return Status::OK();
}

void ApiServer::Serve() {
  // Answers wait for their changes to be durable in the HTTP server, not in a worker each:
  // the committer's report releases them (see Answer).
  store_->SetDurableListener([this](uint64_t durable, const Status& health) {
    http_->NotifyDurable(durable, health.ok() ? std::string() : StateNotSaved(health).dump());
  });
  http_->Serve();
  store_->SetDurableListener(nullptr);
}

void ApiServer::Stop() { http_->Stop(); }

Status ApiServer::Authenticate(const httplib::Request& req, Caller* caller) {
  std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (header.rfind(bearer, 0) == 0) {
    uid_t uid;
    if (!sessions_.Lookup(header.substr(bearer.size()), req.remote_addr, &uid)) {
      return Status::Unauthenticated("session expired or unknown: authenticate again with MUNGE");
    }
    caller->uid = uid;
    caller->role = roles_.RoleOf(uid);
    return Status::OK();
  }
  return AuthenticateMunge(req, caller);
}

Status ApiServer::AuthenticateMunge(const httplib::Request& req, Caller* caller) {
  std::string header = req.get_header_value("Authorization");
  const std::string scheme = "MUNGE ";
  if (header.empty()) return Status::Unauthenticated("authentication required: send Authorization: MUNGE <credential>");
  if (header.rfind(scheme, 0) != 0) {
    return Status::Unauthenticated("unsupported authorization scheme (expected MUNGE or Bearer)");
  }
  Result<auth::Identity> id = auth::DecodeCredential(header.substr(scheme.size()), munge_socket_);
  if (!id.ok()) return id.status();
  caller->uid = id->uid;
  caller->role = roles_.RoleOf(id->uid);
  return Status::OK();
}

void ApiServer::Answer(httplib::Response& res, const Result<json>& result, int ok_code,
                       Store::InlineWrite* inline_write) {
  if (result.ok()) {
    // Nothing is reported before it is on disk: written here by a request served alone,
    // else the server holds the answer until the committer has written it (500 if it
    // cannot be saved), or, outside its handlers, this thread waits.
    const uint64_t ticket = store_->last_ticket();
    bool written = false;
    if (inline_write != nullptr && HttpServer::ServingAlone()) {
      HttpServer::WaitingWorker waiting;  // for the disk
      written = inline_write->Write(ticket);
    }
    if (written || !HttpServer::HoldAnswerUntil(ticket)) {
      Status durable = store_->WaitDurable(ticket);
      if (!durable.ok()) {
        res.status = 500;
        res.set_content(StateNotSaved(durable).dump(), "application/json");
        return;
      }
    }
    res.status = ok_code;
    res.set_content(result.value().dump(), "application/json");
    return;
  }
  res.status = result.status().HttpCode();
  json body = {{"error", result.status().message()}};
  if (result.status().code() == Status::Code::kUnavailable) body["retry"] = true;
  // Messages quote what the client sent (a query parameter decoded from %FF, say), which
  // need not be UTF-8: replace such bytes rather than throw (that would answer 500).
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ApiServer::Route() {
  using Handler = std::function<Result<json>(const httplib::Request&, const Caller&)>;
  // Wraps a handler with timing, authentication and role checks.
  auto wrap = [this](auth::Role need, Handler h) {
    return [this, need, h](const httplib::Request& req, httplib::Response& res) {
      auto start = std::chrono::steady_clock::now();
      Caller caller;
      Status s = Authenticate(req, &caller);
      if (s.ok() && static_cast<int>(caller.role) < static_cast<int>(need)) {
        s = Status::PermissionDenied(std::string("this request needs the ") + auth::RoleName(need) + " role; uid " +
                                     std::to_string(caller.uid) + " is a " + auth::RoleName(caller.role));
      }
      if (s.ok() && req.method == "POST") {
        // After a failed write, memory is ahead of disk: change nothing more, and let the
        // daemon restart from what is on disk (Daemon stops itself).
        Status health = store_->Health();
        if (!health.ok()) {
          s = Status::Unavailable("gpupoold cannot save its state (" + health.message() +
                                  "); it refuses changes until it restarts from disk");
        }
      }
      if (s.ok()) {
        Store::InlineWrite inline_write(store_, HttpServer::ServingAlone());
        Answer(res, h(req, caller), 200, &inline_write);
      } else {
        Answer(res, Result<json>(s));
      }
      metrics_.Observe(res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    };
  };
  auto body_of = [](const httplib::Request& req) { return jf::Parse(req.body); };

  http_->Handle("GET", "/v1/ping", [this](const httplib::Request&, httplib::Response& res) {
    json ping = {{"ok", true}, {"version", kVersion}};
    if (config_.poold.state == "etcd") {
      // Replicas: this one serves the API, so it leads (followers answer from StandbyServer).
      std::string url = config_.poold.advertise.empty() ? "http://" + config_.poold.listen : config_.poold.advertise;
      ping["role"] = "leader";
      ping["leader"] = url;
      ping["url"] = url;
    }
    res.set_content(ping.dump(), "application/json");
  });
  http_->Handle("GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Metrics(), "text/plain; version=0.0.4");
  });

  // A session: one MUNGE authentication for many requests (see poold/sessions.h).
  http_->Handle("POST", "/v1/session", [this](const httplib::Request& req, httplib::Response& res) {
    Caller caller;
    Status s = AuthenticateMunge(req, &caller);
    if (!s.ok()) {
      Answer(res, Result<json>(s));
      return;
    }
    Result<std::string> token = sessions_.Create(caller.uid, req.remote_addr);
    if (!token.ok()) {
      Answer(res, Result<json>(token.status()));
      return;
    }
    res.set_content(json{{"token", token.value()},
                         {"uid", caller.uid},
                         {"role", auth::RoleName(caller.role)},
                         {"idle_timeout", sessions_.idle_seconds()}}
                        .dump(),
                    "application/json");
  });
  http_->Handle("GET", "/v1/pools",
                wrap(auth::Role::kUser, [this](const httplib::Request& req, const Caller&) -> Result<json> {
                  GPUPOOL_RETURN_IF_ERROR(CheckQuery(req, {"name"}));
                  return engine_->ListPools(req.get_param_value("name"));
                }));
  http_->Handle("GET", "/v1/gpus",
                wrap(auth::Role::kUser, [this](const httplib::Request& req, const Caller&) -> Result<json> {
                  GPUPOOL_RETURN_IF_ERROR(CheckQuery(req, {"id", "pool"}));
                  return engine_->ListGpus(req.get_param_value("id"), req.get_param_value("pool"));
                }));
  http_->Handle("POST", "/v1/gpus/update",
                wrap(auth::Role::kAdmin, [this, body_of](const httplib::Request& req, const Caller&) -> Result<json> {
                  Result<json> body = body_of(req);
                  if (!body.ok()) return body.status();
                  GpuUpdate update;
                  GPUPOOL_RETURN_IF_ERROR(ParseGpuUpdate(*body, &update));
                  return engine_->UpdateGpu(update.gpu, update.state, update.reason);
                }));
  // Admins only: moves a lease's GPU (and its job's running processes) to another GPU.
  http_->Handle("POST", "/v1/leases/migrate",
                wrap(auth::Role::kAdmin, [this, body_of](const httplib::Request& req, const Caller&) -> Result<json> {
                  Result<json> body = body_of(req);
                  if (!body.ok()) return body.status();
                  MigrateRequest migrate;
                  GPUPOOL_RETURN_IF_ERROR(ParseMigrate(*body, &migrate));
                  return engine_->Migrate(migrate.lease, migrate.gpu, migrate.to, migrate.reason);
                }));
  http_->Handle("GET", "/v1/leases",
                wrap(auth::Role::kUser, [this](const httplib::Request& req, const Caller& caller) -> Result<json> {
                  GPUPOOL_RETURN_IF_ERROR(CheckQuery(req, {"job", "id"}));
                  int64_t job = 0;
                  GPUPOOL_RETURN_IF_ERROR(QueryInt(req, "job", 1, &job));
                  return engine_->ListLeases(caller, req.get_param_value("id"), job);
                }));
  http_->Handle(
      "POST", "/v1/leases",
      wrap(auth::Role::kUser, [this, body_of](const httplib::Request& req, const Caller& caller) -> Result<json> {
        Result<json> body = body_of(req);
        if (!body.ok()) return body.status();
        Result<AcquireRequest> acquire = ParseAcquire(*body, config_.poold.max_lease_ttl);
        if (!acquire.ok()) return acquire.status();
        bool created = false;
        Result<json> lease = engine_->Acquire(caller, *acquire, &created);
        if (!lease.ok()) return lease.status();
        return json{{"lease", lease.value()}, {"created", created}};
      }));
  http_->Handle(
      "POST", "/v1/leases/renew",
      wrap(auth::Role::kUser, [this, body_of](const httplib::Request& req, const Caller& caller) -> Result<json> {
        Result<json> body = body_of(req);
        if (!body.ok()) return body.status();
        std::string id;
        int64_t job = 0;
        GPUPOOL_RETURN_IF_ERROR(ParseLeaseRef(*body, {"id", "job_id"}, &id, &job));
        Result<json> lease = engine_->Renew(caller, id, job);
        if (!lease.ok()) return lease.status();
        return json{{"lease", lease.value()}};
      }));
  http_->Handle(
      "POST", "/v1/leases/release",
      wrap(auth::Role::kUser, [this, body_of](const httplib::Request& req, const Caller& caller) -> Result<json> {
        Result<json> body = body_of(req);
        if (!body.ok()) return body.status();
        std::string id, reason;
        int64_t job = 0;
        GPUPOOL_RETURN_IF_ERROR(ParseRelease(*body, &id, &job, &reason));
        return engine_->Release(caller, id, job, reason);
      }));
  http_->Handle("GET", "/v1/events",
                wrap(auth::Role::kUser, [this](const httplib::Request& req, const Caller& caller) -> Result<json> {
                  GPUPOOL_RETURN_IF_ERROR(CheckQuery(req, {"gpu", "job", "since", "limit"}));
                  EventFilter f;
                  f.gpu = req.get_param_value("gpu");
                  int64_t since = 0, limit = 1000;
                  GPUPOOL_RETURN_IF_ERROR(QueryInt(req, "job", 1, &f.job_id));
                  GPUPOOL_RETURN_IF_ERROR(QueryInt(req, "since", 0, &since));
                  GPUPOOL_RETURN_IF_ERROR(QueryInt(req, "limit", 1, &limit));
                  f.since = static_cast<uint64_t>(since);
                  f.limit = static_cast<size_t>(std::min<int64_t>(limit, 100000));
                  return engine_->ListEvents(caller, f);
                }));
  // A process of a lease lost its connection to one of the lease's agents. Authenticated by
  // the lease's token (Authorization: Lease TOKEN), which its job's processes hold
  // (GPUPOOL_LEASE_TOKEN): the remoting library calls it from inside a job, where no MUNGE
  // credential is at hand. Changes nothing on its word: gpupoold probes the agent itself
  // (PoolEngine::AgentLost). On the ordinary workers: a probe may hold one for a second, and
  // the priority workers are the agents' heartbeats'.
  http_->Handle("POST", "/v1/leases/agent-lost", [this, body_of](const httplib::Request& req, httplib::Response& res) {
    auto start = std::chrono::steady_clock::now();
    Result<json> answer = [&]() -> Result<json> {
      const std::string header = req.get_header_value("Authorization");
      const std::string scheme = "Lease ";
      if (header.rfind(scheme, 0) != 0 || header.size() == scheme.size()) {
        return Status::Unauthenticated("authentication required: send Authorization: Lease <the lease's token>");
      }
      if (Status health = store_->Health(); !health.ok()) {
        return Status::Unavailable("gpupoold cannot save its state (" + health.message() +
                                   "); it refuses changes until it restarts from disk");
      }
      Result<json> body = body_of(req);
      if (!body.ok()) return body.status();
      std::string id, gpu;
      GPUPOOL_RETURN_IF_ERROR(ParseAgentLost(*body, &id, &gpu));
      return engine_->AgentLost(id, header.substr(scheme.size()), gpu);
    }();
    Answer(res, answer);
    metrics_.Observe(res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
  // Agents' register and heartbeat run on workers of their own: user traffic cannot delay
  // them into a host's UNREACHABLE.
  // A host is bound to the address its agent speaks from: an agent's credential elsewhere
  // cannot report for it (PoolEngine::Register).
  http_->Handle("POST", "/v1/agents/register",
                wrap(auth::Role::kAgent,
                     [this, body_of](const httplib::Request& req, const Caller& caller) -> Result<json> {
                       Result<json> body = body_of(req);
                       if (!body.ok()) return body.status();
                       Result<AgentRegistration> reg = ParseRegistration(*body);
                       if (!reg.ok()) return reg.status();
                       return engine_->Register(*reg, AgentSender{req.remote_addr, caller.uid});
                     }),
                /*priority=*/true);
  http_->Handle("POST", "/v1/agents/heartbeat",
                wrap(auth::Role::kAgent,
                     [this, body_of](const httplib::Request& req, const Caller& caller) -> Result<json> {
                       Result<json> body = body_of(req);
                       if (!body.ok()) return body.status();
                       std::string host;
                       std::vector<RecoveryReport> recoveries;
                       std::vector<TenantFaultReport> tenant_faults;
                       Result<std::vector<GpuHealthReport>> gpus =
                           ParseHeartbeat(*body, &host, &recoveries, &tenant_faults);
                       if (!gpus.ok()) return gpus.status();
                       const AgentSender sender{req.remote_addr, caller.uid};
                       Result<json> answer = engine_->Heartbeat(host, *gpus, recoveries, sender);
                       if (answer.ok() && !tenant_faults.empty()) {
                         GPUPOOL_RETURN_IF_ERROR(engine_->RecordTenantFaults(host, tenant_faults, sender));
                       }
                       return answer;
                     }),
                /*priority=*/true);

  // Errors httplib produces itself (404 route, 413 payload, 400 parse) get a JSON body too.
  http_->SetErrorHandler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg;
    if (res.status == 404)
      msg = "no such endpoint: " + req.method + " " + req.path;
    else if (res.status == 413)
      msg = "request body larger than max_request_bytes";
    else if (res.status == 405)
      msg = "method " + req.method + " not allowed on " + req.path;
    else if (res.status == 411)
      msg = "chunked request bodies are not accepted: send Content-Length";
    else if (res.status == 431)
      msg = "request headers larger than 16 KiB";
    else
      msg = "bad request (HTTP " + std::to_string(res.status) + ")";
    res.set_content(json{{"error", msg}}.dump(), "application/json");
  });
  http_->SetExceptionHandler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    log::Error(what);
    res.status = 500;
    res.set_content(json{{"error", what}}.dump(), "application/json");
  });
}

std::string ApiServer::Metrics() {
  std::string out;
  char line[256];
  out += "# HELP gpupool_gpus GPUs per pool and state.\n# TYPE gpupool_gpus gauge\n";
  for (const auto& [pool, c] : engine_->PoolSnapshot()) {
    const std::pair<const char*, int> states[] = {{"IDLE", c.idle},         {"LEASED", c.leased},
                                                  {"DRAINING", c.draining}, {"DRAINED", c.drained},
                                                  {"FAILED", c.failed},     {"UNREACHABLE", c.unreachable}};
    for (const auto& [state, n] : states) {
      std::snprintf(line, sizeof(line), "gpupool_gpus{pool=\"%s\",state=\"%s\"} %d\n", pool.c_str(), state, n);
      out += line;
    }
    std::snprintf(line, sizeof(line), "gpupool_pool_usable{pool=\"%s\"} %d\n", pool.c_str(), c.usable());
    out += line;
  }
  std::snprintf(line, sizeof(line), "# TYPE gpupool_leases gauge\ngpupool_leases %zu\n", engine_->lease_count());
  out += line;
  EngineCounters k = engine_->counters();
  const std::pair<const char*, uint64_t> counters[] = {{"gpupool_leases_acquired_total", k.acquired},
                                                       {"gpupool_leases_released_total", k.released},
                                                       {"gpupool_leases_expired_total", k.expired},
                                                       {"gpupool_leases_reaped_total", k.reaped},
                                                       {"gpupool_swaps_total", k.swapped},
                                                       {"gpupool_leases_degraded_total", k.degraded},
                                                       {"gpupool_gpu_failures_total", k.failed},
                                                       {"gpupool_gpu_unreachable_total", k.unreachable},
                                                       {"gpupool_recoveries_total", k.recovered},
                                                       {"gpupool_migrations_total", k.migrated},
                                                       {"gpupool_recoveries_dropped_total", k.recoveries_dropped},
                                                       {"gpupool_tenant_faults_total", k.tenant_faults},
                                                       {"gpupool_agent_lost_confirmed_total", k.agent_lost_confirmed},
                                                       {"gpupool_agent_lost_refuted_total", k.agent_lost_refuted},
                                                       {"gpupool_agent_lost_dropped_total", k.agent_lost_dropped}};
  for (const auto& [name, v] : counters) {
    std::snprintf(line, sizeof(line), "# TYPE %s counter\n%s %lu\n", name, name, v);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "# TYPE gpupool_store_commits_total counter\ngpupool_store_commits_total %lu\n"
                "# TYPE gpupool_store_inline_commits_total counter\ngpupool_store_inline_commits_total %lu\n",
                store_->commits(), store_->inline_commits());
  out += line;
  store_->commit_duration().Render(
      "gpupool_store_commit_duration_seconds",
      "Time to write one transaction of state: SQLite with its sync, or an etcd transaction.", &out);
  HttpCounters http = http_->counters();
  std::snprintf(line, sizeof(line),
                "# TYPE gpupool_http_refused_total counter\ngpupool_http_refused_total %lu\n"
                "# TYPE gpupool_http_timeouts_total counter\ngpupool_http_timeouts_total %lu\n",
                http.refused_per_source + http.refused_full, http.timed_out);
  out += line;
  if (config_.poold.state == "etcd") out += "# TYPE gpupool_leader gauge\ngpupool_leader 1\n";  // followers say 0
  metrics_.Render(&out);
  return out;
}

}  // namespace gpupool::poold
