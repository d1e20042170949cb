/**
 * Summarises a `.cpuprofile` (from `node --cpu-prof`): the functions with the
 * most self time, and the packages their time is spent in, so a missed target
 * can be traced to a file and a function.
 *
 *   node bench/src/profile.ts <file.cpuprofile> [--top 30] [--filter noema]
 */
import { readFileSync } from "node:fs"
import { parseArgs } from "node:util"

interface ProfileNode {
  readonly id: number
  readonly callFrame: {
    readonly functionName: string
    readonly url: string
    readonly lineNumber: number
  }
  readonly children?: ReadonlyArray<number>
}

interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: "string", default: "30" }, filter: { type: "string" } }
})
const file = positionals[0]
if (file === undefined)
  throw new Error("usage: node bench/src/profile.ts <file.cpuprofile> [--top N] [--filter TEXT]")
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile

const selfMicros = new Map<number, number>()
profile.samples.forEach((id, index) => {
  selfMicros.set(id, (selfMicros.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0))
})
const total = [...selfMicros.values()].reduce((sum, value) => sum + value, 0)

const where = (url: string): string => {
  const modules = url.lastIndexOf("node_modules/")
  if (modules !== -1) return url.slice(modules + "node_modules/".length)
  const packages = url.indexOf("/packages/")
  if (packages !== -1) return url.slice(packages + 1)
  return url.replace(/^file:\/\//, "") || "(native)"
}

const packageOf = (url: string): string => {
  if (url === "") return "(native / GC / idle)"
  if (url.startsWith("node:")) return "node internals"
  const modules = url.lastIndexOf("node_modules/")
  if (modules !== -1) {
    const rest = url.slice(modules + "node_modules/".length).split("/")
    return rest[0]?.startsWith("@") ? `${rest[0]}/${rest[1]}` : (rest[0] ?? url)
  }
  const packages = url.match(/\/packages\/([^/]+)\//)
  if (packages?.[1] !== undefined) return packages[1]
  return url.includes("/bench/") ? "bench" : url
}

const byFunction = new Map<string, number>()
const byPackage = new Map<string, number>()
for (const node of profile.nodes) {
  const micros = selfMicros.get(node.id) ?? 0
  if (micros === 0) continue
  const { functionName, url, lineNumber } = node.callFrame
  const key = `${functionName || "(anonymous)"}  ${where(url)}:${lineNumber + 1}`
  byFunction.set(key, (byFunction.get(key) ?? 0) + micros)
  const owner = packageOf(url)
  byPackage.set(owner, (byPackage.get(owner) ?? 0) + micros)
}

const share = (micros: number) => `${((100 * micros) / total).toFixed(1).padStart(5)}%`
const top = Number(values.top)
const filter = values.filter

process.stdout.write(`total sampled: ${(total / 1000).toFixed(1)} ms\n\nself time by package:\n`)
for (const [name, micros] of [...byPackage].sort((a, b) => b[1] - a[1]).slice(0, 15)) {
  process.stdout.write(`  ${share(micros)}  ${(micros / 1000).toFixed(1).padStart(8)} ms  ${name}\n`)
}
process.stdout.write(
  `\nhottest functions by self time${filter === undefined ? "" : ` (matching "${filter}")`}:\n`
)
const functions = [...byFunction]
  .filter(([key]) => filter === undefined || key.includes(filter))
  .sort((a, b) => b[1] - a[1])
  .slice(0, top)
for (const [key, micros] of functions) {
  process.stdout.write(`  ${share(micros)}  ${(micros / 1000).toFixed(1).padStart(8)} ms  ${key}\n`)
}
