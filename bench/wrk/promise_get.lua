-- promise.get of promises prefilled by bench/run.py (ids g-<n>).
dofile(os.getenv("BENCH_DIR") .. "/common.lua")
local n = tonumber(os.getenv("BENCH_PREFILL") or "10000")

function request()
  return envelope("promise.get", '{"id":"g-' .. math.random(1, n) .. '"}')
end
