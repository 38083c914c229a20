--[[
harp's job_submit plugin: label the jobs harp advised in AdminComment.

Install (docs/plugins.md): `JobSubmitPlugins=lua` in slurm.conf and this file,
as job_submit.lua, beside slurm.conf on the slurmctld host.

What it recognises (and nothing here can refuse, delay or change a job's
resources: every function returns slurm.SUCCESS, all work runs under pcall):

  * a `{harp ...}` marker at the end of the comment, appended by harp's
    cli_filter (plugins/cli_filter.lua): it is removed again, so the comment
    is exactly what the user wrote, and AdminComment gets
    `harp: cli_filter time=00:50:00>00:07:00 ...` (what harp changed, old>new),
    `harp: cli_filter kept` (harp was asked and kept the request), or
    `harp: harp-submit` (submitted through harp-submit);
  * a comment `harp retry N of CHAIN` (harpd's recovery resubmitting a job
    that ran out): AdminComment gets `harp: retry N of CHAIN`, the comment stays.

The label is INFORMATIONAL ONLY. The marker comes from the submitting
user's side (the cli_filter runs in the user's sbatch), so a user can write
one by hand; AdminComment only keeps users from editing the label
afterwards. What harp actually decided is recorded by harpd (registrations
in its store, `harp report`), not here.
--]]

local MARKER = "^(.-) ?{harp ([^{}]*)}$"

local function label_of(comment)
    if type(comment) ~= "string" then return nil, nil end
    local user, what = comment:match(MARKER)
    if what then return "harp: " .. what, user end
    local retry = comment:match("^harp (retry %d+ of %S+)")
    if retry then return "harp: " .. retry, nil end
    return nil, nil
end

local function mark(job_desc)
    local label, user_comment = label_of(job_desc.comment)
    if not label then return end
    if user_comment then
        -- back to the user's own comment ("" clears it, as when none was given)
        job_desc.comment = user_comment
    end
    local admin = job_desc.admin_comment
    if type(admin) == "string" and admin ~= "" then
        job_desc.admin_comment = admin .. "; " .. label
    else
        job_desc.admin_comment = label
    end
    slurm.log_debug("harp: job %s of uid %s: %s", tostring(job_desc.name), tostring(job_desc.user_id), label)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, err = pcall(mark, job_desc)
    if not ok then
        pcall(slurm.log_info, "harp job_submit.lua: %s (job left as submitted)", tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
