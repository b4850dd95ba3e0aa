-- POST /v2/payment/order/create for a random user of 1..BENCH_USERS on the
-- general account (server_id 0), a fixed amount, each request with an
-- Idempotency-Key of its own, so that every request takes the key path (the
-- key's lookup finds nothing) and creates an order. A key is unique across
-- the threads (request count * threads + thread, as in complete.lua) and the
-- rounds (BENCH_ROUND), shaped like a UUID; its first part is the count
-- scattered (index * a large prime), as a client's random keys would be.
dofile(os.getenv("BENCH_WRK_DIR") .. "/report.lua")
local users = tonumber(os.getenv("BENCH_USERS"))
local round = tonumber(os.getenv("BENCH_ROUND"))
local nthreads = tonumber(os.getenv("BENCH_THREADS"))
local prime = 1000003
local token = "Bearer " .. os.getenv("BENCH_TOKEN")
local counter = 0

function init(args)
  math.randomseed(os.time() * 1000 + tid)
end

function request()
  local g = counter * nthreads + tid
  counter = counter + 1
  local headers = {
    ["Authorization"] = token,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = string.format("%012d-0000-4000-8000-%08d", (g * prime) % 1e12, round),
  }
  local body = string.format(
    '{"user_id":%d,"server_id":0,"amount":"10.25","payment_system":"cstm:benchpay"}',
    math.random(1, users))
  return wrk.format("POST", "/v2/payment/order/create", headers, body)
end

-- A creation answers 201: counted with the 200s of report.lua.
local count = response
function response(status, headers, body)
  if status == 201 then
    c200 = c200 + 1
  else
    count(status, headers, body)
  end
end
