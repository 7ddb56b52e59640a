// slurmstepd (remote context): every step of a job that asked for pool GPUs, including the
// extern and batch steps, on every node.
//
// At init_post_opt (root) the step acquires the job's lease. gpupoold's acquire is
// idempotent per job id, so whichever step asks first creates the lease (normally the
// extern step, at job start) and every later step on every node gets the same one: one
// lease per job, however many nodes and steps. We acquire as root on behalf of the job's
// owner ("uid"/"user" in the request) because this callback runs as root, before the step
// drops privileges, and so that the lease and its token belong to the user, who can see
// and release it.
//
// Failure never drains: init_post_opt returns 0 whatever happens and records the reason;
// task_init, which runs in each task just before exec, prints it to the task's stderr
// (the job's output) and ends the task with exit code 1. That fails the job (or the srun
// step) and nothing else.
//
// One step per job and node also runs a LeaseWatcher (renewal and swaps): the batch step
// of a batch job, else the extern step, which adopts the lease from the lease file (it
// never sees the job's options itself). Requires PrologFlags=Contain for jobs without a
// batch step (salloc, srun), whose leases would otherwise go unrenewed between steps.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/auth.h"
#include "spank/lease_service.h"
#include "spank/profile.h"
#include "spank/plugin_state.h"

extern "C" {
#include <slurm/slurm.h>
}

