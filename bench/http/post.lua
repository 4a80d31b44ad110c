-- post.lua — wrk script: POST the request body in the file $BODY as JSON.
-- (wrk itself reports "Non-2xx or 3xx responses", which run.sh checks.)
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
wrk.headers["Content-Type"] = "application/json"
f:close()
