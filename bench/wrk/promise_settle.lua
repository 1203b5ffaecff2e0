-- promise.settle of pending promises prefilled by bench/run.py (ids s-<run>-<thread>-<n>), each settled once.
dofile(os.getenv("BENCH_DIR") .. "/common.lua")
local counter = 0

function request()
  counter = counter + 1
  return envelope("promise.settle",
    '{"id":"s-' .. run .. '-' .. tid .. '-' .. counter .. '","state":"resolved","value":{"data":"NDI="}}')
end
