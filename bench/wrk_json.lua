-- wrk script: prints the run's totals and latency percentiles as one JSON line.
-- With WRK_BODY set in the environment, every request is a POST of that JSON body.
local body = os.getenv("WRK_BODY")
if body ~= nil and body ~= "" then
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

-- With WRK_RANDOM_ROUTES="<groups>,<topics>", every request reads the route of a random
-- topic T<g>_<i> (g < groups, i < topics), as bench/changing_reads.py seeds them.
local random_routes = os.getenv("WRK_RANDOM_ROUTES")
if random_routes ~= nil and random_routes ~= "" then
  local groups, per_group = string.match(random_routes, "^(%d+),(%d+)$")
  groups, per_group = tonumber(groups), tonumber(per_group)
  request = function()
    return wrk.format("GET", "/v1/routes/T" .. math.random(0, groups - 1) .. "_" .. math.random(0, per_group - 1))
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
