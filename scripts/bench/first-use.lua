-- Appends spread over many streams, each created by a PUT on first use
-- (per-session or per-entity streams): each request picks one of STREAMS
-- streams `/bench/<PREFIX>-<RUN>-<n>` at random (RUN names the run, the
-- time by default, so each run starts with no stream); the first request
-- to a stream creates it (`PUT`, text/plain, no body), later ones append
-- one small text message (`POST`). A stream created within the last
-- SETTLE requests (1024) is created again rather than appended to (an
-- idempotent `PUT`), so no append can overtake its stream's create on
-- another connection.
local streams = tonumber(os.getenv("STREAMS") or "10000")
local prefix = os.getenv("PREFIX") or "f"
local run = os.getenv("RUN") or tostring(os.time())
local settle = tonumber(os.getenv("SETTLE") or "1024")
local created = {}
local counter = 0
local body = "hello, eddy"

-- wrk calls `request` once in the first thread's state to check the
-- request, and never sends what that call returns: the first call of a
-- state creates a stream no later request names, so no stream counts as
-- created by a PUT that was never sent (its appends answered 404).
local checked = false

function request()
  if not checked then
    checked = true
    return wrk.format("PUT", "/bench/" .. prefix .. "-" .. run .. "-check", { ["Content-Type"] = "text/plain" })
  end
  counter = counter + 1
  local n = math.random(0, streams - 1)
  local path = "/bench/" .. prefix .. "-" .. run .. "-" .. n
  local at = created[n]
  if at == nil or counter - at < settle then
    if at == nil then created[n] = counter end
    return wrk.format("PUT", path, { ["Content-Type"] = "text/plain" })
  end
  return wrk.format("POST", path, { ["Content-Type"] = "text/plain" }, body)
end
