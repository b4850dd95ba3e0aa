-- Shared by the wrk scripts of bench/run: counts responses by status in
-- every thread and prints one machine-readable RESULT line at the end.
-- Loaded with dofile() by each script (path in BENCH_WRK_DIR).

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

c200, c409, cother = 0, 0, 0

function response(status, headers, body)
  if status == 200 then
    c200 = c200 + 1
  elseif status == 409 then
    c409 = c409 + 1
  else
    cother = cother + 1
    if cother <= 3 then
      io.stderr:write("unexpected status " .. status .. ": " .. (body or "") .. "\n")
    end
  end
end

function done(summary, latency, requests)
  local s200, s409, sother = 0, 0, 0
  for _, t in ipairs(threads) do
    s200 = s200 + t:get("c200")
    s409 = s409 + t:get("c409")
    sother = sother + t:get("cother")
  end
  local e = summary.errors
  -- The latency distribution as 1000 quantiles (0.1 %, 0.2 %, ..., 100 %),
  -- so that bench/report.py can merge the rounds of one target.
  local q = {}
  for i = 1, 1000 do
    q[i] = latency:percentile(i / 10)
  end
  io.write(string.format(
    'RESULT {"requests":%d,"duration_us":%d,"rps":%.1f,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"status_200":%d,"status_409":%d,"status_other":%d,"err_connect":%d,"err_read":%d,"err_write":%d,"err_timeout":%d,' ..
    '"q":[%s]}\n',
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    s200, s409, sother, e.connect, e.read, e.write, e.timeout, table.concat(q, ",")))
end
