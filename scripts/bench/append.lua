-- Single-message appends: one small text message per POST.
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
wrk.body = "hello, eddy"
