/**
 * S3ResourceStore: one JSON object per URN (`<prefix><urn>.json`) in an
 * S3-compatible bucket, through `@aws-sdk/client-s3`.
 *
 * `findByPrefix(urn)` lists the keys starting with `<urn>/` (`ListObjectsV2`
 * with `Prefix`, following continuation tokens), so it reads only the
 * descendants. An object PUT replaces the whole object at once. `findByType`
 * lists the whole bucket prefix (objects carry no type index).
 */
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client
} from "@aws-sdk/client-s3"
import { Effect, Layer } from "effect"
import * as Resource from "./Resource.js"
import {
  type BackendOptions,
  checkUrn,
  checkUrns,
  fromBackend,
  notFound,
  ResourceStore,
  ResourceStoreError,
  readListed,
  type Service
} from "./ResourceStore.js"

export interface Options extends BackendOptions {
  readonly client: S3Client
  readonly bucket: string
  /** Prepended to every key, e.g. "resources/". Defaults to "". */
  readonly keyPrefix?: string
  /** Keys per `ListObjectsV2` page (`MaxKeys`); the server's default (1000) when unset. */
  readonly pageSize?: number
  /** Called after each listing with its prefix and page count (for tests and tracing). */
  readonly onList?: (prefix: string, pages: number) => void
}

const isMissing = (error: unknown) => {
  const e = error as { name?: unknown; $metadata?: { httpStatusCode?: unknown } } | null
  return e?.name === "NoSuchKey" || e?.name === "NotFound" || e?.$metadata?.httpStatusCode === 404
}

export const make = (options: Options): Service => {
  const { client, bucket } = options
  const keyPrefix = options.keyPrefix ?? ""
  const keyOf = (urn: string) => `${keyPrefix}${urn}.json`
  const fail = (what: string) => (error: unknown) =>
    new ResourceStoreError({
      message: `s3://${bucket}/${keyPrefix}: ${what}: ${error instanceof Error ? error.message : String(error)}`,
      cause: error
    })
  const read = (key: string) =>
    Effect.tryPromise({
      try: async () => {
        let text: string
        try {
          const object = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))
          text = (await object.Body?.transformToString("utf8")) ?? ""
        } catch (error) {
          if (isMissing(error)) return undefined
          throw error
        }
        return Resource.decode(JSON.parse(text))
      },
      catch: fail(`cannot read ${key}`)
    })
  /** Every `.json` key under `prefix`, page by page. */
  const list = (prefix: string) =>
    readListed(
      Effect.tryPromise({
        try: async () => {
          const keys: Array<string> = []
          let token: string | undefined
          let pages = 0
          do {
            pages++
            const page = await client.send(
              new ListObjectsV2Command({
                Bucket: bucket,
                Prefix: prefix,
                ContinuationToken: token,
                MaxKeys: options.pageSize
              })
            )
            for (const object of page.Contents ?? []) if (object.Key?.endsWith(".json")) keys.push(object.Key)
            token = page.IsTruncated ? page.NextContinuationToken : undefined
          } while (token !== undefined)
          options.onList?.(prefix, pages)
          return keys
        },
        catch: fail(`cannot list ${prefix}`)
      }),
      read
    )
  return fromBackend(
    {
      write: (checked) =>
        Effect.tryPromise({
          try: () =>
            client.send(
              new PutObjectCommand({
                Bucket: bucket,
                Key: keyOf(checked.meta.urn),
                Body: JSON.stringify(checked),
                ContentType: "application/json"
              })
            ),
          catch: fail(`cannot write ${checked.meta.urn}`)
        }).pipe(Effect.asVoid),
      get: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.flatMap(read(keyOf(key)), (found) =>
            found === undefined ? Effect.fail(notFound(key)) : Effect.succeed(found)
          )
        ),
      getMany: (urns) =>
        Effect.flatMap(checkUrns(urns), (keys) =>
          Effect.map(
            Effect.forEach(keys, (key) => read(keyOf(key)), { concurrency: 16 }),
            (found) => found.filter((r): r is Resource.Resource => r !== undefined)
          )
        ),
      findByPrefix: (urn) => Effect.flatMap(checkUrn(urn), (key) => list(`${keyPrefix}${key}/`)),
      findByType: (type) => Effect.map(list(keyPrefix), (all) => all.filter((r) => r.meta.type === type)),
      delete: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.tryPromise({
            try: async () => {
              try {
                await client.send(new HeadObjectCommand({ Bucket: bucket, Key: keyOf(key) }))
              } catch (error) {
                if (isMissing(error)) return false
                throw error
              }
              await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: keyOf(key) }))
              return true
            },
            catch: fail(`cannot delete ${key}`)
          })
        )
    },
    options
  )
}

export const layer = (options: Options): Layer.Layer<ResourceStore> =>
  Layer.sync(ResourceStore, () => make(options))
