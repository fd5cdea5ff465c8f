-- wrk script: prints the run's totals and latency percentiles as one JSON line.
-- With WRK_BODY set in the environment, every request is a POST of that JSON body.
local body = os.getenv("WRK_BODY")
if body ~= nil and body ~= "" then
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
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
