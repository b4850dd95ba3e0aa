-- POST /v2/payment/order/complete, each request a different pending order.
-- Orders BENCH_ORDER_BASE+1 .. BENCH_ORDER_BASE+BENCH_POOL are pending; the
-- threads walk a permutation of them (index * a large prime mod pool), so
-- every request is a distinct order, scattered over the table, until the
-- pool is exhausted (then the walk wraps and answers 409).
-- With BENCH_RATE (requests a second, all threads together) each thread
-- sends its share on a fixed schedule, a steady load instead of saturation
-- (the connections must outnumber the rate times the latency).
dofile(os.getenv("BENCH_WRK_DIR") .. "/report.lua")
local base = tonumber(os.getenv("BENCH_ORDER_BASE"))
local pool = tonumber(os.getenv("BENCH_POOL"))
local nthreads = tonumber(os.getenv("BENCH_THREADS"))
local prime = 1000003
local headers = {
  ["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN"),
  ["Content-Type"] = "application/json",
}
local counter = 0

function request()
  local g = counter * nthreads + tid
  counter = counter + 1
  local n = base + (g * prime) % pool + 1
  local body = string.format(
    '{"payment_system":"cstm:benchpay","order_id":"Order:%010d","payment_id":"bench_%d"}', n, g)
  return wrk.format("POST", "/v2/payment/order/complete", headers, body)
end

local rate = tonumber(os.getenv("BENCH_RATE") or "")
if rate then
  local ffi = require("ffi")
  ffi.cdef[[
    typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
    int clock_gettime(int clock, bench_timespec *now);
  ]]
  local now = ffi.new("bench_timespec")
  local function now_ms() -- CLOCK_MONOTONIC
    ffi.C.clock_gettime(1, now)
    return tonumber(now.tv_sec) * 1e3 + tonumber(now.tv_nsec) / 1e6
  end
  local interval = 1000 * nthreads / rate
  local start, scheduled
  -- Called before each request: the wait until its turn.
  function delay()
    local t = now_ms()
    if not start then
      start, scheduled = t, 0
    end
    local due = start + scheduled * interval
    scheduled = scheduled + 1
    return math.max(0, math.floor(due - t))
  end
end
