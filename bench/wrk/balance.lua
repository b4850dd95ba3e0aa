-- GET /v2/master-account/balance for a random user of 1..BENCH_USERS on the
-- general account (server_id 0), with the bench token.
dofile(os.getenv("BENCH_WRK_DIR") .. "/report.lua")
local users = tonumber(os.getenv("BENCH_USERS"))
local headers = { ["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN") }

function init(args)
  math.randomseed(os.time() * 1000 + tid)
end

function request()
  local user = math.random(1, users)
  return wrk.format("GET", "/v2/master-account/balance?server_id=0&user_id=" .. user, headers)
end
