import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as FileResourceStore from "../src/FileResourceStore.js"
import * as ResourceStoreConformance from "../src/ResourceStoreConformance.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-resources-files-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

let counter = 0
const fresh = () => FileResourceStore.make({ directory: path.join(directory, `store-${counter++}`) })

describe("FileResourceStore conformance", () => {
  for (const testCase of ResourceStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(Effect.sync(fresh)))
  }
})

describe("FileResourceStore files", () => {
  it.effect("one JSON file per URN, laid out as the URN's path, no temporary files left", () =>
    Effect.gen(function* () {
      const root = path.join(directory, `store-${counter++}`)
      const store = FileResourceStore.make({ directory: root })
      const t = ResourceStoreConformance.tree()
      for (const r of [t.conversation, t.m1, t.task]) yield* store.put(r)
      yield* store.put(t.task)
      const files = (fs.readdirSync(root, { recursive: true }) as Array<string>)
        .filter((f) => f.endsWith(".json"))
        .sort()
      assert.deepEqual(files, [t.conversation, t.m1, t.task].map((r) => `${r.meta.urn}.json`).sort())
      assert.deepEqual(
        ResourceStoreConformance.withoutStamps(
          JSON.parse(fs.readFileSync(path.join(root, `${t.task.meta.urn}.json`), "utf8"))
        ),
        t.task
      )
      const all = fs.readdirSync(root, { recursive: true }) as Array<string>
      assert.equal(all.filter((f) => f.endsWith(".tmp")).length, 0)
    })
  )

  it.effect("a corrupt file is reported with its name, not skipped", () =>
    Effect.gen(function* () {
      const root = path.join(directory, `store-${counter++}`)
      const store = FileResourceStore.make({ directory: root })
      const t = ResourceStoreConformance.tree()
      yield* store.put(t.conversation)
      yield* store.put(t.m1)
      fs.writeFileSync(path.join(root, `${t.m1.meta.urn}.json`), "{not json")
      const error = yield* Effect.flip(store.findByPrefix(t.conversation.meta.urn))
      assert.equal(error._tag, "ResourceStoreError")
      assert.include(error.message, `${t.m1.meta.urn}.json`)
    })
  )
})
