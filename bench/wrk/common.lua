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

-- Count the answers that are not 200 (by head.status too: the peer answers every request with HTTP 200), keep
-- the first of each thread, and print them at the end of the run.
refused = 0

function note_error(status, body)
  local answered = tonumber(string.match(body, '"status":%s*(%d+)')) or status
  if status ~= 200 or answered ~= 200 then
    refused = refused + 1
    if first_error == nil then first_error = status .. " " .. body end
  end
end

function response(status, headers, body)
  note_error(status, body)
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do
    local error = thread:get("first_error")
    if error then print("first error: " .. error) end
    total = total + (thread:get("refused") or 0)
  end
  print("refused answers: " .. total)
end
