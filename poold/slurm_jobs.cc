#include "poold/slurm_jobs.h"

#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <mutex>

extern "C" {
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
}

namespace gpupool::poold {

bool SlurmJobs::Init(std::string* why) {
  if (initialised_) return true;
  const char* env = std::getenv("SLURM_CONF");
  std::string conf = env != nullptr && *env != '\0' ? env : "/etc/slurm/slurm.conf";
  // libslurm exits the process when slurm.conf is missing: check first.
  if (access(conf.c_str(), R_OK) != 0) {
    *why = "cannot read " + conf + " (set SLURM_CONF or slurm_reap = false)";
    return false;
  }
  static std::once_flag once;  // slurm_init reads slurm.conf into process-wide state
  std::call_once(once, [] { slurm_init(nullptr); });
  initialised_ = true;
  return true;
}

SlurmJobs::JobState SlurmJobs::Query(int64_t job_id) {
  job_info_msg_t* msg = nullptr;
  if (slurm_load_job(&msg, static_cast<uint32_t>(job_id), SHOW_DETAIL) != SLURM_SUCCESS) {
    int err = slurm_get_errno();
    return err == ESLURM_INVALID_JOB_ID ? JobState::kEnded : JobState::kUnknown;
  }
  JobState state = JobState::kEnded;
  for (uint32_t i = 0; i < msg->record_count; ++i) {
    uint32_t base = msg->job_array[i].job_state & JOB_STATE_BASE;
    // PENDING covers a requeued job: its lease is released and taken again at next start.
    if (base == JOB_RUNNING || base == JOB_SUSPENDED) state = JobState::kRunning;
    if (msg->job_array[i].job_state & JOB_COMPLETING) state = JobState::kRunning;
  }
  slurm_free_job_info_msg(msg);
  return state;
}

Result<std::map<std::string, int64_t>> PoolLicenses(const std::string& licenses) {
  constexpr char kPrefix[] = "gpupool_";
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  std::map<std::string, int64_t> out;
  size_t start = 0;
  while (start <= licenses.size()) {
    size_t end = licenses.find(',', start);
    if (end == std::string::npos) end = licenses.size();
    std::string item = licenses.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    std::string name = item;
    int64_t count = 1;
    if (size_t colon = item.rfind(':'); colon != std::string::npos) {
      name = item.substr(0, colon);
      std::string digits = item.substr(colon + 1);
      if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(digits) > kMax) {
        return Status::InvalidArgument("bad licence count in '" + item + "' (Slurm's licences: '" + licenses + "')");
      }
      count = std::stoll(digits);
    }
    // A licence served by slurmdbd to several clusters reads NAME@SERVER.
    if (size_t at = name.find('@'); at != std::string::npos) name.resize(at);
    if (name.rfind(kPrefix, 0) != 0 || name.size() == sizeof(kPrefix) - 1) continue;
    int64_t& held = out[name.substr(sizeof(kPrefix) - 1)];
    held = std::min(kMax, held + count);  // both at most kMax: no overflow
  }
  return out;
}

Result<SlurmJobOwner> SlurmJobs::Owner(int64_t job_id) {
  std::string job = "job " + std::to_string(job_id);
  if (!initialised_) return Status::Unavailable("libslurm is not initialised");
  job_info_msg_t* msg = nullptr;
  if (slurm_load_job(&msg, static_cast<uint32_t>(job_id), SHOW_DETAIL) != SLURM_SUCCESS) {
    int err = slurm_get_errno();
    if (err == ESLURM_INVALID_JOB_ID) return Status::NotFound("slurmctld knows no " + job);
    return Status::Unavailable(std::string("slurmctld did not answer: ") + slurm_strerror(err));
  }
  Result<SlurmJobOwner> owner = Status::NotFound(job + " has ended");
  for (uint32_t i = 0; i < msg->record_count; ++i) {
    const slurm_job_info_t& j = msg->job_array[i];
    if (j.job_id != static_cast<uint32_t>(job_id)) continue;  // an array's other tasks
    uint32_t base = j.job_state & JOB_STATE_BASE;
    bool live =
        base == JOB_PENDING || base == JOB_RUNNING || base == JOB_SUSPENDED || (j.job_state & JOB_COMPLETING) != 0;
    if (live) {
      owner =
          SlurmJobOwner{static_cast<uid_t>(j.user_id), base != JOB_PENDING, j.licenses != nullptr ? j.licenses : ""};
    }
  }
  slurm_free_job_info_msg(msg);
  return owner;
}

}  // namespace gpupool::poold
