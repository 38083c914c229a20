--[[
harp's cli_filter: plain `sbatch` gets right-sized limits from harpd.

Install (docs/plugins.md): `CliFilterPlugins=cli_filter/lua` in slurm.conf and
this file, as cli_filter.lua, beside slurm.conf on every submit host.

Slurm runs this inside sbatch after it has merged #SBATCH lines, SBATCH_*
variables and the command line. harp's Python helper (`harp-filter`, part of
harp-submit) asks harpd and checks its answer with harp-submit's own code;
this file only moves data and applies the result:

  1. the merged options (sbatch's own JSON) go to a 0600 temp file made by
     os.tmpname(); the helper gets only that file's path on its command line,
     each word single-quoted, so no user text ever reaches /bin/sh;
  2. the helper prints `set<TAB>option<TAB>value` lines and a final `ok`;
     only a complete answer is applied, and only options and values that
     pass the checks below;
  3. after submission the job id goes to harpd (slurm_cli_post_submit).

It fails open: harpd down, a slow or broken helper, anything unexpected, and
the job is submitted exactly as written, with one `harp: ...` line.
Opt-outs as with harp-submit: HARP_DISABLE=1 in the environment, or a
`#HARP off` line in the script. Scripts piped on standard input are left
alone (sbatch has read them; harp cannot check them for `#HARP off`).
Users can bypass any cli_filter with their own SLURM_CONF: this is advice,
not enforcement.

Lua 5.1 to 5.3: Debian's Slurm 22.05 links liblua5.1; 25.11 and 26.05 built
from source (scripts/build-slurm) link liblua5.3, where the numbers Slurm
passes (offset, job id) are floats, so they are written with %d, never
tostring (which would give "0.0"). The entry points and the options table are
the same in 22.05, 25.11 and 26.05 (src/plugins/cli_filter/lua/cli_filter_lua.c).
--]]

-- Site settings ---------------------------------------------------------------

-- Commands that consult harp: any of "sbatch", "salloc", "srun" (comma-separated).
-- HARP_FILTER_COMMANDS in the environment overrides it. srun and salloc inside
-- an existing allocation (job steps) never consult harp.
local COMMANDS = "sbatch"

-- The helper command, as words separated by blanks (no word may contain one).
-- An absolute path saves a PATH search; HARP_FILTER_HELPER overrides it.
local HELPER = "harp-filter"

-- Seconds before the helper is killed. harpd's own deadline is HARP_TIMEOUT
-- (default 2 s); this bounds everything else (a hung interpreter, a slow disk).
-- A user or site that gives harpd longer (HARP_TIMEOUT) gets that plus this
-- margin, so the helper is never killed before harpd's own deadline.
local HELPER_TIMEOUT_S = 5
local HELPER_MARGIN_S = 3

-- Append a `{harp ...}` marker to the job's comment, which job_submit.lua moves
-- into AdminComment (and strips from the comment). Set to false when
-- job_submit.lua is not installed, or users will see the marker in their comment.
local MARK_JOBS = true

-- ------------------------------------------------------------------------------

local CHANGEABLE = {
    ["time"] = true, ["mem"] = true, ["mem-per-cpu"] = true, ["mem-per-gpu"] = true,
    ["cpus-per-task"] = true, ["gres"] = true, ["gpus"] = true, ["partition"] = true,
    ["nodes"] = true, ["ntasks-per-node"] = true,
}
local DISABLE_VALUES = { ["1"] = true, ["yes"] = true, ["true"] = true, ["on"] = true }

-- register payloads between pre_submit and post_submit, by het job offset
local pending = {}

local function say(text)
    slurm.log_info("harp: %s", text)
end

