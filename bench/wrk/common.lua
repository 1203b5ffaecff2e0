-- Shared by the wrk scripts: one id space per thread, an envelope builder.
local threads = {}
local counter = 0
local tid = 0
run = os.getenv("BENCH_RUN") or tostring(os.time())

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  tid = wrk.thread:get("tid")
end

function next_id(prefix)
  counter = counter + 1
  return string.format("%s-%s-%d-%d", prefix, run, tid, counter)
end

function envelope(kind, data)
  return wrk.format("POST", "/", {["Content-Type"] = "application/json"},
    '{"kind":"' .. kind .. '","head":{"corrId":"bench","version":"2026-04-01"},"data":' .. data .. '}')
end

FAR = "4102444800000"
