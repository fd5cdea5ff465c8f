-- wrk script: prints the run's totals and latency percentiles as one JSON line.
-- With WRK_BODY set in the environment, every request is a POST of that JSON body.
local body = os.getenv("WRK_BODY")
if body ~= nil and body ~= "" then
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

-- With WRK_ROUTES="random,<n>" every request reads the route of a random topic T<i>
-- (i < n); with "sequential,<n>" of T0, T1, ... in turn (one pass fills a cache).
local routes = os.getenv("WRK_ROUTES")
if routes ~= nil and routes ~= "" then
  local order, n = string.match(routes, "^(%a+),(%d+)$")
  n = tonumber(n)
  local next_i = -1
  request = function()
    local i
    if order == "sequential" then
      next_i = (next_i + 1) % n
      i = next_i
    else
      i = math.random(0, n - 1)
    end
    return wrk.format("GET", "/v1/routes/T" .. i)
  end
end

-- With WRK_PIPELINE=<n> (n > 1) each connection writes n requests at once and reads their
-- n answers (HTTP/1.1 pipelining), as a loader keeping n requests in flight does.
local depth = tonumber(os.getenv("WRK_PIPELINE") or "")
if depth ~= nil and depth > 1 then
  local batch
  init = function(args)
    local r = {}
    for i = 1, depth do
      r[i] = wrk.format()
    end
    batch = table.concat(r)
  end
  request = function()
    return batch
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
