#include "poold/etcd_store.h"

#include <cinttypes>
#include <cstdio>
#include <map>

#include "common/log.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;

std::string Padded(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64, n);
  return buf;
}

// Below the API clients' default timeout (5 s), so that a write etcd cannot commit is
// answered with etcd's error rather than a client timeout.
constexpr int kTimeoutMs = 3000;

// Parses a stored row; a row that is not what gpupoold wrote is an error naming the key,
// never a silently skipped GPU or lease.
template <typename Row, typename Fill>
Result<Row> FromJson(const std::string& text, const char* what, Fill fill) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Internal(std::string("etcd holds a ") + what + " that is not a JSON object");
  Row r;
  try {
    fill(j, &r);
  } catch (const json::exception& e) {
    return Status::Internal(std::string("etcd holds a malformed ") + what + ": " + e.what());
  }
  return r;
}

}  // namespace

json GpuRowToJson(const GpuRow& r) {
  return {{"uuid", r.uuid},
          {"host", r.host},
          {"rack", r.rack},
          {"model", r.model},
          {"pci_bus_id", r.pci_bus_id},
          {"endpoint", r.endpoint},
          {"state", r.state},
          {"reason", r.reason},
          {"index", r.index},
          {"numa_node", r.numa_node},
          {"memory_mib", r.memory_mib},
          {"admin_drain", r.admin_drain},
          {"admin_fail", r.admin_fail}};
}

json LeaseRowToJson(const LeaseRow& r) {
  return {{"number", r.number},
          {"job_id", r.job_id},
          {"uid", r.uid},
          {"user", r.user},
          {"request", r.request_json},
          {"place", r.place},
          {"state", r.state},
          {"token", r.token},
          {"gpus", r.gpus_json},
          {"min_memory_mib", r.min_memory_mib},
          {"generation", r.generation},
          {"created", r.created},
          {"renewed", r.renewed},
          {"expires", r.expires},
          {"ttl", r.ttl},
          {"movable", r.movable}};
}

json EventRowToJson(const EventRow& r) {
  return {{"seq", r.seq},     {"time", r.time},     {"type", r.type},     {"gpu", r.gpu},
          {"lease", r.lease}, {"detail", r.detail}, {"job_id", r.job_id}, {"uid", r.uid}};
}

Result<GpuRow> GpuRowFromJson(const std::string& text) {
  return FromJson<GpuRow>(text, "GPU", [](const json& j, GpuRow* r) {
    r->uuid = j.at("uuid").get<std::string>();
    r->host = j.at("host").get<std::string>();
    r->rack = j.at("rack").get<std::string>();
    r->model = j.at("model").get<std::string>();
    r->pci_bus_id = j.at("pci_bus_id").get<std::string>();
    r->endpoint = j.at("endpoint").get<std::string>();
    r->state = j.at("state").get<std::string>();
    r->reason = j.at("reason").get<std::string>();
    r->index = j.at("index").get<int>();
    r->numa_node = j.at("numa_node").get<int>();
    r->memory_mib = j.at("memory_mib").get<uint64_t>();
    r->admin_drain = j.at("admin_drain").get<bool>();
    r->admin_fail = j.at("admin_fail").get<bool>();
  });
}

Result<LeaseRow> LeaseRowFromJson(const std::string& text) {
  return FromJson<LeaseRow>(text, "lease", [](const json& j, LeaseRow* r) {
    r->number = j.at("number").get<uint64_t>();
    r->job_id = j.at("job_id").get<int64_t>();
    r->uid = j.at("uid").get<uint32_t>();
    r->user = j.at("user").get<std::string>();
    r->request_json = j.at("request").get<std::string>();
    r->place = j.at("place").get<std::string>();
    r->state = j.at("state").get<std::string>();
    r->token = j.at("token").get<std::string>();
    r->gpus_json = j.at("gpus").get<std::string>();
    r->min_memory_mib = j.at("min_memory_mib").get<uint64_t>();
    r->generation = j.at("generation").get<uint64_t>();
    r->created = j.at("created").get<int64_t>();
    r->renewed = j.at("renewed").get<int64_t>();
    r->expires = j.at("expires").get<int64_t>();
    r->ttl = j.at("ttl").get<int64_t>();
    r->movable = j.value("movable", false);  // absent in state written before it existed
  });
}