namespace gpupool::spank {
namespace {

struct StepInfo {
  uint32_t job_id = 0;
  uint32_t step_id = 0;
  uint32_t node_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

Result<StepInfo> GetStepInfo(spank_t sp) {
  StepInfo s;
  if (spank_get_item(sp, S_JOB_ID, &s.job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &s.step_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &s.uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &s.gid) != ESPANK_SUCCESS) {
    return Status::Internal("cannot read the job's id and owner from Slurm");
  }
  if (spank_get_item(sp, S_JOB_NODEID, &s.node_id) != ESPANK_SUCCESS) s.node_id = 0;
  return s;
}

std::string StepName(uint32_t step_id) {
  if (step_id == SLURM_EXTERN_CONT) return "extern";
  if (step_id == SLURM_BATCH_SCRIPT) return "batch";
  if (step_id == SLURM_INTERACTIVE_STEP) return "interactive";
  return std::to_string(step_id);
}

// The node's name, for the watcher lock: several slurmd may share a machine (the dev
// cluster), so the host name is not enough. The job environment of the extern and batch
// steps carries the right SLURMD_NODENAME (srun steps inherit the batch node's, which is
// why they never take the lock).
std::string NodeName(spank_t sp) {
  char buf[256];
  if (spank_getenv(sp, "SLURMD_NODENAME", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] != '\0') {
    return buf;
  }
  if (gethostname(buf, sizeof(buf)) == 0) {
    buf[sizeof(buf) - 1] = '\0';
    return buf;
  }
  return "node";
}

// slurm_notify_job comes from the slurmstepd process (libslurmfull); looking it up at run
// time keeps the plugin free of a second, conflicting copy of libslurm.
void NotifyJob(uint32_t job_id, const std::string& message) {
  using NotifyFn = int (*)(uint32_t, char*);
  auto fn = reinterpret_cast<NotifyFn>(dlsym(RTLD_DEFAULT, "slurm_notify_job"));
  if (fn == nullptr) {
    slurm_error("gpupool: slurm_notify_job is not available in this process");
    return;
  }
  std::string copy = message;
  if (fn(job_id, copy.data()) != 0) {
    slurm_error("gpupool: slurm_notify_job(%u) failed", job_id);
  }
}

// Puts the reason a job got no GPUs where `scontrol show job` shows it (AdminComment=),
// besides the job's output. Best effort: the task failure is what counts.
void RecordFailureOnJob(uint32_t job_id, const std::string& message) {
  using InitFn = void (*)(job_desc_msg_t*);
  using UpdateFn = int (*)(job_desc_msg_t*);
  auto init = reinterpret_cast<InitFn>(dlsym(RTLD_DEFAULT, "slurm_init_job_desc_msg"));
  auto update = reinterpret_cast<UpdateFn>(dlsym(RTLD_DEFAULT, "slurm_update_job"));
  if (init == nullptr || update == nullptr) return;
  job_desc_msg_t desc;
  init(&desc);
  desc.job_id = job_id;
  std::string text = message;
  desc.admin_comment = text.data();
  if (update(&desc) != 0) slurm_verbose("gpupool: cannot set AdminComment of job %u", job_id);
}

std::string DescribeSwap(const Lease& before, const Lease& after) {
  std::string moved;
  for (size_t i = 0; i < after.gpus.size(); ++i) {
    std::string old = i < before.gpus.size() ? before.gpus[i].id : "-";
    if (old != after.gpus[i].id) {
      if (!moved.empty()) moved += ", ";
      moved += "device " + std::to_string(i) + ": " + old + " -> " + after.gpus[i].id;
    }
  }
  return "gpupool: lease " + after.id + " generation " + std::to_string(after.generation) + " (" + after.state +
         "): " + (moved.empty() ? "GPUs unchanged" : moved) + "; GPUPOOL_LEASE_FILE is updated";
}

std::unique_ptr<LeaseWatcher> MakeWatcher(spank_t sp, const PluginConfig& config, const StepInfo& step) {
  LeaseWatcher::Options w;
  w.config = config;
  w.job_id = step.job_id;
  w.lease_file = LeaseFilePath(config.lease_dir, step.job_id);
  w.lock_path = config.lease_dir + "/job" + std::to_string(step.job_id) + "." + NodeName(sp) + ".lock";
  w.uid = step.uid;
  w.gid = step.gid;
  // One notification per job: from the watcher on the job's first node. A swap is news,
  // not an error, and must not read as one. The batch step's slurmstepd writes its log
  // lines of level error and above to the job's stderr, so slurm_spank_log (error level,
  // without the "error: " prefix) puts the notice there as a plain line. Any other
  // watcher (the extern step of an srun or salloc job) sends it with slurm_notify_job,
  // which srun and salloc print as information; for a batch job the same call would
  // come back through slurmstepd's error() as "error: gpupool: ...".
  bool notify = config.notify && step.node_id == 0;
  bool in_batch_step = step.step_id == SLURM_BATCH_SCRIPT;
  w.on_swap = [notify, in_batch_step, job_id = step.job_id](const Lease& before, const Lease& after) {
    std::string message = DescribeSwap(before, after);
    if (notify && in_batch_step) {
      slurm_spank_log("%s", message.c_str());
      return;
    }
    slurm_info("job %u: %s", job_id, message.c_str());
    if (notify) NotifyJob(job_id, message);
  };
  w.log_info = [](const std::string& m) { slurm_info("gpupool: %s", m.c_str()); };
  w.log_error = [](const std::string& m) { slurm_error("gpupool: %s", m.c_str()); };
  return std::make_unique<LeaseWatcher>(std::move(w));
}

// The extern step lives as long as the job on every node but never sees the job's
// options (Slurm does not pass them to it): it watches on standby and adopts the lease
// when a step of the job writes the lease file, so interactive jobs (salloc, srun) stay
// renewed between steps. For a job without pool GPUs this costs one stat() per interval.
void StartStandbyWatcher(spank_t sp, int ac, char** av, const StepInfo& step) {
  Result<PluginConfig> config = LoadPluginConfig(ac, av);
  if (!config.ok()) return;  // reported to users who ask for GPUs, by their own steps
  State().watcher = MakeWatcher(sp, *config, step);
  State().watcher->StartStandby();
}

// Everything that can fail, in order; returns the reason for the user, or OK.
Status SetUpStep(spank_t sp, int ac, char** av, const StepInfo& step) {
  PluginState& st = State();
  Result<JobRequest> request = ParseJobRequest(st.options);
  if (!request.ok()) return request.status();
  Result<PluginConfig> config = LoadPluginConfig(ac, av);
  if (!config.ok()) return config.status();
  Result<Profile> profile = LoadProfile(ProfilePath(*config));
  if (!profile.ok()) return profile.status();

  auto current = [sp](const std::string& name) -> std::string {
    char buf[8192];
    if (spank_getenv(sp, name.c_str(), buf, sizeof(buf)) != ESPANK_SUCCESS) return "";
    return buf;
  };
  LeaseService service(*config);
  nlohmann::json body = AcquireBody(*request, step.job_id, step.uid, auth::UserName(step.uid), config->ttl_s,
                                    ProcessesFollowMoves(*profile, current));
  bool created = false;
  auto t0 = std::chrono::steady_clock::now();
  Result<Lease> lease = service.Acquire(body, &created);
  double acquire_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!lease.ok()) return Status::Unavailable("cannot lease GPUs: " + lease.status().message());
  slurm_verbose("gpupool: job %u step %s: lease %s generation %lld (%s) in %.1f ms", step.job_id,
                StepName(step.step_id).c_str(), lease->id.c_str(), static_cast<long long>(lease->generation),
                created ? "created" : "existing", acquire_ms);

