-- Batched JSON appends of 100 messages, each request a new idempotent
-- producer (id unique per thread and request, epoch 0, seq 0), so
-- concurrent connections never race on one producer's sequence.
local counter = 0
local thread_id = 0
local batch = {}
for i = 1, 100 do batch[i] = '{"n":' .. i .. ',"payload":"abcdefghijklmnopqrstuvwxyz"}' end
local body = "[" .. table.concat(batch, ",") .. "]"

function setup(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end

function request()
  counter = counter + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Producer-Id"] = "p-" .. tostring(tid) .. "-" .. counter,
    ["Producer-Epoch"] = "0",
    ["Producer-Seq"] = "0",
  }, body)
end
