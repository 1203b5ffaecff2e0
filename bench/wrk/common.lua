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

-- Keep the first non-200 answer of each thread, and print them at the end of the run.
function note_error(status, body)
  if status ~= 200 and first_error == nil then first_error = status .. " " .. body end
end

function response(status, headers, body)
  note_error(status, body)
end

function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local error = thread:get("first_error")
    if error then print("first error: " .. error) end
  end
end
