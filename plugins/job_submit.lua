function slurm_job_submit(job_desc, part_list, submit_uid)
  local f = io.open("/tmp/harp-probe-js.txt", "a")
  f:write("comment=", tostring(job_desc.comment), " admin=", tostring(job_desc.admin_comment), " time=", tostring(job_desc.time_limit), "\n")
  local env = job_desc.environment
  f:write("envtype=", type(env), " HARP=", tostring(env and env.HARP_TEST), "\n")
  f:write("script=", tostring(job_desc.script):sub(1,40), "\n")
  f:close()
  job_desc.admin_comment = "probe-set"
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
