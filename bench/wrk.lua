-- Posts the request bodies of a file, one per line, each once per pass (unique ids and
-- tokens), and prints the run's figures as one JSON line for bench/load.py.
-- Arguments: METHOD BODIES_FILE [HEADER ...] (headers as "Name: value").

local bodies = {}
local i = 0
local method = "POST"
local headers = {}

local thread_count = 0
function setup(thread)
  thread:set("tid", thread_count)
  thread_count = thread_count + 1
end

function init(args)
  method = args[1]
  for line in io.lines(args[2]) do
    bodies[#bodies + 1] = line
  end
  for k = 3, #args do
    local name, value = args[k]:match("^([^:]+):%s*(.*)$")
    headers[name] = value
  end
  -- each thread starts at its own share of the bodies (WRK_THREADS: how many threads
  -- share them), so that no two send the same body before a pass is done
  local threads = tonumber(os.getenv("WRK_THREADS")) or 8
  i = (tonumber(tid) or 0) * math.floor(#bodies / threads)
end

-- WRK_CLIENT_EVERY=k (k > 0): each group of k bodies is sent as from its own client,
-- X-Forwarded-For 3.a.b.c numbered from the body's place in the file (as bench/load.py's
-- client_address does)
local every = tonumber(os.getenv("WRK_CLIENT_EVERY")) or 0

function request()
  i = i + 1
  if i > #bodies then i = 1 end
  if every > 0 then
    local c = math.floor((i - 1) / every)
    headers["X-Forwarded-For"] = string.format(
      "3.%d.%d.%d", math.floor(c / 65536) % 256, math.floor(c / 256) % 256, c % 256)
  end
  return wrk.format(method, nil, headers, bodies[i])
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
