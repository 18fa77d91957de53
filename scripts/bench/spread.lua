-- Appends spread over many streams, each request to one of STREAMS
-- streams `/bench/<PREFIX>-<n>` (created beforehand) picked at random:
-- one small text message, or with BATCH=<n> a JSON batch of n messages
-- under an idempotent producer of its own (id unique per run, thread and
-- request, epoch 0, seq 0, as batch.lua; RUN names the run, the time by
-- default), so no stream reaches its producer limit within a run.
local streams = tonumber(os.getenv("STREAMS") or "10000")
local prefix = os.getenv("PREFIX") or "m"
local size = tonumber(os.getenv("BATCH") or "0")
local run = os.getenv("RUN") or tostring(os.time())
local counter = 0
local thread_id = 0
local body = "hello, eddy"
if size > 0 then
  local batch = {}
  for i = 1, size do batch[i] = '{"n":' .. i .. ',"payload":"abcdefghijklmnopqrstuvwxyz"}' end
  body = "[" .. table.concat(batch, ",") .. "]"
end

function setup(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end

function request()
  counter = counter + 1
  local path = "/bench/" .. prefix .. "-" .. math.random(0, streams - 1)
  if size == 0 then
    return wrk.format("POST", path, { ["Content-Type"] = "text/plain" }, body)
  end
  return wrk.format("POST", path, {
    ["Content-Type"] = "application/json",
    ["Producer-Id"] = "p-" .. run .. "-" .. tostring(tid) .. "-" .. counter,
    ["Producer-Epoch"] = "0",
    ["Producer-Seq"] = "0",
  }, body)
end
