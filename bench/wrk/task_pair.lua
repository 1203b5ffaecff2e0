-- task.create then task.fulfill of the same id, on one connection per thread (run with -c equal to -t).
-- The fulfill is sent only once the create has answered 200: wrk may call request() ahead of time.
dofile(os.getenv("BENCH_DIR") .. "/common.lua")
local id = nil
local created = false

function request()
  if created then
    created = false
    return envelope("task.fulfill",
      '{"id":"' .. id .. '","version":1,"action":{"kind":"promise.settle","head":{},"data":{"id":"' .. id ..
      '","state":"resolved","value":{"data":"NDI="}}}}')
  end
  id = next_id("t")
  return envelope("task.create",
    '{"pid":"bench","ttl":60000,"action":{"kind":"promise.create","head":{},"data":{"id":"' .. id ..
    '","timeoutAt":' .. FAR .. ',"tags":{"resonate:target":"poll://any@bench"}}}}')
end

function response(status, headers, body)
  note_error(status, body)
  created = status == 200 and string.find(body, '"kind":%s*"task.create"') ~= nil
end
