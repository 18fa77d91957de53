-- Long-poll readers churning over many streams: each request waits on
-- one of STREAMS streams `/bench/<PREFIX>-<n>` (created beforehand),
-- picked at random, from its tail (`offset=now`), and the next request
-- goes to another stream once it answers (data or the timeout's 204).
local streams = tonumber(os.getenv("STREAMS") or "10000")
local prefix = os.getenv("PREFIX") or "m"

function request()
  local path = "/bench/" .. prefix .. "-" .. math.random(0, streams - 1)
  return wrk.format("GET", path .. "?offset=now&live=long-poll")
end