  // The batch step watches its job's lease. It takes the watcher lock before the lease
  // file exists: the extern step on this node adopts a lease once its file appears and
  // the lock is free, and its notices would reach a batch job only through
  // slurm_notify_job (see MakeWatcher).
  if (step.step_id == SLURM_BATCH_SCRIPT) {
    std::unique_ptr<LeaseWatcher> watcher = MakeWatcher(sp, *config, step);
    if (watcher->StartActive(*lease)) State().watcher = std::move(watcher);
  }

  std::string lease_file = LeaseFilePath(config->lease_dir, step.job_id);
  Result<int64_t> on_disk = ReadLeaseFileGeneration(lease_file);
  if (!on_disk.ok() || *on_disk < lease->generation) {
    GPUPOOL_RETURN_IF_ERROR(WriteLeaseFile(lease_file, *lease, step.uid, step.gid));
  }

  EnvList env = BaseEnvironment(*lease, config->server, lease_file);
  ProfileContext pc;
  pc.lease = &lease.value();
  pc.job_id = step.job_id;
  pc.lib_dir = config->lib_dir;
  pc.lease_file = lease_file;
  pc.server = config->server;
  pc.current = current;
  Result<EnvList> profile_env = RenderProfile(*profile, pc);
  if (!profile_env.ok()) return profile_env.status();
  env.insert(env.end(), profile_env->begin(), profile_env->end());
  for (const auto& [name, value] : env) {
    if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS) {
      return Status::Internal("cannot set " + name + " in the step's environment");
    }
  }

  return Status::OK();
}

}  // namespace

int StepInitPostOpt(spank_t sp, int ac, char** av) {
  PluginState& st = State();
  ReadOptionsFromJobEnvironment(sp);
  Result<StepInfo> step = GetStepInfo(sp);
  if (!st.options.any()) {
    if (step.ok() && step->step_id == SLURM_EXTERN_CONT) StartStandbyWatcher(sp, ac, av, *step);
    return 0;
  }
  if (!step.ok()) {
    st.step_error = "gpupool: " + step.status().message();
    slurm_error("%s", st.step_error.c_str());
    return 0;
  }
  Status s = SetUpStep(sp, ac, av, *step);
  if (!s.ok()) {
    st.step_error = "gpupool: job " + std::to_string(step->job_id) + ": " + s.message();
    slurm_error("%s (step %s)", st.step_error.c_str(), StepName(step->step_id).c_str());
    RecordFailureOnJob(step->job_id, st.step_error);
  }
  return 0;
}

// The site lets jobs with pool GPUs catch writes to their own memory, kernel's included
// (plugstack.conf userfaultfd=yes): the task gets a descriptor of /dev/userfaultfd, opened
// here as root and kept open across exec, and its number in GPUPOOL_USERFAULTFD. The
// remoting library makes its userfaultfd with it (USERFAULTFD_IOC_NEW acts on the caller's
// own memory), for copy-on-write snapshots of uploads instead of copies. Only tasks of
// steps that lease pool GPUs get one; CPU-only steps and a step whose set-up failed do not.
// A failure to open it is logged: the library copies instead.
void StepTaskInitPrivileged(spank_t sp, int ac, char** av) {
  const PluginState& st = State();
  if (!st.options.any() || !st.step_error.empty()) return;
  Result<PluginConfig> config = LoadPluginConfig(ac, av);
  if (!config.ok() || !config->userfaultfd) return;
  int device = open("/dev/userfaultfd", O_RDWR);  // no O_CLOEXEC: the task's program needs it
  if (device < 0) {
    slurm_info("gpupool: userfaultfd=yes, but /dev/userfaultfd: %m (Linux 6.1 or later): uploads are copied");
    return;
  }
  if (spank_setenv(sp, "GPUPOOL_USERFAULTFD", std::to_string(device).c_str(), 1) != ESPANK_SUCCESS) {
    slurm_info("gpupool: cannot set GPUPOOL_USERFAULTFD in the task's environment");
    close(device);
  }
}

int StepTaskInit(spank_t sp) {
  const std::string& error = State().step_error;
  if (error.empty()) return 0;
  // This runs in the task's own process just before exec: its stderr is the job's.
  std::fprintf(stderr, "%s\n", error.c_str());
  std::fflush(stderr);
  // Slurm ignores the return code of plugins listed as "optional"; a job that asked for
  // pool GPUs must not run without them either way, so the task ends here.
  _exit(1);
}

int StepExit(spank_t sp) {
  PluginState& st = State();
  if (st.watcher) {
    st.watcher->Stop();
    st.watcher.reset();
  }
  return 0;
}

}  // namespace gpupool::spank
