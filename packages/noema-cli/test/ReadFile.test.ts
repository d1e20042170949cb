import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Tool } from "@noema/core"
import { Effect } from "effect"
import * as ReadFile from "../src/tools/ReadFile.js"

let base: string
let root: string

beforeAll(() => {
  base = fs.mkdtempSync(path.join(os.tmpdir(), "noema-read-file-"))
  root = path.join(base, "project")
  fs.mkdirSync(path.join(root, "src"), { recursive: true })
  fs.writeFileSync(path.join(root, "README.md"), "# Hello\nworld\n")
  fs.writeFileSync(path.join(root, "src", "main.ts"), "export const x = 1\n")
  fs.writeFileSync(path.join(base, "secret.txt"), "top secret\n")
  fs.writeFileSync(path.join(root, "image.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x01]))
  fs.writeFileSync(path.join(root, "latin1.txt"), Buffer.from([0x63, 0x61, 0x66, 0xe9]))
  fs.writeFileSync(path.join(root, "big.txt"), "x".repeat(2048))
  fs.symlinkSync(path.join(base, "secret.txt"), path.join(root, "link-out.txt"))
  fs.symlinkSync(base, path.join(root, "dir-out"))
  fs.symlinkSync(path.join(root, "README.md"), path.join(root, "link-in.md"))
  execFileSync("mkfifo", [path.join(root, "pipe")])
})

afterAll(() => {
  fs.rmSync(base, { recursive: true, force: true })
})

const read = (requested: string, maxBytes?: number) =>
  ReadFile.readText(requested, { root, ...(maxBytes !== undefined && { maxBytes }) }).pipe(
    Effect.map((text) => ({ ok: true as const, text })),
    Effect.catch((error) =>
      Effect.succeed({ ok: false as const, reason: error.reason, message: error.message })
    )
  )

describe("ReadFile", () => {
  it.effect("reads text files under the root, also through links that stay inside", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* read("README.md"), { ok: true, text: "# Hello\nworld\n" })
      assert.deepStrictEqual(yield* read("./src/../src/main.ts"), { ok: true, text: "export const x = 1\n" })
      assert.deepStrictEqual(yield* read(path.join(root, "README.md")), {
        ok: true,
        text: "# Hello\nworld\n"
      })
      assert.deepStrictEqual(yield* read("link-in.md"), { ok: true, text: "# Hello\nworld\n" })
    })
  )

  it.effect("refuses every path that escapes the root", () =>
    Effect.gen(function* () {
      for (const outside of [
        "../secret.txt",
        "src/../../secret.txt",
        path.join(base, "secret.txt"),
        "/etc/passwd",
        "link-out.txt",
        "dir-out/secret.txt",
        "../project/../secret.txt"
      ]) {
        const result = yield* read(outside)
        assert.isFalse(result.ok, outside)
        if (!result.ok) {
          assert.strictEqual(result.reason, "OutsideRoot", outside)
          assert.notInclude(result.message, "top secret")
        }
      }
    })
  )

  it.effect("refuses directories, missing, binary, non-UTF-8 and oversized files", () =>
    Effect.gen(function* () {
      const reasonOf = (result: { ok: boolean; reason?: string }) => result.reason
      assert.strictEqual(reasonOf(yield* read("src")), "NotAFile")
      // A named pipe would block a plain open until something writes to it.
      assert.strictEqual(reasonOf(yield* read("pipe")), "NotAFile")
      assert.strictEqual(reasonOf(yield* read("missing.txt")), "NotFound")
      assert.strictEqual(reasonOf(yield* read("image.png")), "Binary")
      assert.strictEqual(reasonOf(yield* read("latin1.txt")), "Binary")
      assert.strictEqual(reasonOf(yield* read("big.txt", 1024)), "TooLarge")
      assert.isTrue((yield* read("big.txt", 4096)).ok)
    })
  )

  it.effect("reports refusals to the model as tool errors", () =>
    Effect.gen(function* () {
      const tool = ReadFile.make({ root })
      const message = yield* Tool.call(tool, {
        id: "c1",
        name: "read_file",
        arguments: '{"path":"../secret.txt"}'
      })
      assert.isTrue(message.isError)
      assert.match(message.content, /outside the working directory/)
      const ok = yield* Tool.call(tool, { id: "c2", name: "read_file", arguments: '{"path":"README.md"}' })
      assert.strictEqual(ok.content, "# Hello\nworld\n")
    })
  )
})
