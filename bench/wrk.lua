-- One POST per request to /mcp with a bearer token taken round-robin from TOKENS_FILE.
-- BODY_FILE holds the JSON-RPC body, HEADERS_FILE extra headers ("name: value" per line).
-- Each response is checked: HTTP 200 and a JSON-RPC result that is not an error.
local function read(path)
  local f = assert(io.open(path, "r")); local s = f:read("*a"); f:close(); return s
end

local tokens, body, extra = {}, nil, {}
local counter, errors = 0, 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  body = read(os.getenv("BODY_FILE"))
  for t in string.gmatch(read(os.getenv("TOKENS_FILE")), '"([^"]+)"') do table.insert(tokens, t) end
  for line in string.gmatch(read(os.getenv("HEADERS_FILE")), "[^\n]+") do
    local k, v = string.match(line, "^([^:]+):%s*(.*)$")
    if k then extra[k] = v end
  end
end

function request()
  counter = counter + 1
  local headers = {}
  for k, v in pairs(extra) do headers[k] = v end
  headers["Authorization"] = "Bearer " .. tokens[(counter % #tokens) + 1]
  return wrk.format("POST", nil, headers, body)
end

function response(status, headers, resp)
  if status ~= 200 or string.find(resp, '"error"', 1, true) or string.find(resp, '"isError":true', 1, true) then
    errors = errors + 1
  end
end

function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + (t:get("errors") or 0) end
  io.write(string.format('WRKJSON {"requests": %d, "duration_us": %d, "non2xx": %d, "errors": %d, "socket_errors": %d, "p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status, bad,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