local function trim(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function enabled(command)
    local list = os.getenv("HARP_FILTER_COMMANDS") or COMMANDS
    for word in list:gmatch("[^,%s]+") do
        if word == command then return true end
    end
    return false
end

local function read_file(path)
    local fh = io.open(path, "rb")
    if not fh then return nil end
    local data = fh:read("*a")
    fh:close()
    return data
end

-- This process's pid and parent pid, from /proc/self/stat.
local function pids()
    local stat = read_file("/proc/self/stat") or ""
    local pid, ppid = stat:match("^(%d+) %(.*%) %S+ (%d+)")
    return pid, ppid
end

-- A JSON string (sbatch's argv may hold anything; bytes >= 0x80 pass as they are).
local function json_string(s)
    local escaped = s:gsub('[%c"\\]', function(c)
        if c == '"' then return '\\"' end
        if c == "\\" then return "\\\\" end
        return string.format("\\u%04x", c:byte())
    end)
    return '"' .. escaped .. '"'
end

local function json_list(items)
    local out = {}
    for i, v in ipairs(items) do out[i] = json_string(v) end
    return "[" .. table.concat(out, ",") .. "]"
end

local function shell_quote(word)
    return "'" .. word:gsub("'", "'\\''") .. "'"
end

-- HELPER_TIMEOUT_S, or HARP_TIMEOUT plus a margin when that is longer (whole
-- seconds; an unusable HARP_TIMEOUT is the helper's to report, not ours).
local function helper_timeout_s()
    local t = tonumber(os.getenv("HARP_TIMEOUT") or "")
    if t and t > 0 and t <= 3600 and t + HELPER_MARGIN_S > HELPER_TIMEOUT_S then
        return math.ceil(t + HELPER_MARGIN_S)
    end
    return HELPER_TIMEOUT_S
end

-- The helper's command line: fixed words plus arguments harp made itself.
local function helper_command(args)
    local words = {}
    for word in (os.getenv("HARP_FILTER_HELPER") or HELPER):gmatch("%S+") do
        words[#words + 1] = shell_quote(word)
    end
    for _, a in ipairs(args) do words[#words + 1] = shell_quote(a) end
    return "exec timeout -k 1 " .. tostring(helper_timeout_s()) .. " " .. table.concat(words, " ")
end

local function write_temp(data)
    local path = os.tmpname() -- mkstemp: a new 0600 file of this user
    local fh = io.open(path, "wb")
    if not fh then
        os.remove(path)
        return nil
    end
    fh:write(data)
    fh:close()
    return path
end

-- Run the helper on a request file; the parsed answer, or nil and a reason.
local function ask_helper(request)
    local path = write_temp(request)
    if not path then return nil, "cannot write a temporary file" end
    local pipe = io.popen(helper_command({ "--request", path }) .. " 2>&1", "r")
    local output = pipe and pipe:read("*a") or ""
    if pipe then pipe:close() end
    os.remove(path)
    local answer = { sets = {}, says = {}, ok = false, other = nil }
    for line in output:gmatch("[^\n]+") do
        local kind, rest = line:match("^(%a+)\t(.*)$")
        if kind == "set" then
            local name, value = rest:match("^([%a%-]+)\t([%w_:%-%.,=/+%%@%[%]]+)$")
            if not name or not CHANGEABLE[name] then
                return nil, "the helper sent an unusable setting"
            end
            answer.sets[#answer.sets + 1] = { name = name, value = value }
        elseif kind == "say" then
            answer.says[#answer.says + 1] = rest
        elseif kind == "mark" then
            answer.mark = rest
        elseif kind == "register" then
            answer.register = rest
        elseif line == "ok" then
            answer.ok = true
        elseif line ~= "harp-filter 1" and not answer.other then
            answer.other = line
        end
    end
    if not answer.ok and #answer.says == 0 then
        local why = answer.other and trim(answer.other):sub(1, 200) or "no answer"
        return nil, "harp-filter failed (" .. why .. ")"
    end
    return answer
end

-- Set every option or none: a value sbatch refuses clears the option, so the
-- old values are put back when one fails.
local function apply(options, sets)
    local done = {}
    for _, s in ipairs(sets) do
        local old = options[s.name]
        local ok = pcall(function() options[s.name] = s.value end)
        if not ok or options[s.name] == nil then
            for i = #done, 1, -1 do
                if done[i].old ~= nil then
                    pcall(function() options[done[i].name] = done[i].old end)
                end
            end
            if old ~= nil then pcall(function() options[s.name] = old end) end
            return false, s.name
        end
        done[#done + 1] = { name = s.name, old = old }
    end
    return true
end

-- slurmctld refuses a longer comment; job_submit.lua strips the marker before
-- that check, but without it the marker must never cost the user the job
local COMMENT_MAX = 1024

local function add_mark(options, mark)
    if not MARK_JOBS or not mark or mark == "" then return end
    mark = "{harp " .. mark:gsub("[{}]", "") .. "}"
    local comment = options["comment"]
    if comment and comment ~= "" then
        mark = comment .. " " .. mark
    end
    if #mark <= COMMENT_MAX then
        options["comment"] = mark
    end
end

local function pre_submit(options, offset)
    if offset ~= 0 then return end -- later components of a het job: left alone
    local command = options["type"] or trim(read_file("/proc/self/comm") or "")
    if not enabled(command) then return end
    if command ~= "sbatch" and os.getenv("SLURM_JOB_ID") then return end -- a step of a job
    if DISABLE_VALUES[trim(os.getenv("HARP_DISABLE") or ""):lower()] then return end
    local _, ppid = pids()
    if ppid and trim(read_file("/proc/" .. ppid .. "/comm") or "") == "harp-submit" then
        add_mark(options, "harp-submit") -- harp-submit decided already
        return
    end
    local comment = options["comment"]
    if comment and comment:match("^harp retry %d+ of ") then return end -- harpd's own resubmission
    local json = slurm.json_cli_options(options)
    if type(json) ~= "string" or json:sub(1, 1) ~= "{" then
        say("cannot read sbatch's options; submitting your job unchanged")
        return
    end
    local cmdline = {}
    for word in (read_file("/proc/self/cmdline") or ""):gmatch("([^%z]*)%z") do
        cmdline[#cmdline + 1] = word
    end
    local request = '{"v":1,"command":' .. json_string(command) .. ',"offset":' .. string.format("%d", offset)
        .. ',"cmdline":' .. json_list(cmdline) .. ',"options":' .. json .. '}'
    local answer, why = ask_helper(request)
    if not answer then
        say(why .. "; submitting your job unchanged")
        return
    end
    if not answer.ok then
        say(answer.says[1])
        return
    end
    local ok, failed = apply(options, answer.sets)
    if not ok then
        say("sbatch refused harp's --" .. failed .. "; submitting your job unchanged")
        return
    end
    for _, text in ipairs(answer.says) do say(text) end
    add_mark(options, answer.mark)
    pending[offset] = answer.register
end

local function post_submit(offset, job_id)
    local payload = pending[offset]
    pending[offset] = nil
    if not payload or not job_id then return end
    local path = write_temp(payload)
    if not path then return end
    -- in the background, so sbatch returns at once: the helper deletes the
    -- file as soon as it has read it, tells harpd, and is killed if it hangs
    local ok = os.execute("(" .. helper_command({ "--register", path, "--job-id", string.format("%d", job_id) })
        .. ") >/dev/null 2>&1 </dev/null &")
    if ok ~= 0 and ok ~= true then os.remove(path) end
end

-- Slurm's entry points: never an error, never a refused job ----------------------

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    local ok, err = pcall(pre_submit, options, offset)
    if not ok then
        say("internal error in cli_filter.lua (" .. tostring(err) .. "); submitting your job unchanged")
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    pcall(post_submit, offset, job_id)
    return slurm.SUCCESS
end
