// Starts the reference Durable Streams server (in memory, or file-backed
// with a data directory) and prints its URL: node ref-server.mjs PORT [DIR]
import { DurableStreamTestServer } from "@durable-streams/server"

const [port, dataDir] = process.argv.slice(2)
const server = new DurableStreamTestServer({
  port: Number(port),
  host: "127.0.0.1",
  longPollTimeout: 5000,
  ...(dataDir ? { dataDir } : {}),
})
await server.start()
console.log(`listening on http://127.0.0.1:${port}`)
const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
