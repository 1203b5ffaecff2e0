-- promise.create with a target: a promise, its task and an execute message per request.
dofile(os.getenv("BENCH_DIR") .. "/common.lua")

function request()
  local id = next_id("c")
  return envelope("promise.create",
    '{"id":"' .. id .. '","timeoutAt":' .. FAR .. ',"param":{"data":"eyJmdW5jIjoiZiJ9"},"tags":{"resonate:target":"poll://any@bench"}}')
end