Result<EventRow> EventRowFromJson(const std::string& text) {
  return FromJson<EventRow>(text, "event", [](const json& j, EventRow* r) {
    r->seq = j.at("seq").get<uint64_t>();
    r->time = j.at("time").get<int64_t>();
    r->type = j.at("type").get<std::string>();
    r->gpu = j.at("gpu").get<std::string>();
    r->lease = j.at("lease").get<std::string>();
    r->detail = j.at("detail").get<std::string>();
    r->job_id = j.at("job_id").get<int64_t>();
    r->uid = j.at("uid").get<uint32_t>();
  });
}

EtcdStore::EtcdStore(EtcdAccess access, std::string prefix, int64_t fence_revision, int max_txn_ops)
    : etcd_(std::move(access), kTimeoutMs),
      prefix_(std::move(prefix)),
      fence_revision_(fence_revision),
      max_txn_ops_(max_txn_ops) {}

Result<std::unique_ptr<Store>> EtcdStore::Open(EtcdAccess access, std::string prefix, int64_t fence_revision,
                                               int max_txn_ops) {
  if (fence_revision <= 0) return Status::InvalidArgument("an etcd store needs the leader key's revision");
  if (max_txn_ops < 4) return Status::InvalidArgument("max_txn_ops must be at least 4");
  std::unique_ptr<EtcdStore> store(new EtcdStore(std::move(access), std::move(prefix), fence_revision, max_txn_ops));
  store->StartCommitter();
  return std::unique_ptr<Store>(std::move(store));
}

EtcdStore::~EtcdStore() { StopCommitter(); }

Result<LoadedState> EtcdStore::Load(size_t recent_events) {
  LoadedState st;
  auto range = [this](const std::string& sub) { return etcd_.Range(prefix_ + sub, PrefixEnd(prefix_ + sub)); };
  Result<std::vector<EtcdKeyValue>> gpus = range("gpus/");
  if (!gpus.ok()) return Status::Unavailable("cannot read GPUs from etcd: " + gpus.status().message());
  for (const EtcdKeyValue& kv : gpus.value()) {
    Result<GpuRow> row = GpuRowFromJson(kv.value);
    if (!row.ok()) return Status::Internal(kv.key + ": " + row.status().message());
    st.gpus.push_back(std::move(row.value()));
  }
  Result<std::vector<EtcdKeyValue>> leases = range("leases/");
  if (!leases.ok()) return Status::Unavailable("cannot read leases from etcd: " + leases.status().message());
  for (const EtcdKeyValue& kv : leases.value()) {
    Result<LeaseRow> row = LeaseRowFromJson(kv.value);
    if (!row.ok()) return Status::Internal(kv.key + ": " + row.status().message());
    st.next_lease = std::max(st.next_lease, row->number + 1);
    st.leases.push_back(std::move(row.value()));
  }
  Result<std::vector<EtcdKeyValue>> events =
      etcd_.Range(prefix_ + "events/", PrefixEnd(prefix_ + "events/"), static_cast<int64_t>(recent_events),
                  /*descending=*/true);
  if (!events.ok()) return Status::Unavailable("cannot read events from etcd: " + events.status().message());
  for (auto it = events->rbegin(); it != events->rend(); ++it) {
    Result<EventRow> row = EventRowFromJson(it->value);
    if (!row.ok()) return Status::Internal(it->key + ": " + row.status().message());
    st.next_event = std::max(st.next_event, row->seq + 1);
    st.recent_events.push_back(std::move(row.value()));
  }
  newest_event_ = st.next_event - 1;
  Result<std::vector<EtcdKeyValue>> next = etcd_.Range(prefix_ + "meta/next_lease", "");
  if (!next.ok()) return Status::Unavailable("cannot read the lease counter from etcd: " + next.status().message());
  if (!next->empty()) {
    try {
      st.next_lease = std::max<uint64_t>(st.next_lease, std::stoull(next->front().value));
    } catch (...) {
      return Status::Internal(prefix_ + "meta/next_lease holds '" + next->front().value + "', not a number");
    }
  }
  return st;
}

