import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { CreateBucketCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
// @ts-expect-error s3rver ships no types
import S3rver from "s3rver"
import * as Resource from "../src/Resource.js"
import * as ResourceStoreConformance from "../src/ResourceStoreConformance.js"
import * as S3ResourceStore from "../src/S3ResourceStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-resources-s3-"))
let server: { run: () => Promise<{ port: number }>; close: () => Promise<void> }
let client: S3Client

beforeAll(async () => {
  server = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory })
  const { port } = await server.run()
  client = new S3Client({
    endpoint: `http://127.0.0.1:${port}`,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" }
  })
  await client.send(new CreateBucketCommand({ Bucket: "resources" }))
})
afterAll(async () => {
  client?.destroy()
  await server?.close()
  fs.rmSync(directory, { recursive: true, force: true })
})

let counter = 0
const fresh = () => S3ResourceStore.make({ client, bucket: "resources", keyPrefix: `store-${counter++}/` })

describe("S3ResourceStore conformance (s3rver)", () => {
  for (const testCase of ResourceStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(Effect.sync(fresh)))
  }
})

describe("S3ResourceStore listing", () => {
  // s3rver's continuation tokens are DES-encrypted, which Node 24's OpenSSL 3 refuses (so does the
  // @20minutes/s3rver fork): a truncated listing fails on that server. Following NextContinuationToken
  // is therefore not exercised here; this checks the listing is one Prefix listing of the descendants.
  it.effect("findByPrefix lists only the URN's prefix", () =>
    Effect.gen(function* () {
      const keyPrefix = `listing-${counter++}/`
      const listings: Array<readonly [string, number]> = []
      const store = S3ResourceStore.make({
        client,
        bucket: "resources",
        keyPrefix,
        onList: (prefix, pages) => listings.push([prefix, pages])
      })
      const conversation = Resource.make("conversation", { name: "big" })
      const other = Resource.make("conversation", { name: "other" })
      yield* store.put(conversation)
      yield* store.put(other)
      const count = 30
      for (let i = 0; i < count; i++) {
        yield* store.put(
          Resource.make("chunk", { name: `k${i}`, parent: conversation.meta.urn, text: `chunk ${i}` })
        )
        yield* store.put(
          Resource.make("chunk", { name: `k${i}`, parent: other.meta.urn, text: `other ${i}` })
        )
      }
      const found = yield* store.findByPrefix(conversation.meta.urn)
      assert.equal(found.length, count)
      assert.isTrue(found.every((r) => r.meta.parent === conversation.meta.urn))
      // One listing, of the prefix alone: the other conversation's 30 objects are not read.
      assert.deepEqual(listings, [[`${keyPrefix}${conversation.meta.urn}/`, 1]])
      const raw = yield* Effect.promise(() =>
        client.send(new ListObjectsV2Command({ Bucket: "resources", Prefix: keyPrefix }))
      )
      assert.equal(raw.KeyCount, 2 + 2 * count)
    })
  )
})
