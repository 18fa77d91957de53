// The compaction bench's load (scripts/bench/compaction.sh runs it against
// a fresh `eddy serve`): UPSERTS upserts over KEYS keys, written in
// batches to a plain JSON stream, then to a compacted one while the
// server's sweep compacts it. Prints, as `name value` lines:
//
// - the append latency p50/p99 of each phase (the compacted stream's
//   phase runs while compaction passes run);
// - the bytes each stream keeps once compaction settled, beside the
//   working set (the latest message of every key);
// - a newcomer's read from -1 of each (time, bytes, messages) and its
//   materialization (a Map fold, as MaterializedState applies changes),
//   checked to give the same rows.
//
//   node compaction.mjs SERVER_URL
const [base] = process.argv.slice(2)
const upserts = Number(process.env.UPSERTS ?? 1_000_000)
const keys = Number(process.env.KEYS ?? 10_000)
const batch = Number(process.env.BATCH ?? 100)
const policy = process.env.POLICY ?? "on"

const json = { "content-type": "application/json" }

async function create(path, headers) {
  const response = await fetch(`${base}/${path}`, { method: "PUT", headers: { ...json, ...headers } })
  if (response.status !== 201) throw new Error(`create ${path}: ${response.status}`)
}

// A row's value: about 100 bytes, changing with every write.
const change = (i) =>
  JSON.stringify({
    type: "item",
    key: `k${(i * 7919) % keys}`,
    value: { n: i, note: "x".repeat(40), at: 1_700_000_000_000 + i },
    headers: { operation: "upsert" },
  })

/// Writes every upsert to `path`, a batch per request; the latencies in ms.
async function write(path) {
  const latencies = []
  for (let start = 0; start < upserts; start += batch) {
    const body = []
    for (let i = start; i < Math.min(start + batch, upserts); i++) body.push(change(i))
    const began = performance.now()
    const response = await fetch(`${base}/${path}`, { method: "POST", headers: json, body: `[${body.join(",")}]` })
    await response.arrayBuffer()
    latencies.push(performance.now() - began)
    if (!response.ok) throw new Error(`append: ${response.status}`)
  }
  return latencies
}

const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

const head = async (path) => {
  const response = await fetch(`${base}/${path}`, { method: "HEAD" })
  return Number(response.headers.get("eddy-stream-bytes"))
}

/// A newcomer's read of `path` from -1 to the tail: time, bytes, messages,
/// and the rows folded from them.
async function newcomer(path) {
  const began = performance.now()
  let offset = "-1"
  let bytes = 0
  const messages = []
  for (;;) {
    const response = await fetch(`${base}/${path}?offset=${offset}`)
    const text = await response.text()
    bytes += Buffer.byteLength(text)
    for (const message of JSON.parse(text)) messages.push(message)
    offset = response.headers.get("stream-next-offset")
    if (response.headers.get("stream-up-to-date") === "true") break
  }
  const read = performance.now() - began
  const folding = performance.now()
  const rows = new Map()
  for (const m of messages) {
    if (m.headers?.operation === "delete") rows.delete(`${m.type}/${m.key}`)
    else if (m.headers?.operation) rows.set(`${m.type}/${m.key}`, m.value)
    else if (m.headers?.control === "reset") rows.clear()
  }
  return { read, fold: performance.now() - folding, bytes, messages: messages.length, rows }
}

const print = (name, value) => console.log(`${name} ${typeof value === "number" ? Math.round(value * 100) / 100 : value}`)

await create("bench/plain", {})
await create("bench/compacted", { "eddy-compaction": policy })
const plain = await write("bench/plain")
const compacted = await write("bench/compacted")
print("append_p50_ms_plain", quantile(plain, 0.5))
print("append_p99_ms_plain", quantile(plain, 0.99))
print("append_p50_ms_while_compacting", quantile(compacted, 0.5))
print("append_p99_ms_while_compacting", quantile(compacted, 0.99))

// Wait until the sweep settled: the kept bytes stop moving.
let kept = await head("bench/compacted")
for (let still = 0; still < 3; ) {
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const now = await head("bench/compacted")
  still = now === kept ? still + 1 : 0
  kept = now
}
const working = new Map()
for (let i = 0; i < upserts; i++) working.set((i * 7919) % keys, Buffer.byteLength(change(i)))
const workingBytes = [...working.values()].reduce((a, b) => a + b, 0)
print("bytes_plain", await head("bench/plain"))
print("bytes_compacted", kept)
print("bytes_working_set", workingBytes)
print("kept_over_working_set", kept / workingBytes)

const full = await newcomer("bench/plain")
const small = await newcomer("bench/compacted")
for (const [name, r] of [["plain", full], ["compacted", small]]) {
  print(`newcomer_read_ms_${name}`, r.read)
  print(`newcomer_fold_ms_${name}`, r.fold)
  print(`newcomer_bytes_${name}`, r.bytes)
  print(`newcomer_messages_${name}`, r.messages)
}
let same = full.rows.size === small.rows.size
for (const [key, value] of full.rows) same &&= JSON.stringify(small.rows.get(key)) === JSON.stringify(value)
print("same_rows", same)
if (!same) process.exit(1)
