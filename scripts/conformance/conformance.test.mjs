// Runs the public Durable Streams server conformance suite against the
// server at EDDY_BASE_URL (started by run.sh).
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.EDDY_BASE_URL
if (!baseUrl) throw new Error("set EDDY_BASE_URL (run.sh does)")

runConformanceTests({
  baseUrl,
  longPollTimeoutMs: Number(process.env.EDDY_LONG_POLL_MS ?? 500),
  // eddy implements the reserved `__ds/subscriptions` API too.
  subscriptions: true,
})
