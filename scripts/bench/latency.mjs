// Append → live-reader latency: a long-poll reader waits at the tail, a
// writer appends, and we time from just before the append is sent until the
// reader has the data. Prints the p50 and p99 in milliseconds.
//   node latency.mjs BASE_URL [ROUNDS]
const [base, roundsArg] = process.argv.slice(2)
const rounds = Number(roundsArg ?? 300)
const url = `${base}/bench/latency-${Date.now()}`
await fetch(url, { method: "PUT", headers: { "content-type": "text/plain" } })
let offset = (await fetch(url, { method: "HEAD" })).headers.get("stream-next-offset")
const samples = []
for (let i = 0; i < rounds; i++) {
  const reader = fetch(`${url}?offset=${offset}&live=long-poll`)
  await new Promise((r) => setTimeout(r, 2))
  const t0 = performance.now()
  const write = fetch(url, { method: "POST", headers: { "content-type": "text/plain" }, body: `m${i}` })
  const response = await reader
  await response.arrayBuffer()
  const t1 = performance.now()
  await write
  if (response.status === 200) samples.push(t1 - t0)
  offset = response.headers.get("stream-next-offset") ?? offset
}
samples.sort((a, b) => a - b)
const pick = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))]
console.log(`${pick(0.5).toFixed(3)} ${pick(0.99).toFixed(3)} ${samples.length}`)
