// State streams between eddy and the public @durable-streams/state package,
// both ways, through a running `eddy serve`:
//
// 1. The package writes (its insert, update, upsert and delete helpers, a
//    change event whose value is null, controls with an offset); the package
//    reads the stream back (MaterializedState, its stream DB) and eddy's
//    StateStream reads it (the `state_interop read` example): the rows must
//    be equal, and every message must come back from eddy's decode and
//    encode unchanged. A message no reader can apply must fail eddy's read
//    with its offset, or be skipped and listed when asked.
// 2. eddy writes (`state_interop write`); every message must pass the
//    package's JSON schema, and the package's readers must find the rows
//    eddy's own read finds.
// 3. Compaction: the package's readers find the same rows in a stream the
//    server's sweep compacted as in the same history kept whole.
// 4. The same as a property over random histories, with passes run at
//    random points (STATE_PROPERTY_CASES histories, 8 by default).
//
//   node interop.mjs SERVER_URL STATE_INTEROP_BIN
// Prints one `state:` line per check; exits non-zero on the first failure.
import assert from "node:assert/strict"
import { execFileSync, spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { DurableStream } from "@durable-streams/client"
import {
  MaterializedState,
  createStateSchema,
  isChangeEvent,
  isControlEvent,
} from "@durable-streams/state"
import { createStreamDB } from "@durable-streams/state/db"
import Ajv from "ajv"
import addFormats from "ajv-formats"

const [base, bin] = process.argv.slice(2)
if (!base || !bin) {
  console.error("usage: node interop.mjs SERVER_URL STATE_INTEROP_BIN")
  process.exit(2)
}
const run = `${process.pid}-${Date.now()}`

// Any row is valid: the check is about the wire, not the row types.
const anyRow = {
  "~standard": { version: 1, vendor: "eddy-interop", validate: (value) => ({ value }) },
}
const collections = {
  cards: { schema: anyRow, type: "card", primaryKey: "id" },
  settings: { schema: anyRow, type: "setting", primaryKey: "name" },
}
const schema = createStateSchema(collections)

async function create(path) {
  return DurableStream.create({ url: `${base}/${path}`, contentType: "application/json" })
}

/// The events of the stream at `path`, as the package's client reads them.
async function readEvents(path) {
  const stream = new DurableStream({ url: `${base}/${path}`, contentType: "application/json" })
  const response = await stream.stream({ live: false, json: true })
  return response.json()
}

/// The package's MaterializedState over `events` (a reset clears it: the
/// class applies changes only), as plain objects by type and key.
function materializeWithPackage(events) {
  const state = new MaterializedState()
  for (const event of events) {
    if (isChangeEvent(event)) state.apply(event)
    else if (isControlEvent(event) && event.headers.control === "reset") state.clear()
  }
  return Object.fromEntries(
    state.types.map((type) => [type, Object.fromEntries(state.getType(type))])
  )
}

/// The package's stream DB over the `card` rows of the stream at `path`
/// (its collections hold objects only, so the `setting` rows, one of them
/// null, are left out).
async function cardsFromStreamDB(path) {
  const db = createStreamDB({
    streamOptions: { url: `${base}/${path}`, contentType: "application/json" },
    state: { cards: collections.cards },
    live: false,
  })
  try {
    await db.preload()
    return Object.fromEntries(
      db.collections.cards.toArray.map((row) => [row.id, ownFields(row)])
    )
  } finally {
    db.close()
  }
}

/// A stream DB row without what the DB adds (`_seq`, `$`-prefixed fields).
const ownFields = (row) =>
  Object.fromEntries(Object.entries(row).filter(([k]) => k !== "_seq" && !k.startsWith("$")))

/// eddy's read of the stream at `path` (the example's JSON), or its error.
function readWithEddy(path, ...flags) {
  const out = spawnSync(bin, ["read", base, path, ...flags], { encoding: "utf8" })
  if (out.status !== 0) return { error: `${out.stderr}${out.stdout}`.trim() }
  return JSON.parse(out.stdout)
}

const offsetOf = async (stream) => (await stream.head()).offset

// 1. The package writes, eddy reads.
{
  const path = `interop/ts-${run}`
  const stream = await create(path)
  // The stream DB can apply a reset only after a change of each of its
  // collections in the same batch: a card precedes it.
  const events = [
    schema.cards.insert({ value: { id: "x", total: 0 } }),
    { headers: { control: "reset", offset: await offsetOf(stream) } },
    { headers: { control: "snapshot-start", offset: await offsetOf(stream) } },
    schema.cards.insert({ value: { id: "a", total: 1 }, headers: { txid: "t1", timestamp: "2025-01-15T10:30:00Z" } }),
    schema.cards.insert({ value: { id: "b", total: 2 } }),
    schema.cards.update({ value: { id: "a", total: 3 }, oldValue: { id: "a", total: 1 } }),
    schema.cards.upsert({ value: { id: "c", total: 4 } }),
    schema.cards.upsert({ value: { id: "c", total: 5 } }),
    schema.cards.delete({ key: "b", oldValue: { id: "b", total: 2 } }),
    schema.settings.insert({ value: { name: "theme", value: "dark" } }),
    // The package's insert helper reads the key field of the value, so a
    // null value is written as the ChangeEvent its types allow.
    { type: "setting", key: "font", value: null, headers: { operation: "insert" } },
  ]
  for (const event of events) await stream.append(JSON.stringify(event))
  await stream.append(JSON.stringify({ headers: { control: "snapshot-end", offset: await offsetOf(stream) } }))

  const written = await readEvents(path)
  assert.equal(written.length, events.length + 1, "the package reads back what it wrote")
  const expected = materializeWithPackage(written)
  assert.deepEqual(expected, {
    card: { a: { id: "a", total: 3 }, c: { id: "c", total: 5 } },
    setting: { theme: { name: "theme", value: "dark" }, font: null },
  }, "the package's own reading")
  assert.deepEqual(await cardsFromStreamDB(path), expected.card, "the package's stream DB")

  const eddy = readWithEddy(path)
  assert.ok(!eddy.error, `eddy failed to read what the package wrote: ${eddy.error}`)
  assert.deepEqual(eddy.collections, expected, "eddy's rows equal the package's")
  assert.deepEqual(eddy.messages, written, "every message comes back from eddy's decode and encode unchanged")
  console.log(`state: package → eddy: ${written.length} messages (insert, update, upsert, delete, a null value, controls with offsets), the same rows as MaterializedState and the stream DB, every message re-encoded unchanged`)
}

// 1b. A message no reader can apply, between two that decode.
{
  const path = `interop/ts-undecodable-${run}`
  const stream = await create(path)
  await stream.append(JSON.stringify(schema.cards.insert({ value: { id: "a", total: 1 } })))
  const bad = await offsetOf(stream)
  await stream.append(JSON.stringify({ type: "card", key: "z", value: {}, headers: { operation: "merge" } }))
  await stream.append(JSON.stringify(schema.cards.insert({ value: { id: "b", total: 2 } })))

  const failed = readWithEddy(path)
  assert.ok(failed.error, "eddy's read must fail on a message it cannot decode")
  assert.ok(failed.error.includes(bad), `the failure names the offset ${bad}: ${failed.error}`)
  const skipped = readWithEddy(path, "--skip-undecodable")
  assert.ok(!skipped.error, skipped.error)
  assert.deepEqual(skipped.skipped.map((s) => s.offset), [bad], "the skipped message is listed")
  assert.deepEqual(Object.keys(skipped.collections.card), ["a", "b"], "what comes before and after it is kept")
  console.log(`state: package → eddy: an undecodable message fails the read at its offset ${bad}, or is skipped and listed with --skip-undecodable`)
}

// 2. eddy writes, the package reads.
{
  const path = `interop/rs-${run}`
  execFileSync(bin, ["write", base, path], { stdio: ["ignore", "inherit", "inherit"] })
  const written = await readEvents(path)
  const eddy = readWithEddy(path)
  assert.ok(!eddy.error, eddy.error)

  const require = createRequire(import.meta.url)
  const protocol = JSON.parse(readFileSync(require.resolve("@durable-streams/state/package.json").replace(/package\.json$/, "state-protocol.schema.json"), "utf8"))
  const ajv = new Ajv({ strict: false })
  addFormats(ajv)
  const validate = ajv.compile(protocol)
  let upserts = 0
  for (const event of written) {
    // The schema's operation list lacks the `upsert` the package's own
    // helper writes: such a message is checked as the update it also is.
    const checked = event.headers?.operation === "upsert"
      ? (upserts++, { ...event, headers: { ...event.headers, operation: "update" } })
      : event
    assert.ok(validate(checked), `the package's JSON schema refuses ${JSON.stringify(event)}: ${ajv.errorsText(validate.errors)}`)
  }
  const kinds = new Set(written.map((e) => e.headers.operation ?? e.headers.control))
  for (const kind of ["insert", "update", "upsert", "delete", "reset", "snapshot-start", "snapshot-end"]) {
    assert.ok(kinds.has(kind), `eddy's writer wrote no ${kind}`)
  }
  assert.ok(written.some((e) => isControlEvent(e) && e.headers.offset), "a control with an offset")
  assert.ok(written.some((e) => isChangeEvent(e) && e.value === null), "a null value")

  const byPackage = materializeWithPackage(written)
  assert.ok(Object.keys(byPackage.card ?? {}).length > 0, "the package found cards")
  assert.deepEqual(byPackage, eddy.collections, "the package's rows equal eddy's")
  assert.deepEqual(await cardsFromStreamDB(path), eddy.collections.card, "the stream DB's cards equal eddy's")
  console.log(`state: eddy → package: ${written.length} messages pass the package's JSON schema (${upserts} upserts as updates), the same rows in MaterializedState and the stream DB as eddy reads`)
}

/// Creates the JSON stream at `path` with `headers` (a policy) over plain HTTP.
const put = (path, headers) =>
  fetch(`${base}/${path}`, { method: "PUT", headers: { "content-type": "application/json", ...headers } })

/// The package's rows of `events`, without the types that hold none.
const rows = (events) =>
  Object.fromEntries(Object.entries(materializeWithPackage(events)).filter(([, r]) => Object.keys(r).length > 0))

/// A random state change drawn with `next(n)`: an insert, update, upsert
/// or delete of one of `cards` card rows (three times in four) or of one of
/// `settings` setting rows.
function randomChange(next, cards, settings) {
  const operations = ["insert", "update", "upsert", "delete"]
  const card = next(4) > 0
  const id = `${card ? "k" : "s"}${next(card ? cards : settings)}`
  const operation = operations[next(4)]
  if (operation === "delete") return card ? schema.cards.delete({ key: id }) : schema.settings.delete({ key: id })
  return card
    ? schema.cards[operation]({ value: { id, total: next(1000) } })
    : schema.settings[operation]({ value: { name: id, value: next(10) } })
}

/// Appends `events` as one JSON batch; the offset after them.
async function append(path, events) {
  const response = await fetch(`${base}/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(events),
  })
  assert.ok(response.ok, `append: ${response.status}`)
  return response.headers.get("stream-next-offset")
}

// 3. Compaction: the package's MaterializedState finds the same rows in a
// compacted stream (`Eddy-Compaction: on`, compacted by the server's
// sweep) as in the same history kept whole, read from the start and from
// an offset in the middle; so does eddy's reader.
{
  const full = `interop/full-${run}`
  const compacted = `interop/compacted-${run}`
  assert.equal((await put(full, {})).status, 201)
  const created = await put(compacted, { "eddy-compaction": "on" })
  assert.equal(created.status, 201)
  assert.equal(created.headers.get("eddy-compaction"), "deletes=1d", "the policy is echoed")
  // A history with every operation, over few rows: most changes are
  // superseded. A small generator keeps it the same on every run.
  let seed = 7
  const next = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n)
  const batch = () => Array.from({ length: 20 }, () => randomChange(next, 12, 3))
  const history = []
  let middle
  for (let round = 0; round < 30; round++) {
    const events = batch()
    if (round === 10) events.push({ headers: { control: "reset" } })
    if (round === 12) events.unshift({ headers: { control: "snapshot-start" } })
    if (round === 14) events.push({ headers: { control: "snapshot-end" } })
    for (const path of [full, compacted]) {
      const offset = await append(path, events)
      if (round === 19 && path === compacted) middle = { offset, count: history.length + events.length }
    }
    history.push(...events)
  }

  const fullEvents = await readEvents(full)
  assert.equal(fullEvents.length, history.length)
  // The sweep compacts in the background: wait until it has.
  let kept = await readEvents(compacted)
  for (let tries = 0; kept.length === history.length && tries < 200; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    kept = await readEvents(compacted)
  }
  assert.ok(kept.length < history.length, `the server never compacted the stream (${kept.length} messages)`)
  const expected = rows(fullEvents)
  assert.deepEqual(rows(kept), expected, "MaterializedState from -1: compacted = full")

  const stream = new DurableStream({ url: `${base}/${compacted}`, contentType: "application/json" })
  const rest = await (await stream.stream({ offset: middle.offset, live: false, json: true })).json()
  assert.deepEqual(rows([...fullEvents.slice(0, middle.count), ...rest]), expected, "MaterializedState from the middle")

  const eddy = readWithEddy(compacted)
  assert.ok(!eddy.error, eddy.error)
  assert.deepEqual(eddy.collections, expected, "eddy's reader of the compacted stream")
  console.log(`state: compaction: ${kept.length} of ${history.length} messages kept; MaterializedState from -1 and from the middle, and eddy's reader, find the full history's rows`)
}

// 4. The same as a property: random histories (every operation, resets,
// snapshot controls) appended to a plain and a compacted stream alike,
// with a compaction pass run through the server (`POST /_eddy/compact/`)
// at random points. After each history: MaterializedState of the
// compacted stream, read from -1 and from the offset after every append,
// finds the plain stream's rows; the head within the policy's lag
// (`messages=4`) is kept whole.
{
  const seeds = Number(process.env.STATE_PROPERTY_CASES ?? 8)
  let compactions = 0
  for (let seed = 1; seed <= seeds; seed++) {
    let state = seed * 7919
    const next = (n) => ((state = (state * 1103515245 + 12345) % 2147483648), state % n)
    const full = `interop/property-full-${run}-${seed}`
    const compacted = `interop/property-compacted-${run}-${seed}`
    assert.equal((await put(full, {})).status, 201)
    assert.equal((await put(compacted, { "eddy-compaction": "messages=4" })).status, 201)
    const event = () => {
      const roll = next(40)
      if (roll === 0) return { headers: { control: "reset" } }
      if (roll === 1) return { headers: { control: ["snapshot-start", "snapshot-end"][next(2)] } }
      return randomChange(next, 6, 2)
    }
    const history = []
    const marks = []
    const rounds = 6 + next(10)
    for (let round = 0; round < rounds; round++) {
      const events = Array.from({ length: 1 + next(8) }, event)
      await append(full, events)
      const offset = await append(compacted, events)
      history.push(...events)
      marks.push({ offset, count: history.length })
      if (next(3) === 0) {
        const response = await fetch(`${base}/_eddy/compact/${compacted}`, { method: "POST" })
        assert.equal(response.status, 200, `compact: ${response.status}`)
        compactions += (await response.json()).dropped > 0 ? 1 : 0
      }
    }
    const fullEvents = await readEvents(full)
    assert.deepEqual(fullEvents, history, `seed ${seed}: the plain stream holds the history`)
    const expected = rows(fullEvents)
    const kept = await readEvents(compacted)
    assert.deepEqual(rows(kept), expected, `seed ${seed}: MaterializedState from -1`)
    assert.deepEqual(kept.slice(-4), fullEvents.slice(-4), `seed ${seed}: the head within the lag is whole`)
    const stream = new DurableStream({ url: `${base}/${compacted}`, contentType: "application/json" })
    for (const mark of marks) {
      const rest = await (await stream.stream({ offset: mark.offset, live: false, json: true })).json()
      const resumed = rows([...fullEvents.slice(0, mark.count), ...rest])
      assert.deepEqual(resumed, expected, `seed ${seed}: MaterializedState resumed at ${mark.offset}`)
    }
  }
  assert.ok(compactions > 0, "no pass dropped anything: the property checked nothing compacted")
  console.log(`state: compaction property: ${seeds} random histories, ${compactions} passes that dropped messages; MaterializedState from -1 and resumed after every append finds the plain stream's rows`)
}

