-- wrk script for naiad's benchmarks: POST a fixed V2 infer body read from the file
-- $NAIAD_BENCH_BODY on keep-alive connections. $NAIAD_BENCH_HEADER_LEN, when set, is the
-- Inference-Header-Content-Length of a binary-tensor body. At the end it prints one
-- machine-readable line: "BENCHJSON {...}".
local path = os.getenv("NAIAD_BENCH_BODY")
local f = assert(io.open(path, "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
local hlen = os.getenv("NAIAD_BENCH_HEADER_LEN")
if hlen and hlen ~= "" then
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = hlen
else
  wrk.headers["Content-Type"] = "application/json"
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
