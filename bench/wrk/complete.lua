-- POST /v2/payment/order/complete, each request a different pending order.
-- Orders BENCH_ORDER_BASE+1 .. BENCH_ORDER_BASE+BENCH_POOL are pending; the
-- threads walk a permutation of them (index * a large prime mod pool), so
-- every request is a distinct order, scattered over the table, until the
-- pool is exhausted (then the walk wraps and answers 409).
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