Status EtcdStore::Commit(const json& ops) {
  json compare = json::array({EtcdCompareCreateRevision(prefix_ + "leader", fence_revision_)});
  Result<EtcdClient::TxnResult> txn = etcd_.Txn(compare, ops);
  if (!txn.ok()) return txn.status();
  if (!txn->succeeded) {
    return Status::Unavailable("this gpupoold is no longer the leader (the leader key " + prefix_ +
                               "leader is not the one it created at revision " + std::to_string(fence_revision_) +
                               "): it writes nothing more");
  }
  return Status::OK();
}

Status EtcdStore::WriteBatch(const std::vector<Op>& ops) {
  // Only the last image of a key matters; keep the order of first appearance, so that a
  // batch cut into several transactions still writes in the order the state changed.
  std::vector<std::string> order;
  std::map<std::string, json> latest;
  uint64_t max_lease = 0;
  auto set = [&](const std::string& key, json op) {
    if (latest.emplace(key, op).second) {
      order.push_back(key);
    } else {
      latest[key] = std::move(op);
    }
  };
  for (const Op& op : ops) {
    if (const GpuRow* g = std::get_if<GpuRow>(&op)) {
      std::string key = prefix_ + "gpus/" + g->uuid;
      set(key, EtcdPut(key, GpuRowToJson(*g).dump()));
    } else if (const LeaseRow* l = std::get_if<LeaseRow>(&op)) {
      std::string key = prefix_ + "leases/" + Padded(l->number);
      set(key, EtcdPut(key, LeaseRowToJson(*l).dump()));
      max_lease = std::max(max_lease, l->number);
    } else if (const LeaseDelete* d = std::get_if<LeaseDelete>(&op)) {
      std::string key = prefix_ + "leases/" + Padded(d->number);
      set(key, EtcdDelete(key));
      max_lease = std::max(max_lease, d->number);
    } else if (const EventRow* e = std::get_if<EventRow>(&op)) {
      std::string key = prefix_ + "events/" + Padded(e->seq);
      set(key, EtcdPut(key, EventRowToJson(*e).dump()));
      newest_event_ = std::max(newest_event_, e->seq);
    }
  }
  if (max_lease > 0) {
    // Written after the rows: max() of what is stored is not needed, since lease numbers
    // only grow within one leader and a new leader starts from what it loaded.
    std::string key = prefix_ + "meta/next_lease";
    set(key, EtcdPut(key, std::to_string(max_lease + 1)));
  }
  json chunk = json::array();
  for (const std::string& key : order) {
    chunk.push_back(std::move(latest[key]));
    if (static_cast<int>(chunk.size()) == max_txn_ops_) {
      GPUPOOL_RETURN_IF_ERROR(Commit(chunk));
      chunk = json::array();
    }
  }
  if (!chunk.empty()) GPUPOOL_RETURN_IF_ERROR(Commit(chunk));
  return Status::OK();
}

Status EtcdStore::TrimEvents(uint64_t keep) {
  if (newest_event_ <= keep) return Status::OK();
  std::string begin = prefix_ + "events/";
  std::string end = prefix_ + "events/" + Padded(newest_event_ - keep + 1);
  return Commit(json::array({EtcdDeleteRange(begin, end)}));
}

}  // namespace gpupool::poold
