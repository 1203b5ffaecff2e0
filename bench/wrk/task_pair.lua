-- task.create then task.fulfill of the same id, alternating on each connection (run with -c equal to -t).
dofile(os.getenv("BENCH_DIR") .. "/common.lua")
local pending = nil

function request()
  if pending == nil then
    pending = next_id("t")
    return envelope("task.create",
      '{"pid":"bench","ttl":60000,"action":{"kind":"promise.create","head":{},"data":{"id":"' .. pending ..
      '","timeoutAt":' .. FAR .. ',"tags":{"resonate:target":"poll://any@bench"}}}}')
  end
  local id = pending
  pending = nil
  return envelope("task.fulfill",
    '{"id":"' .. id .. '","version":1,"action":{"kind":"promise.settle","head":{},"data":{"id":"' .. id ..
    '","state":"resolved","value":{"data":"NDI="}}}}')
end
