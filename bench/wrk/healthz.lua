-- GET /healthz: the HTTP ceiling of the same binary.
dofile(os.getenv("BENCH_WRK_DIR") .. "/report.lua")
wrk.method = "GET"
wrk.path = "/healthz"
