--[[
job_submit.lua: gpupool's server-side submit filter (Slurm job_submit/lua).

Install beside slurm.conf (Slurm loads <dir of slurm.conf>/job_submit.lua) and set
JobSubmitPlugins=lua. It turns the SPANK option a user writes,
    --gpu-pool=a100:2[,h100:1]
into what Slurm schedules with:
  * cluster licenses gpupool_<pool>:<count>: the job waits (Reason=Licenses) while the
    pool has fewer usable GPUs than it asks for; capacity-publisher keeps the license
    totals equal to gpupoold's usable counts;
  * the per-node GRES gpupool:<sum of counts>: a node drives all of a job's pool GPUs,
    so it must allow that many (Gres=gpupool:N in slurm.conf).
Because this runs in slurmctld, users cannot skip it: gpupool_* licenses given by hand
(-L) are refused for everyone but root, and a request larger than a whole pool is
refused at submit with a message. Pool totals come from the file gpupool_pools beside
this script ("POOL TOTAL" lines, written by capacity-publisher or scripts/devcluster).
See man/gpupool-gres.8.
--]]

local LICENSE_PREFIX = "gpupool_"
-- What the spank_gpupool plugin's --gpu-pool option becomes in the job's spank env.
local OPTION_VAR = "_SLURM_SPANK_OPTION_gpupool_gpu_pool"
-- A pool name as gpupool.conf(5) allows it: letters, digits, '_', '.', '-'.
local POOL_NAME = "[%w_%.%-]+"

local function script_dir()
  local source = debug.getinfo(1, "S").source
  return (source:match("^@(.*)/[^/]*$")) or "."
end

-- { pool = total } from gpupool_pools, or nil and the reason.
local function read_pool_totals()
  local path = script_dir() .. "/gpupool_pools"
  local f, err = io.open(path, "r")
  if not f then return nil, "cannot read " .. path .. ": " .. tostring(err) end
  local totals = {}
  for line in f:lines() do
    local name, total = line:match("^%s*(" .. POOL_NAME .. ")%s+(%d+)%s*$")
    if name then totals[name] = tonumber(total) end
  end
  f:close()
  return totals
end

-- The --gpu-pool value of the job, or nil. spank_job_env is filled by sbatch, salloc
-- and srun; a batch job's environment carries it too.
local function gpu_pool_option(job_desc)
  local env = job_desc.spank_job_env
  if env ~= nil then
    for _, entry in pairs(env) do
      local value = entry:match("^" .. OPTION_VAR .. "=(.*)$")
      if value ~= nil then return value end
    end
  end
  local environment = job_desc.environment
  if environment ~= nil then
    local value = environment[OPTION_VAR]
    if value ~= nil then return value end
  end
  return nil
end

-- "a100:2,h100:1" → { {pool="a100",count=2}, ... }, or nil and a message.
local function parse_request(text)
  local request, seen = {}, {}
  if text == nil or text == "" or text == "(null)" then
    return nil, "--gpu-pool needs POOL:COUNT[,POOL:COUNT...]"
  end
  for item in (text .. ","):gmatch("([^,]*),") do
    local pool, count = item:match("^(" .. POOL_NAME .. "):(%d+)$")
    if pool == nil then
      return nil, string.format("--gpu-pool: '%s' is not POOL:COUNT", item)
    end
    count = tonumber(count)
    if count < 1 then
      return nil, string.format("--gpu-pool: count for pool '%s' must be at least 1", pool)
    end
    if seen[pool] then
      return nil, string.format("--gpu-pool: pool '%s' is given twice", pool)
    end
    seen[pool] = true
    table.insert(request, { pool = pool, count = count })
  end
  return request
end

-- Splits a license list into the gpupool ones and the rest (kept as given).
local function split_licenses(licenses)
  local ours, others = {}, {}
  if licenses == nil or licenses == "" then return ours, others end
  for item in (licenses .. ","):gmatch("([^,;]*)[,;]") do
    if item ~= "" then
      if item:sub(1, #LICENSE_PREFIX) == LICENSE_PREFIX then
        table.insert(ours, item)
      else
        table.insert(others, item)
      end
    end
  end
  return ours, others
end

-- Drops gres:gpupool entries from a tres_per_node string, keeps the rest.
local function other_gres(gres)
  local kept = {}
  if gres == nil or gres == "" then return kept end
  for item in (gres .. ","):gmatch("([^,]*),") do
    if item ~= "" and not item:match("^gres[:/]gpupool") and not item:match("^gpupool") then
      table.insert(kept, item)
    end
  end
  return kept
end

local function reject(message)
  slurm.log_user("gpupool: %s", message)
  slurm.log_info("gpupool job_submit: rejected: %s", message)
  return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local option = gpu_pool_option(job_desc)
  local ours, others = split_licenses(job_desc.licenses)

  if option == nil then
    if #ours > 0 and submit_uid ~= 0 then
      return reject("licenses " .. table.concat(ours, ",") ..
        " are managed by gpupool; ask with --gpu-pool=POOL:COUNT instead of -L")
    end
    return slurm.SUCCESS
  end

  local request, err = parse_request(option)
  if request == nil then return reject(err) end

  local totals, why = read_pool_totals()
  if totals == nil then
    slurm.log_error("gpupool job_submit: %s", why)
    return reject("pool sizes are unknown to the scheduler (" .. why .. "); tell your admin")
  end

  local per_node = 0
  for _, r in ipairs(request) do
    local total = totals[r.pool]
    if total == nil then
      local names = {}
      for name, _ in pairs(totals) do table.insert(names, name) end
      table.sort(names)
      return reject(string.format("no pool '%s' (pools: %s)", r.pool, table.concat(names, ", ")))
    end
    if r.count > total then
      return reject(string.format("pool '%s' has %d GPUs, %d requested", r.pool, total, r.count))
    end
    table.insert(others, string.format("%s%s:%d", LICENSE_PREFIX, r.pool, r.count))
    per_node = per_node + r.count
  end

  job_desc.licenses = table.concat(others, ",")
  local gres = other_gres(job_desc.gres)
  -- Setting "gres" takes the tres_per_node syntax without the "gres:" prefix.
  for i, item in ipairs(gres) do gres[i] = item:gsub("^gres[:/]", "") end
  table.insert(gres, string.format("gpupool:%d", per_node))
  job_desc.gres = table.concat(gres, ",")
  slurm.log_debug("gpupool job_submit: --gpu-pool=%s → licenses=%s gres=%s",
    option, job_desc.licenses, job_desc.gres)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local ours, _ = split_licenses(job_desc.licenses)
  if #ours > 0 and modify_uid ~= 0 then
    return reject("licenses " .. table.concat(ours, ",") ..
      " are managed by gpupool and cannot be changed by scontrol update")
  end
  return slurm.SUCCESS
end

slurm.log_info("gpupool job_submit.lua loaded")
return slurm.SUCCESS
